"""``dcm-status``: run the local stack and talk to the pipeline.

Against the local stack (state in ``.dcm/``), or against Google Cloud when no
local stack runs and DCM_PROJECT is set (credentials from the environment).
"""

from __future__ import annotations

import sys
from dataclasses import asdict

import click
from dcm_status_contracts.model import ResourceKey

from infra.cli.common import check_provider_name, connect
from infra.cli.errors import Group
from infra.console import JSON, WIDE, emit_json, fields, table, to_text
from infra.local.health import Condition
from infra.local.stack import LocalStack, production_only


# Commands defined in modules of their own, loaded when run: a command starts with what it uses only.
SUBCOMMANDS = {"billing": "infra.cli.billing:billing", "callbacks": "infra.cli.callbacks:callbacks",
               "dlq": "infra.cli.dlq:dlq", "logs": "infra.cli.live:logs", "watch": "infra.cli.live:watch",
               "trace": "infra.cli.trace:trace", "provider": "infra.cli.provider:provider",
               "publish": "infra.cli.publish:publish"}


@click.group(cls=Group, lazy=SUBCOMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dcm-status", prog_name="dcm-status")
def cli() -> None:
    """Cloud resource status reporting: local stack and operator tools.

    \b
    Start here:
      dcm-status up            # emulators + functions, on this machine
      dcm-status demo          # a simulated fleet through the pipeline
      dcm-status list --status running
    Shell completion (bash): eval "$(_DCM_STATUS_COMPLETE=bash_source dcm-status)"
    """


@cli.command()
@click.option("--providers", default=None, help="Comma-separated provider names (default: topology's list).")
@click.option("--chaos", is_flag=True, help="Put a fault proxy in front of Firestore (outage tests).")
def up(providers: str | None, chaos: bool) -> None:
    """Start emulators and functions, create the topology (idempotent: restarts only what is down).

    Example: dcm-status up --providers aws,kubevirt --chaos
    """
    wanted = [p.strip() for p in providers.split(",") if p.strip()] if providers else None
    for p in wanted or []:
        check_provider_name(p, "--providers")
    stack = LocalStack()
    before = stack.running()
    state = stack.up(wanted, chaos=chaos)
    if before is not None and chaos and not before.firestore_proxy:
        click.echo("the functions were restarted behind a Firestore fault proxy (data kept)", err=True)
    click.echo(f"local stack up: project {state.project}, Pub/Sub {state.pubsub_host}, "
               f"Firestore {state.firestore_host}, providers {', '.join(state.providers)}", err=True)
    for name, f in state.functions.items():
        click.echo(f"  function {name:<11} http://127.0.0.1:{f['port']}", err=True)
    if state.nats:
        click.echo(f"NATS (JetStream): {state.nats_url}  (a provider's identity: dcm-status provider "
                   "nats-credentials NAME --json)", err=True)
    for line in production_only(stack.topology(state)):
        click.echo(f"  {line}", err=True)
    if "api" in state.functions:
        click.echo(f"dashboard and status API: {stack.function_url(state, 'api')}", err=True)
    if "notify" in state.functions:
        click.echo("webhook callbacks: local mode, plain http and loopback hooks are allowed (production: https to "
                   "public addresses only; docs/callbacks.md)", err=True)


@cli.command()
def down() -> None:
    """Stop everything 'up' started. The emulators keep nothing: stored states, dead letters and
    undelivered messages are gone.

    Example: dcm-status down
    """
    stopped = LocalStack().down()
    click.echo("local stack stopped; its emulator data (resources, dead letters, undelivered messages) is gone"
               if stopped else "local stack was not running", err=True)


@cli.command()
@JSON
def status(as_json: bool) -> None:
    """Health of the local stack: each process up, down or restarting (exit 1 unless all are up).

    Example: dcm-status status || dcm-status up
    """
    stack = LocalStack()
    state = stack.running()
    if state is None:
        raise click.ClickException("the local stack is not running: dcm-status up")
    rows = stack.health(state)
    if as_json:
        emit_json([asdict(h) for h in rows])
    else:
        table(("component", "status", "restarts", "where", "detail"),
              ((h.component, h.status, h.restarts, h.where, h.detail) for h in rows), flexible=("where", "detail"))
    unhealthy = [f"{h.component} {h.status}" for h in rows if h.status is not Condition.UP]
    if unhealthy:
        click.echo(f"unhealthy: {'; '.join(unhealthy)}", err=True)
        sys.exit(1)


@cli.command()
@JSON
def env(as_json: bool) -> None:
    """Where the stack runs: project, emulator hosts, topics.

    Example: eval "$(dcm-status env)"   # point this shell's client libraries at the local stack
    """
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
@click.argument("key")
@JSON
@click.option("--history", "with_history", is_flag=True, help="Include the update history.")
def get(key: str, as_json: bool, with_history: bool) -> None:
    """Show the stored state of PROVIDER/TYPE/ID (exit 1 when unknown).

    Example: dcm-status get aws/vm/i-0abc --history
    """
    from shared.api import queries

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
        fields((name, doc.get(name)) for name in
               ("key", "status", "message", "reason", "lastTransitionTime", "eventTime", "rawStatus", "metadata",
                "resourceSpecific", "updatedAt"))
        for h in doc.get("history", []):
            click.echo(f"{'history':<20}{h.get('observedAt')}  {h.get('status')}  {to_text(h.get('message'))}")


@cli.command("list")
@click.option("--provider", "provider_name", default=None, help="Only this provider.")
@click.option("--type", "resource_type", default=None, help="Only this resource type.")
@click.option("--status", default=None, help="Only this status (any case: running = RUNNING).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many.")
@JSON
@WIDE
def list_cmd(provider_name: str | None, resource_type: str | None, status: str | None, limit: int | None,
             as_json: bool, wide: bool) -> None:
    """List stored resources, filtered (filters are case-insensitive, as ingest is).

    Example: dcm-status list --provider aws --status running
    """
    from dcm_status_contracts.schemas import status_token

    from shared.api import queries

    docs = list(queries.list_resources(connect().firestore(), provider_name.lower() if provider_name else None,
                                       resource_type.lower() if resource_type else None,
                                       status_token(status) if status else None, limit))
    docs.sort(key=lambda d: d["key"])
    if as_json:
        emit_json(docs)
        return
    table(("key", "status", "since", "message"),
          ((d["key"], d["status"], d.get("lastTransitionTime"), d.get("message")) for d in docs),
          wide=wide, flexible=("key", "message"))
    if not docs:
        click.echo("no resources match", err=True)


@cli.command()
@JSON
def stats(as_json: bool) -> None:
    """Counters: received = applied + unchanged (re-reports) + duplicate + stale + deadlettered.

    Example: dcm-status stats --json
    """
    from shared.api import queries

    value = queries.stats(connect().firestore())
    if as_json:
        emit_json(value)
    else:
        for k, v in value.items():
            click.echo(f"{k:<14}{v}")


@cli.command()
@click.option("--resources", default=300, show_default=True, type=click.IntRange(1, 100_000),
              help="How many resources in the fleet.")
@click.option("--seed", default=7, show_default=True, help="Random seed (same seed, same fleet).")
@click.option("--timeout", default=300.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds to wait for processing.")
@click.option("--reset", is_flag=True, help="Erase what the local Firestore holds without asking.")
def demo(resources: int, seed: int, timeout: float, reset: bool) -> None:
    """Fleet simulation on the local stack; prints states, dead letters and the accounting line.

    It starts from an empty Firestore: data you stored is erased only with --reset or your yes.

    Example: dcm-status demo --resources 1000 --seed 3
    """
    from infra.demo import run as fleet_demo

    conn = connect()
    if not conn.local:
        raise click.ClickException("the demo runs on the local stack (it resets its Firestore): dcm-status up")
    ok = fleet_demo.run(conn, resources, seed, timeout, reset=reset)
    stack = LocalStack()
    state = stack.running()
    if state is not None and "api" in state.functions:
        click.echo(f"dashboard: {stack.function_url(state, 'api')}  (make demo KEEP=1 leaves it up)")
    if not ok:
        sys.exit(1)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
