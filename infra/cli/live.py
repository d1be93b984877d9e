"""``dcm-status watch`` and ``dcm-status logs``: what happens, as it happens."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path
from typing import Iterator

import click
import orjson
from dcm_status_contracts import status_changed
from dcm_status_contracts.errors import Rejected
from dcm_status_contracts.model import PubSubMessage
from dcm_status_contracts.schemas import status_token

from infra.cli.common import connect
from infra.console import to_text
from infra.local.stack import LocalStack

LOG_FIELDS_SHOWN = ("key", "status", "eventId", "error", "outcome", "reason", "pid", "restarts")


# seconds one pull of `watch` waits for changes: a blocking gRPC call holds Ctrl-C back until it returns,
# so this is how long Ctrl-C may take
PULL_WAIT = 2.0


@click.command()
@click.option("--provider", default=None, help="Only this provider.")
@click.option("--type", "resource_type", default=None, help="Only this resource type.")
@click.option("--status", default=None, help="Only changes to this status (any case).")
@click.option("--json", "as_json", is_flag=True, help="One change event per line, as published.")
def watch(provider: str | None, resource_type: str | None, status: str | None, as_json: bool) -> None:
    """Print status changes as they happen, until Ctrl-C.

    Reads the change topic through a subscription of its own (deleted on exit): only changes made
    after it starts are shown.

    Example: dcm-status watch --provider aws --status stopped
    """
    from google.api_core import exceptions as gexc
    from google.cloud import pubsub_v1

    conn = connect()
    subscriber = pubsub_v1.SubscriberClient()
    topic = f"projects/{conn.project}/topics/{conn.topology.topic('changed')}"
    name = subscriber.subscription_path(conn.project, f"dcm-watch-{uuid.uuid4().hex[:12]}")
    subscriber.create_subscription(request={"name": name, "topic": topic, "ack_deadline_seconds": 10,
                                            "expiration_policy": {"ttl": {"seconds": 86400}}}, timeout=30)
    wanted_status = status_token(status) if status else None
    _stop_on_signals()
    click.echo(f"watching {conn.topology.topic('changed')} (Ctrl-C to stop)", err=True)
    try:
        while True:
            try:
                response = subscriber.pull(subscription=name, max_messages=100, timeout=PULL_WAIT)
            except gexc.DeadlineExceeded:
                continue
            for received in response.received_messages:
                m = received.message
                try:
                    change = status_changed.from_message(PubSubMessage(m.data, dict(m.attributes), m.message_id))
                except Rejected:
                    continue
                if ((provider and change.provider != provider.lower())
                        or (resource_type and change.resource_type != resource_type.lower())
                        or (wanted_status and change.new_status != wanted_status)):
                    continue
                if as_json:
                    click.echo(m.data.decode())
                else:
                    click.echo(f"{change.at[:19]}Z  {change.key}  {change.old_status or '-'} -> {change.new_status}")
            if response.received_messages:
                subscriber.acknowledge(subscription=name, ack_ids=[r.ack_id for r in response.received_messages])
    except KeyboardInterrupt:
        pass
    finally:
        subscriber.delete_subscription(subscription=name, timeout=30)


def _stop_on_signals() -> None:
    """Ctrl-C, or a TERM from whatever runs it, ends `watch` cleanly (its subscription deleted), even when it
    was started with SIGINT ignored (a background job of a script, a test runner's worker)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)


@click.command()
@click.argument("function", required=False)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new records (Ctrl-C to stop).")
@click.option("-n", "--lines", default=20, show_default=True, type=click.IntRange(min=0),
              help="Records to show from the end of each log.")
@click.option("--json", "as_json", is_flag=True, help="The records as written: one JSON object per line.")
def logs(function: str | None, follow: bool, lines: int, as_json: bool) -> None:
    """The local functions' logs (one JSON record per line, as Cloud Logging reads them).

    Without FUNCTION, every function's log, each line named. Example: dcm-status logs upsert -f
    """
    stack = LocalStack()
    state = stack.running() or stack.load_state()
    names = list(stack.topology(state).functions) if state else []
    if not names:
        raise click.ClickException("no local stack has run here: dcm-status up")
    if function and function not in names:
        raise click.BadParameter(f"{function!r} is not a function; one of {', '.join(names)}", param_hint="FUNCTION")
    paths = {n: stack.paths.log_dir / f"{n}.log" for n in ([function] if function else names)}
    offsets = {}
    for name, path in paths.items():
        records, offsets[name] = _tail(path, lines)
        for line in records:
            click.echo(_render(name, line, as_json, named=function is None))
    while follow:
        try:
            time.sleep(0.5)
        except KeyboardInterrupt:
            return
        for name, path in paths.items():
            for line in _new_lines(path, offsets, name):
                click.echo(_render(name, line, as_json, named=function is None))


def _tail(path: Path, n: int) -> tuple[list[str], int]:
    if not path.exists():
        return [], 0
    data = path.read_bytes()
    text = data.decode("utf-8", errors="replace").splitlines()
    return (text[-n:] if n else []), len(data)


def _new_lines(path: Path, offsets: dict[str, int], name: str) -> Iterator[str]:
    try:
        with path.open("rb") as f:
            f.seek(offsets[name])
            chunk = f.read()
    except OSError:
        return
    complete = chunk[: chunk.rfind(b"\n") + 1]
    offsets[name] += len(complete)
    yield from complete.decode("utf-8", errors="replace").splitlines()


def _render(name: str, line: str, as_json: bool, named: bool) -> str:
    prefix = f"{name:<10} " if named else ""
    if as_json:
        return prefix + line
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return prefix + line
    if not isinstance(record, dict):
        return prefix + line
    extra = "  ".join(f"{k}={to_text(record[k])}" for k in LOG_FIELDS_SHOWN if k in record)
    when = str(record.get("time", ""))[11:19]
    return f"{prefix}{when:<8} {record.get('severity', ''):<8} {record.get('message', '')}  {extra}".rstrip()
