"""``dcm-status``: run the local stack and talk to the pipeline.

Against the local stack (state in ``.dcm/``), or against Google Cloud when no
local stack runs and DCM_PROJECT is set (credentials from the environment).
"""

from __future__ import annotations

import sys

import click

from infra import reports
from infra.cli.billing import billing
from infra.cli.common import connect, emit_json
from infra.cli.dlq import dlq
from infra.stack import LocalStack
from shared.contracts.identity import PROVIDER_NAME
from shared.contracts.model import ResourceKey
from shared.upsert import queries


@click.group()
def cli() -> None:
    """Cloud resource status reporting: local stack and operator tools."""


@cli.command()
@click.option("--providers", default=None, help="Comma-separated provider names (default: topology's list).")
@click.option("--chaos", is_flag=True, help="Put a fault proxy in front of Firestore (outage tests).")
def up(providers: str | None, chaos: bool) -> None:
    """Start emulators and functions, create the topology (idempotent)."""
    wanted = [p.strip() for p in providers.split(",") if p.strip()] if providers else None
    for p in wanted or []:
        if not PROVIDER_NAME.match(p):
            raise click.BadParameter(f"invalid provider name {p!r}", param_hint="--providers")
    state = LocalStack().up(wanted, chaos=chaos)
    click.echo(f"local stack up: project {state.project}, Pub/Sub {state.pubsub_host}, "
               f"Firestore {state.firestore_host}, providers {', '.join(state.providers)}", err=True)
    for name, f in state.functions.items():
        click.echo(f"  function {name:<11} http://127.0.0.1:{f['port']}", err=True)


@cli.command()
def down() -> None:
    """Stop everything 'up' started."""
    stopped = LocalStack().down()
    click.echo("local stack stopped" if stopped else "local stack was not running", err=True)


@cli.group()
def provider() -> None:
    """Manage providers (one ingress topic and push subscription each)."""


@provider.command("add")
@click.argument("name")
def provider_add(name: str) -> None:
    if not PROVIDER_NAME.match(name):
        raise click.BadParameter("lowercase letters, digits and '-'", param_hint="NAME")
    try:
        state = LocalStack().add_provider(name)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"provider {name} added; providers: {', '.join(state.providers)}", err=True)


@provider.command("run-aws")
@click.option("--region", default="us-east-1", show_default=True)
@click.option("--endpoint-url", default=None, help="An EC2-compatible endpoint (e.g. a moto server).")
@click.option("--name", "provider_name", default="aws", show_default=True, help="The DCM provider name.")
@click.option("--interval", default=15.0, show_default=True, help="Seconds between polls.")
@click.option("--once", is_flag=True, help="Poll once and exit.")
def provider_run_aws(region: str, endpoint_url: str | None, provider_name: str, interval: float, once: bool) -> None:
    """The AWS reference provider: report EC2 instance states as DCM vm status events."""
    import time

    import boto3

    from infra.providers.aws_ec2 import Ec2Bridge
    from infra.providers.reporter import StatusReporter

    conn = connect()
    bridge = Ec2Bridge(boto3.client("ec2", region_name=region, endpoint_url=endpoint_url),
                       StatusReporter(conn.publisher(), conn.project, provider_name, conn.topology.ingress_template),
                       region)
    while True:
        for o in bridge.poll_once():
            click.echo(f"{o.instance_id} {o.state} -> {o.status} at {o.transition_time}", err=True)
        if once:
            return
        time.sleep(interval)


@cli.command()
@click.option("--json", "as_json", is_flag=True)
def env(as_json: bool) -> None:
    """Where the stack runs: project, emulator hosts, topics."""
    stack = LocalStack()
    state = stack.running()
    if state is None:
        raise click.ClickException("the local stack is not running: dcm-status up")
    topo = stack.topology(state)
    value = {
        "project": state.project,
        "pubsub_emulator_host": state.pubsub_host,
        "firestore_emulator_host": state.firestore_host,
        "functions": {n: f"http://127.0.0.1:{f['port']}" for n, f in state.functions.items()},
        "topics": {
            "ingress": {t.provider: f"projects/{state.project}/topics/{t.name}"
                        for t in topo.topics if t.key == "ingress"},
            **{t.key: f"projects/{state.project}/topics/{t.name}" for t in topo.topics if t.key != "ingress"},
        },
    }
    if as_json:
        emit_json(value)
    else:
        for k, v in stack.client_env(state).items():
            click.echo(f"export {k}={v}")


