"""``dcm-status dlq``: triage, inspect, replay and purge dead letters."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any

import click
from dcm_status_contracts import timeutil
from dcm_status_contracts.ingress import Origins
from rich.progress import Progress

from infra.cli.common import connect, parse_time
from infra.console import JSON, WIDE, emit_json, fields, table
from infra.reports import pipeline_outcome
from shared.api.queries import groups
from shared.deadletter.replay import Replayer, ReplayOutcome
from shared.deadletter.store import DeadLetterStore


def parse_since(value: str | None) -> datetime | None:
    return parse_time(value, timeutil.now(), "--since") if value else None

ENTRY_COLUMNS = ("id", "reason", "provider", "key", "seen", "attempts", "state", "last seen")
GROUP_COLUMNS = ("group", "reason", "provider", "entries", "seen", "open", "last seen", "message")


def _entry_cells(e: dict[str, Any]) -> tuple[str, ...]:
    return (e["id"][:12], e["reason"], e.get("provider") or "-", e.get("key") or "-", str(e["occurrences"]),
            str(e["attempts"]), e["state"], e["lastSeen"][:19])


def _group_cells(g: dict[str, Any]) -> tuple[str, ...]:
    return (g["fingerprint"], g["reason"], g["provider"] or "-", str(g["entries"]), str(g["occurrences"]),
            str(g["open"]), g["lastSeen"][:19], g["message"][:70])


def _store(conn) -> DeadLetterStore:
    return DeadLetterStore(conn.firestore())


def _public(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as shown to an operator: the original bytes as text when they are text."""
    out = {k: v for k, v in entry.items() if k not in ("data", "deliveries", "expireAt")}
    data = entry.get("data", b"")
    try:
        out["data"] = data.decode("utf-8")
    except UnicodeDecodeError:
        out["dataBase64"] = base64.b64encode(data).decode()
    return out


def filters(f):
    f = click.option("--reason", default=None, help="Only this reason code.")(f)
    f = click.option("--provider", default=None, help="Only this provider.")(f)
    f = click.option("--since", default=None, help="Last seen within a duration (2h, 7d) or since a time.")(f)
    f = click.option("--group", "fingerprint", default=None, help="Only this group (fingerprint).")(f)
    return f


@click.group()
def dlq() -> None:
    """Dead letters: what failed, why, and replay."""

def select(conn, reason, provider, since, fingerprint):
    return list(_store(conn).query(reason, provider, parse_since(since), fingerprint))

@dlq.command("list")
@filters
@click.option("--flat", is_flag=True, help="One line per entry instead of per group.")
@JSON
@WIDE
def list_cmd(reason, provider, since, fingerprint, flat, as_json, wide):
    """Grouped (default) or flat view of dead letters.

    Example: dcm-status dlq list --flat --reason schema_invalid --since 2h
    """
    entries = select(connect(), reason, provider, since, fingerprint)
    if flat:
        rows = sorted((_public(e) for e in entries), key=lambda e: e["lastSeen"], reverse=True)
        columns, cells = ENTRY_COLUMNS, _entry_cells
    else:
        rows = groups(entries)
        columns, cells = GROUP_COLUMNS, _group_cells
    if as_json:
        emit_json(rows)
        return
    table(columns, (cells(row) for row in rows), wide=wide, flexible=("key", "message"))
    if not rows:
        click.echo("no dead letters match", err=True)


def resolve(conn, entry_id: str) -> dict[str, Any]:
    """The entry with this id, or with this unique id prefix (the short id `dlq list --flat` prints)."""
    store = _store(conn)
    entry = store.get(entry_id) if len(entry_id) >= 32 else None
    if entry is not None:
        return entry
    if not entry_id or not all(c in "0123456789abcdef" for c in entry_id.lower()):
        raise click.ClickException(f"no dead-letter entry {entry_id!r} (ids are hexadecimal)")
    found = store.starting_with(entry_id.lower())
    if not found:
        raise click.ClickException(f"no dead-letter entry {entry_id} (dcm-status dlq list --flat)")
    if len(found) > 1:
        raise click.ClickException(f"{entry_id} is the start of several entries: give more of the id")
    return found[0]

