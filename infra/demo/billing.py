"""The demo's billing check: what billing computed from the transitions upsert recorded, next to what the
fleet's known lifecycles say it should be (the same interval arithmetic, an independent input)."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Mapping, Sequence

from dcm_status_contracts import timeutil
from dcm_status_contracts.model import ResourceKey

from infra.console import billing_table
from shared.api import queries
from shared.state.usage.intervals import Transition, as_datetime, day_start, usage
from shared.state.usage.rates import RateCard
from shared.state.usage.report import ResourceUsage, cell, dimension, report, totals, window
from shared.billing.store import BillingStore


def backlog(db) -> int:
    """Change events upsert announced whose transition is not stored.

    Upsert writes a change's transition in the commit of its ledger entry (issue 40): none is ever
    missing, but for changes that are no transition of usage (the sweep's "not reported lately", new
    outputs alone: shared/state/usage/transitions.py ``recorded_transition``), which count here too.
    Meant for a fresh stack (the demo): ledger entries expire after their TTL, and transitions
    written by hand have no ledger entry (the result is then < 0).
    """
    return queries.announced_changes(db) - BillingStore(db).stored_changes()


def wait_for_billing(db, timeout: float = 60.0, interval: float = 0.5) -> int:
    """Wait until every announced change has its transition stored (or timeout); returns the backlog left."""
    deadline = time.monotonic() + timeout
    while (left := backlog(db)) > 0 and time.monotonic() < deadline:
        time.sleep(interval)
    return max(left, 0)


def usage_from_lifecycles(lifecycles: Mapping[str, Sequence[tuple[str, str]]],
                          labels: Mapping[str, Mapping[str, str]] | None, start: datetime | str,
                          end: datetime | str, now: datetime | None = None) -> list[ResourceUsage]:
    """Expected usage of known lifecycles ``{key: [(transition time, status), ...]}``."""
    start_dt, horizon = window(start, end, now)
    out = []
    for key, steps in lifecycles.items():
        k = ResourceKey.parse(key)
        lab = dict((labels or {}).get(key, {}))
        ts = [Transition.of(at, status, f"{key}#{i}", labels=lab) for i, (at, status) in enumerate(steps)]
        intervals = usage(ts, k.resource_type, start_dt, horizon, now=horizon)
        if intervals:
            out.append(ResourceUsage(key, k.provider, k.resource_type, intervals))
    return out


def console_summary(console: Any, db, *, start: datetime | str | None = None, end: datetime | str | None = None,
                    by: Sequence[str] = ("resourceType",), rates: RateCard | None = None, wait: float = 60.0,
                    expected: Sequence[Mapping[str, Any]] | None = None) -> bool:
    """Print billing's table and total; False on a mismatch with ``expected`` or a backlog left.

    Waits (up to ``wait`` s) until every change upsert announced has its transition stored. The window
    defaults to [UTC midnight of the first transition, now). ``expected``: rows from
    ``aggregate(usage_from_lifecycles(...), by, daily=False)``.
    """
    left = wait_for_billing(db, wait)
    now = timeutil.now()
    if start is None:
        first = BillingStore(db).earliest_at_us()
        if first is None:
            console.print("[bold]billing:[/] no change events stored")
            return left == 0
        start = day_start(datetime.fromtimestamp(first // 1_000_000, tz=now.tzinfo).date())
    end_dt = as_datetime(end) if end is not None else now
    rows = report(db, start, end_dt, by, daily=False, rates=rates, now=now)
    dims = [dimension(d) for d in by]
    want = None if expected is None else {tuple(r[d] for d in dims): r["seconds"] for r in expected}
    table, matched = billing_table(rows, title="Billing (from the change events)", dims=dims, expected=want)
    console.print(table)
    ok = left == 0 and matched
    total = totals(rows)
    cost = f", cost {cell('cost', total.get('cost'))} {rates.currency}" if rates else ""
    check = "" if expected is None else "  [green]= expected[/]" if ok else "  [red]MISMATCH[/]"
    console.print(f"[bold]billing:[/] {total['hours']:,.3f} resource-hours{cost} in "
                  f"[{timeutil.format(as_datetime(start))[:16]}Z, {timeutil.format(min(end_dt, now))[:16]}Z)"
                  + (f"; [red]{left} change events not yet stored[/]" if left else "") + check)
    return ok
