"""``dcm-status``: run the local stack and talk to the pipeline.

Against the local stack (state in ``.dcm/``), or against Google Cloud when no
local stack runs and DCM_PROJECT is set (credentials from the environment).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from dataclasses import asdict
from typing import Any, Iterator

import click
from dcm_status_contracts.identity import provider_name_problem
from dcm_status_contracts.model import ResourceKey
from dcm_status_contracts.pubsub_binding import BindingMode
from google.api_core import exceptions as gexc

from infra.cli.common import connect
from infra.cli.errors import Group
from infra.cli.natspublish import Via, subject_of
from infra.cli.natspublish import publish as nats_publish
from infra.console import JSON, WIDE, emit_json, fields, table, to_text
from infra.local.health import Condition
from infra.local.stack import LocalStack, production_only


def _types_and_statuses() -> str:
    from dcm_status_contracts.schemas import registry

    reg = registry()
    return "\n".join(f"  {t}: {', '.join(reg.current[t].statuses)}" for t in reg.resource_types)


# Commands defined in modules of their own, loaded when run: a command starts with what it uses only.
SUBCOMMANDS = {"billing": "infra.cli.billing:billing", "callbacks": "infra.cli.callbacks:callbacks",
               "dlq": "infra.cli.dlq:dlq", "logs": "infra.cli.live:logs", "watch": "infra.cli.live:watch",
               "trace": "infra.cli.trace:trace"}


def _check_provider_name(name: str, hint: str) -> None:
    """A name no provider may have (the rule, or a name the platform's NATS users hold): a usage error."""
    problem = provider_name_problem(name)
    if problem:
        raise click.BadParameter(problem, param_hint=hint)


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
        _check_provider_name(p, "--providers")
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


@cli.group()
def provider() -> None:
    """Manage providers (one ingress topic and push subscription each)."""


@provider.command("add")
@click.argument("name")
def provider_add(name: str) -> None:
    """Add a provider to the running local stack (its ingress topic and subscription).

    Example: dcm-status provider add openstack
    """
    _check_provider_name(name, "NAME")
    try:
        state = LocalStack().add_provider(name)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"provider {name} added; providers: {', '.join(state.providers)}", err=True)
    if state.nats:
        click.echo(f"its NATS identity: dcm-status provider nats-credentials {name} --json", err=True)


@provider.command("nats-credentials")
@click.argument("name")
@JSON
def provider_nats_credentials(name: str, as_json: bool) -> None:
    """Print the NATS URL, user and password provider NAME connects with (the local stack's).

    An unchanged dcm-project provider is pointed at it with NATS_URL=nats://USER:PASSWORD@HOST:PORT and
    publishes on its usual subjects (dcm.vm, dcm.cluster, ...); the server files them under
    providers.NAME. The password is a secret: this prints it, so mind where the output goes.

    Example: dcm-status provider nats-credentials osac --json
    """
    stack = LocalStack()
    state = stack.running()
    if state is None:
        raise click.ClickException("the local stack is not running: dcm-status up")
    if not state.nats:
        raise click.ClickException("this local stack runs no NATS (infra/topology.yaml declares no nats: section)")
    identity = stack.nats_credentials(state, name)
    if identity is None:
        raise click.ClickException(f"provider {name} not added; run 'dcm-status provider add {name}'")
    value = {"url": state.nats_url, "user": identity.user, "password": identity.password}
    if as_json:
        emit_json(value)
    else:
        fields(value.items())
        click.echo(f"NATS_URL={identity.url(state.nats_url)}")


@contextlib.contextmanager
def _one_line(*kinds: type[Exception]) -> Iterator[None]:
    """These errors, whose message says what to do, end the command as that one line (exit 1)."""
    try:
        yield
    except kinds as exc:
        raise click.ClickException(str(exc)) from exc