@cli.command()
@click.option("--provider", "provider_name", required=True)
@click.option("--type", "resource_type", required=True)
@click.option("--id", "resource_id", required=True)
@click.option("--status", required=True)
@click.option("--message", default="")
@click.option("--time", "event_time", default=None, help="RFC 3339 event time (default: now).")
@click.option("--event-id", default=None)
@click.option("--mode", type=click.Choice(["structured", "binary"]), default="structured")
def publish(provider_name: str, resource_type: str, resource_id: str, status: str, message: str,
            event_time: str | None, event_id: str | None, mode: str) -> None:
    """Publish one status CloudEvent as a provider would."""
    from infra.providers.reporter import StatusReporter

    conn = connect()
    reporter = StatusReporter(conn.publisher(), conn.project, provider_name, conn.topology.ingress_template)
    future = reporter.report(resource_type, resource_id, status, message, mode=mode, time=event_time,
                             event_id=event_id, last_transition_time=event_time)
    click.echo(future.result(timeout=30))


@cli.command()
@click.argument("key")
@click.option("--json", "as_json", is_flag=True)
@click.option("--history", "with_history", is_flag=True, help="Include the update history.")
def get(key: str, as_json: bool, with_history: bool) -> None:
    """Show the stored state of PROVIDER/TYPE/ID (exit 1 when unknown)."""
    try:
        rkey = ResourceKey.parse(key)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="KEY") from exc
    db = connect().firestore()
    doc = queries.get_resource(db, rkey)
    if doc is None:
        click.echo(f"unknown resource {key}", err=True)
        sys.exit(1)
    if with_history:
        doc["history"] = queries.history(db, rkey)
    if as_json:
        emit_json(doc)
    else:
        click.echo(f"{doc['key']}  {doc['status']}  since {doc['lastTransitionTime']}  {doc['message']}")


@cli.command("list")
@click.option("--provider", "provider_name", default=None)
@click.option("--type", "resource_type", default=None)
@click.option("--status", default=None)
@click.option("--limit", type=int, default=None)
@click.option("--json", "as_json", is_flag=True)
def list_cmd(provider_name: str | None, resource_type: str | None, status: str | None, limit: int | None,
             as_json: bool) -> None:
    """List stored resources, filtered."""
    docs = list(queries.list_resources(connect().firestore(), provider_name, resource_type, status, limit))
    if as_json:
        emit_json(docs)
        return
    for d in sorted(docs, key=lambda d: d["key"]):
        click.echo(f"{d['key']:<50} {d['status']:<13} {d['lastTransitionTime']}")


@cli.command()
@click.option("--json", "as_json", is_flag=True)
def stats(as_json: bool) -> None:
    """Counters: received, applied, duplicate, stale, deadlettered."""
    value = reports.stats(connect().firestore())
    if as_json:
        emit_json(value)
    else:
        for k, v in value.items():
            click.echo(f"{k:<14}{v}")


@cli.command()
@click.option("--resources", default=300, show_default=True, help="How many resources in the fleet.")
@click.option("--seed", default=7, show_default=True, help="Random seed (same seed, same fleet).")
@click.option("--timeout", default=300.0, show_default=True, help="Seconds to wait for processing.")
def demo(resources: int, seed: int, timeout: float) -> None:
    """Fleet simulation on the local stack; prints states, dead letters and the accounting line."""
    from infra.demo import run as fleet_demo

    conn = connect()
    if not conn.local:
        raise click.ClickException("the demo runs on the local stack (it resets its Firestore): dcm-status up")
    if not fleet_demo.run(conn, resources, seed, timeout):
        sys.exit(1)


cli.add_command(dlq)
cli.add_command(billing)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
