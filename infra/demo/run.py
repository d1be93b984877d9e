"""``dcm-status demo``: run the fleet simulation against the running stack and
prove that nothing was lost."""

from __future__ import annotations

import sys
import time
from typing import Any

import click
from dcm_status_contracts import timeutil
from dcm_status_contracts.model import ResourceKey
from google.cloud.firestore_v1.base_query import FieldFilter
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from infra import console as output
from infra.demo.billing import console_summary, usage_from_lifecycles
from infra.demo.fleet import build_fleet
from infra.local import emulators
from infra.local.receiver import Receiver
from infra.local.stack import LocalStack
from infra.local.state import REPO_ROOT
from shared.api import queries
from shared.api.callbacks import Callbacks
from shared.api.queries import groups
from shared.state.usage.rates import RateCard
from shared.state.usage.report import aggregate
from shared.deadletter.store import DeadLetterStore
from shared.state.documents import CHANGE, LEDGER


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=False)


def run(conn: Any, resources: int, seed: int, timeout: float, reset: bool = False) -> bool:
    console = Console()
    fleet = build_fleet(resources, seed)
    db = conn.firestore()
    held = queries.count(db.collection(queries.RESOURCES))
    if held and not reset:
        if not sys.stdin.isatty() or not click.confirm(
                f"the local Firestore holds {held} resources; the demo starts from an empty one. Erase them?"):
            raise click.ClickException(f"the local Firestore holds {held} resources the demo would erase: "
                                       "dcm-status demo --reset (or dcm-status down && dcm-status up)")
    import os
    emulators.reset_firestore(os.environ["FIRESTORE_EMULATOR_HOST"], conn.project)
    publisher = conn.publisher()
    topic = {p: publisher.topic_path(conn.project, conn.topology.ingress_template.replace("{provider}", p))
             for p in {m.provider for m in fleet.messages}}
    missing = sorted(set(topic) - set(conn.topology.providers))
    if missing:
        raise click.ClickException(f"providers {missing} are not in the stack: dcm-status up --providers ...")
    # The billing team's story, by webhook: a receiver told of every change to STOPPED.
    receiver = Receiver()
    registry = Callbacks(db, local_mode=True, keys=LocalStack().callback_keys_source())  # notify's keyring
    stopped, secret = registry.add(receiver.url("stopped"), {"status": "STOPPED"})
    hook = receiver.hook("stopped", secret=secret)
    try:
        ok = _run(console, conn, db, fleet, publisher, topic, timeout)
        return _callbacks(console, db, hook, timeout) and ok
    finally:
        registry.remove(stopped["id"])  # a stack kept up (make demo KEEP=1) does not call a closed port for days
        receiver.close()


def _callbacks(console: Console, db: Any, hook: Any, timeout: float) -> bool:
    """Every non-late change to STOPPED reached the receiver, signed."""
    stopped = db.collection(LEDGER).where(filter=FieldFilter("status", "==", "STOPPED")).stream()
    expected = {snap.id for snap in stopped
                if (snap.to_dict().get(CHANGE) or {}).get("attributes", {}).get("late") == "false"}
    deadline = time.monotonic() + timeout
    while {b["id"] for b in hook.bodies()} < expected and time.monotonic() < deadline:
        time.sleep(0.2)
    got = {b["id"] for b in hook.bodies()}
    ok = expected <= got and all(r.verified for r in hook.got)
    console.print(f"[bold]webhook callbacks:[/] a receiver registered for status STOPPED got "
                  f"{len(expected & got)}/{len(expected)} changes, every signature verified "
                  "(dcm-status callbacks add --hook URL --status STOPPED)  "
                  + ("[green]OK[/]" if ok else "[red]MISSING[/]"))
    return ok


def _publish_and_count(console: Console, db: Any, fleet: Any, publisher: Any, topic: dict,
                       timeout: float) -> tuple[dict[str, Any], float]:
    """Publish the fleet, then wait until the pipeline has accounted for every message (or ``timeout``):
    the pipeline's counters, and the seconds it took."""
    started = time.monotonic()
    with _progress(console) as progress:
        task = progress.add_task("publishing", total=fleet.published)
        for round_ in fleet.rounds:
            futures = [publisher.publish(topic[m.provider], m.data, **m.attributes) for m in round_]
            for f in futures:
                f.result(timeout=60)
                progress.advance(task)
        task = progress.add_task("processed (accounted for)", total=fleet.published)
        deadline = time.monotonic() + timeout
        while True:
            s = queries.stats(db)
            progress.update(task, completed=min(s["received"], fleet.published))
            if s["received"] >= fleet.published or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    elapsed = time.monotonic() - started
    return s, elapsed


def _print_states(console: Console, db: Any) -> None:
    """How many resources of each type are in each status."""
    # statuses down, types across: six types fit 80 columns where ten statuses would not
    table = Table(title="Observed state per resource type", box=None)
    counts = queries.status_counts(db)
    statuses = sorted({st for per in counts.values() for st in per})
    types = sorted(counts)
    table.add_column("status", no_wrap=True)
    for rtype in types:
        table.add_column(rtype, justify="right", no_wrap=True)
    for st in statuses:
        table.add_row(st, *[str(counts[t].get(st, "")) for t in types])
    table.add_row("total", *[str(sum(counts[t].values())) for t in types], style="bold")
    console.print(table)


def _run(console: Console, conn: Any, db: Any, fleet: Any, publisher: Any, topic: dict, timeout: float) -> bool:
    console.print(f"[bold]Fleet:[/] {len(fleet.expected)} resources, {fleet.published} messages "
                  f"(duplicates, out-of-order deliveries and invalid events included)")
    s, elapsed = _publish_and_count(console, db, fleet, publisher, topic, timeout)
    _print_states(console, db)

    wrong = [k for k, status in fleet.expected.items()
             if (queries.get_resource(db, ResourceKey.parse(k)) or {}).get("status") != status]
    console.print(f"final states: {len(fleet.expected) - len(wrong)}/{len(fleet.expected)} as expected"
                  + (f"  [red]wrong: {wrong[:5]}[/]" if wrong else ""))

    console.print("Dead letters by reason (dcm-status dlq list: groups by provider and detail)", style="italic")
    by_reason: dict[str, list[dict]] = {}
    for g in groups(list(DeadLetterStore(db).query())):
        by_reason.setdefault(g["reason"], []).append(g)
    table_rows = [(reason, sum(g["entries"] for g in gs), len(gs), ",".join(sorted({g["provider"] or "-" for g in gs})),
                   gs[0]["message"]) for reason, gs in sorted(by_reason.items())]
    output.table(("reason", "entries", "groups", "providers", "example"), table_rows, flexible=("providers", "example"))

    now = timeutil.now()
    expected = aggregate(usage_from_lifecycles(fleet.lifecycles, fleet.labels, fleet.start, now, now=now),
                         ["resourceType"], daily=False)
    billing_ok = console_summary(
        console, db, start=fleet.start, end=now, rates=RateCard.load(REPO_ROOT / "examples" / "rates.yaml"),
        expected=expected)

    lost = fleet.published - s["received"]
    ok = lost == 0 and not wrong and billing_ok
    console.print(
        f"[bold]accounting:[/] published {fleet.published} = applied {s['applied']} + unchanged {s['unchanged']} "
        f"+ duplicate {s['duplicate']} "
        f"+ stale {s['stale']} + dead-lettered {s['deadlettered']}; lost {lost} "
        f"({fleet.published / elapsed:.0f} msg/s end to end)  "
        + ("[green]OK[/]" if ok else "[red]MISMATCH[/]"))
    return ok