@dlq.command("show")
@click.argument("entry_id")
@JSON
def show(entry_id, as_json):
    """One dead letter: reason, details, original message, replays and their outcome.

    ENTRY_ID may be the short id `dlq list --flat` prints. Example: dcm-status dlq show 3f2a9c1b
    """
    conn = connect()
    entry = resolve(conn, entry_id)
    out = _public(entry)
    out["pipelineOutcome"] = pipeline_outcome(conn.firestore(), entry)
    if as_json:
        emit_json(out)
        return
    fields((k, out.get(k)) for k in (
        "id", "reason", "message", "provider", "key", "fingerprint", "sourceTopic", "sourceSubscription",
        "deliveryCount", "firstSeen", "lastSeen", "occurrences", "attempts", "state", "pipelineOutcome",
        "detail", "attributes"))
    for r in out.get("replays", []):
        click.echo(f"{'replay':<20}attempt {r['attempt']} at {r['at']} -> {r['topic']} ({r['messageId']})")
    click.echo(f"{'data':<20}{out.get('data', out.get('dataBase64'))}")


@dlq.command("replay")
@click.argument("entry_ids", nargs=-1)
@filters
@click.option("--force", is_flag=True, help="Replay even if in flight or past the poison limit.")
@JSON
def replay(entry_ids, reason, provider, since, fingerprint, force, as_json):
    """Republish originals to the topic they came from (by id, --group, or --reason/--provider).

    Example: dcm-status dlq replay --reason delivery_exhausted --since 1h
    """
    conn = connect()
    if not entry_ids and not (reason or provider or since or fingerprint):
        raise click.UsageError("name entries, or select them with --group / --reason / --provider / --since")
    ids = [resolve(conn, i)["id"] for i in entry_ids] or [e["id"] for e in select(conn, reason, provider, since,
                                                                                   fingerprint)]
    if not ids:
        click.echo("no dead letters match", err=True)
        return
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()

    def topic_of(subscription: str) -> str:
        return subscriber.get_subscription(subscription=subscription).topic

    topo = conn.topology  # a provider's message goes back through the replay topic, naming its ingress topic
    origins = Origins(topo.ingress_template, topo.ingress_subscriptions, topo.topic("replay"))
    replayer = Replayer(_store(conn), conn.publisher(), conn.project, topic_of, origins)
    results = []
    with Progress(disable=as_json or len(ids) < 2, transient=True) as progress:
        task = progress.add_task("replaying", total=len(ids))
        for entry_id in ids:
            results.append(replayer.replay(entry_id, force=force))
            progress.advance(task)
    if as_json:
        emit_json([r.__dict__ for r in results])
        return
    for r in results:
        click.echo(f"{r.entry_id}  {r.outcome:<9} {r.detail}")
    published = sum(r.outcome is ReplayOutcome.PUBLISHED for r in results)
    click.echo(f"{published} replayed, {len(results) - published} skipped", err=True)

@dlq.command("purge")
@filters
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def purge(reason, provider, since, fingerprint, yes):
    """Delete dead letters matching the filters.

    Example: dcm-status dlq purge --reason schema_invalid --provider aws --yes
    """
    conn = connect()
    entries = select(conn, reason, provider, since, fingerprint)
    if not entries:
        click.echo("nothing to purge", err=True)
        return
    if not yes:
        click.confirm(f"delete {len(entries)} dead-letter entries?", abort=True)
    n = _store(conn).delete([e["id"] for e in entries])
    click.echo(f"purged {n} entries", err=True)

@dlq.command("stats")
@JSON
def stats(as_json):
    """Counts by reason, provider and state.

    Example: dcm-status dlq stats --json
    """
    entries = select(connect(), None, None, None, None)
    value: dict[str, Any] = {"entries": len(entries), "occurrences": sum(e.get("occurrences", 1) for e in entries),
                             "byReason": {}, "byProvider": {}, "byState": {}}
    for e in entries:
        for field, bucket in (("reason", "byReason"), ("provider", "byProvider"), ("state", "byState")):
            k = e.get(field) or "unknown"
            value[bucket][k] = value[bucket].get(k, 0) + 1
    if as_json:
        emit_json(value)
        return
    click.echo(f"{value['entries']} entries, {value['occurrences']} occurrences")
    for bucket in ("byReason", "byProvider", "byState"):
        click.echo(f"{bucket[2:].lower()}: " + ", ".join(f"{k}={v}" for k, v in sorted(value[bucket].items())))