@provider.command("run-aws")
@click.option("--region", default="us-east-1", show_default=True, help="The AWS region to poll.")
@click.option("--endpoint-url", default=None, help="An EC2-compatible endpoint (e.g. a moto server).")
@click.option("--name", "provider_name", default="aws", show_default=True, help="The DCM provider name.")
@click.option("--interval", default=15.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds between polls.")
@click.option("--once", is_flag=True, help="Poll once and exit.")
def provider_run_aws(region: str, endpoint_url: str | None, provider_name: str, interval: float, once: bool) -> None:
    """The AWS reference provider, on the provider kit: report EC2 instance states as DCM vm status.

    Credentials are boto3's (environment, profile, instance role). Against moto, any will do:

    Example: AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing dcm-status provider run-aws --endpoint-url http://127.0.0.1:5000 --once
    """
    import threading
    from urllib.parse import urlparse

    import boto3
    from botocore.config import Config
    from dcm_status_sdk import FlushTimeout, PublishRefused, Reporter, ReporterConfig

    from infra.providers.aws_ec2 import Ec2Bridge

    if endpoint_url and (urlparse(endpoint_url).scheme not in ("http", "https") or not urlparse(endpoint_url).netloc):
        raise click.BadParameter(f"{endpoint_url!r} is not an http(s) URL", param_hint="--endpoint-url")
    _check_provider_name(provider_name, "--name")
    conn = connect()
    # bounded: an unreachable endpoint is an error in seconds, not minutes of retries
    config = Config(connect_timeout=5, read_timeout=15, retries={"max_attempts": 2, "mode": "standard"})
    refused = threading.Event()  # Pub/Sub refused reports for good: stop polling, close says why
    with _one_line(PublishRefused):  # no topic, no permission, no credentials: what to do, exit 1
        reporter = Reporter(ReporterConfig(project=conn.project, provider=provider_name,
                                           topic=conn.topology.ingress_template),
                            on_refused=lambda _: refused.set())
        bridge = Ec2Bridge(boto3.client("ec2", region_name=region, endpoint_url=endpoint_url, config=config),
                           reporter, region)
        try:
            while True:
                for o in bridge.poll_once():
                    click.echo(f"{o.instance_id} {o.state} -> {o.status.status} at {o.transition_time}", err=True)
                if once or refused.wait(interval):
                    break
        finally:  # an AWS error (no credentials, endpoint down) is one line too: infra/cli/errors.py
            try:
                reporter.close(timeout=30)
            except FlushTimeout as exc:
                raise click.ClickException(f"{exc} (Pub/Sub: {reporter.stats().last_error})") from exc


@provider.command("run-kubernetes")
@click.option("--api-url", required=True, help="The Kubernetes API server, e.g. https://api.cluster.example:6443.")
@click.option("--kind", "kind_name", type=click.Choice(["pods", "vmis"]), default="pods", show_default=True,
              help="pods (container status) or KubeVirt vmis (vm status).")
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A bearer token (in a pod: /var/run/secrets/kubernetes.io/serviceaccount/token).")
@click.option("--ca-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The cluster's CA certificate (default: the system's).")
@click.option("--name", "provider_name", default="kubernetes", show_default=True, help="The DCM provider name.")
@click.option("--once", is_flag=True, help="List once (a resync) and exit.")
def provider_run_kubernetes(api_url: str, kind_name: str, token_file: str | None, ca_file: str | None,
                            provider_name: str, once: bool) -> None:
    """The Kubernetes reference provider, on the provider kit: pod or KubeVirt VMI states from list and watch.

    Example: dcm-status provider run-kubernetes --api-url https://api.example:6443 --token-file token --kind pods
    """
    from urllib.parse import urlparse

    from dcm_status_sdk import PublishRefused, Reporter, ReporterConfig

    from infra.providers.kubernetes import KINDS, ApiServer, KubernetesBridge, run

    if urlparse(api_url).scheme not in ("http", "https") or not urlparse(api_url).netloc:
        raise click.BadParameter(f"{api_url!r} is not an http(s) URL", param_hint="--api-url")
    _check_provider_name(provider_name, "--name")
    conn = connect()
    token = open(token_file).read().strip() if token_file else None
    with _one_line(PublishRefused), Reporter(ReporterConfig(project=conn.project, provider=provider_name,
                                                            topic=conn.topology.ingress_template)) as reporter:
        bridge = KubernetesBridge(reporter, KINDS[kind_name])
        run(bridge, ApiServer(api_url, token, ca_file or True), once=once,
            on_report=lambda status: click.echo(f"{status.raw} -> {status.status}", err=True))
        click.echo(f"{len(bridge.last)} {kind_name} known", err=True)


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


class _ListsTypes(click.Command):
    """`publish --help` ends with the resource types and their statuses, read from the schemas when the
    help is shown (not on every start of the CLI)."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.epilog = "\b\nResource types and their statuses (case-insensitive):\n" + _types_and_statuses()
        super().format_epilog(ctx, formatter)


def _json_map(ctx: click.Context, param: click.Parameter, value: str | None) -> dict[str, Any] | None:
    """A JSON object given on the command line, or a one-line usage error."""
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise click.BadParameter("expected a JSON object ({...})")
    return parsed


@cli.command(cls=_ListsTypes)
@click.option("--provider", "provider_name", required=True, help="The provider publishing (e.g. aws).")
@click.option("--type", "resource_type", required=True, help="Resource type (listed below).")
@click.option("--id", "resource_id", required=True, help="The resource's id at its provider.")
@click.option("--status", required=True, help="Status (listed below per type).")
@click.option("--message", default="", help="Human-readable detail.")
@click.option("--time", "event_time", default=None, help="RFC 3339 event time (default: now).")
@click.option("--event-id", default=None, help="CloudEvent id (default: a new UUID).")
@click.option("--mode", type=click.Choice([m.value for m in BindingMode]), default=BindingMode.STRUCTURED.value,
              show_default=True, help="CloudEvents binding: the JSON event as data, or ce-* attributes.")
@click.option("--no-validate", is_flag=True, help="Publish even what ingest will reject (to test dead letters).")
@click.option("--via", type=click.Choice([v.value for v in Via]), default=Via.PUBSUB.value, show_default=True,
              help="pubsub: on the provider's ingress topic; nats: on NATS as the provider's identity, on "
                   "subject dcm.TYPE in the upstream providers' form (local stack).")
@click.option("--output-spec", "output_spec", callback=_json_map, default=None, metavar="JSON",
              help='What the resource offers others, as the DCM control-plane reads it: a JSON object '
                   '(e.g. \'{"host": "10.0.1.5", "port": 5432}\'); replaces the stored one whole, {} clears it.')
@click.option("--outputs", callback=_json_map, default=None, metavar="JSON",
              help="The same under the cross-provider-outputs proposal's name, data.outputs.")
def publish(provider_name: str, resource_type: str, resource_id: str, status: str, message: str,
            event_time: str | None, event_id: str | None, mode: str, no_validate: bool, via: str,
            output_spec: dict[str, Any] | None, outputs: dict[str, Any] | None) -> None:
    """Publish one status CloudEvent as a provider would; prints the message id (with --via nats: the
    stream sequence NATS stored it under).

    Checked first with ingest's own rules: an event the pipeline would reject is refused with the
    reason (exit 1) unless --no-validate.

    Example: dcm-status publish --provider aws --type vm --id i-0abc --status running
    Example: dcm-status publish --via nats --provider osac --type vm --id vm-1 --status running
    """
    from dcm_status_contracts.errors import Rejected
    from dcm_status_contracts.model import CommonStatus, PubSubMessage
    from dcm_status_contracts.schemas import status_token
    from dcm_status_contracts.pubsub_binding import to_message
    from dcm_status_contracts.status_report import ReportForm, build_event

    from shared.ingest.normalize import normalize_message
    from shared.runtime import settings as settings_module

    _check_provider_name(provider_name, "--provider")
    conn = connect()
    if conn.local and provider_name not in conn.topology.providers:
        raise click.ClickException(f"provider {provider_name} not added; run 'dcm-status provider add "
                                   f"{provider_name}'")
    publisher = conn.publisher()
    topic = conn.topology.ingress_template.replace("{provider}", provider_name)
    topic_path = publisher.topic_path(conn.project, topic)
    form = ReportForm.CURRENT if via == Via.NATS else ReportForm.JANUARY  # NATS: as the upstream providers send it
    event = build_event(provider_name, resource_type, resource_id, status, message, event_id=event_id,
                        time=event_time, last_transition_time=event_time, form=form, output_spec=output_spec,
                        outputs=outputs)
    data, attrs = to_message(event, BindingMode(mode))  # published as is: checked first unless --no-validate
    if not no_validate:
        logging.getLogger("dcm").setLevel(logging.CRITICAL + 1)  # ingest's log lines are for Cloud Logging
        try:
            update = normalize_message(PubSubMessage(data, attrs, "local-check", topic=topic),
                                       settings_module.from_env())
            if update.status == CommonStatus.UNKNOWN and status_token(status) != CommonStatus.UNKNOWN:
                click.echo(f"warning: {status!r} is not a {resource_type} status; it will be stored as UNKNOWN "
                           "(the reported value kept as rawStatus)", err=True)
        except Rejected as exc:
            raise click.ClickException(f"ingest would reject this event ({exc.reason.value}): {exc.message}; "
                                       "--no-validate sends it anyway") from exc
    if via == Via.NATS:
        _publish_via_nats(provider_name, subject_of(resource_type), data, attrs, BindingMode(mode))
        return
    try:
        click.echo(publisher.publish(topic_path, data, **attrs).result(timeout=30))
    except gexc.NotFound as exc:
        raise click.ClickException(f"provider {provider_name} not added (no topic {topic_path}); "
                                   f"run 'dcm-status provider add {provider_name}'") from exc


def _publish_via_nats(provider_name: str, subject: str, data: bytes, attrs: dict[str, str],
                      mode: BindingMode) -> None:
    """As the upstream providers do: the JSON event as the payload (no header), or ce-* headers (binary)."""
    import nats.errors

    stack = LocalStack()
    state = stack.running()
    if state is None or not state.nats:
        raise click.ClickException("--via nats publishes to the local stack's NATS: dcm-status up")
    identity = stack.nats_credentials(state, provider_name)
    if identity is None:
        raise click.ClickException(f"provider {provider_name} has no NATS identity; run 'dcm-status provider add "
                                   f"{provider_name}'")
    headers = attrs if mode is BindingMode.BINARY else {}
    try:
        click.echo(nats_publish(state.nats_url, identity, subject, data, headers))
    except (nats.errors.Error, OSError, TimeoutError) as exc:
        raise click.ClickException(f"NATS refused or did not ack the publish on {subject}: {exc!r}") from exc


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
