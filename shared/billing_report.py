"""Billing reports: resource-hours (and cost, with a rate card) over a window.

    rows = report(db, "2026-03-01T00:00:00Z", "2026-03-04T00:00:00Z", by=("tenant", "resourceType"))
    print(render_text(rows))

The window is ``[start, end)``, clipped at ``now``: a resource still in a
billable state is counted up to ``min(end, now)``. Rows are per UTC day
(``daily=True``) and per value of the ``by`` dimensions; each interval is
labelled with the metadata of the transition that began it, so a resource
that moved between tenants is split between them.
"""

from __future__ import annotations

import csv
import io
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Mapping, Sequence

from google.cloud.firestore_v1.base_query import FieldFilter

from shared import timeutil
from shared.billing_intervals import Interval, Transition, as_datetime, day_start, usage
from shared.billing_rates import RateCard
from shared.billing_store import RESOURCES, TRANSITIONS, BillingStore, epoch_us
from shared.model import ResourceKey

DIMENSIONS = ("provider", "resourceType", "tenant", "region", "environment", "resource", "status")
ALIASES = {"type": "resourceType", "resource_type": "resourceType", "key": "resource", "resources": "resource"}
US_PER_HOUR = 3_600_000_000


def dimension(name: str) -> str:
    """The canonical name of a grouping dimension (accepts a few aliases)."""
    canonical = ALIASES.get(name, name)
    if canonical not in DIMENSIONS:
        raise ValueError(f"unknown dimension {name!r}; use one of {', '.join(DIMENSIONS)}")
    return canonical


@dataclass(frozen=True)
class ResourceUsage:
    key: str
    provider: str
    resource_type: str
    intervals: Sequence[Interval]

    def dimensions(self, iv: Interval) -> dict[str, str | None]:
        return {"provider": self.provider, "resourceType": self.resource_type,
                "tenant": iv.labels.get("tenant"), "region": iv.labels.get("region"),
                "environment": iv.labels.get("environment"), "resource": self.key, "status": iv.status}


def window(start: datetime | str, end: datetime | str, now: datetime | None = None) -> tuple[datetime, datetime]:
    """``(start, horizon)`` with horizon = min(end, now)."""
    start_dt, end_dt = as_datetime(start), as_datetime(end)
    if end_dt <= start_dt:
        raise ValueError(f"empty window: end {timeutil.format(end_dt)} is not after start {timeutil.format(start_dt)}")
    return start_dt, min(end_dt, now or timeutil.now())


def resource_usage(db, start: datetime | str, end: datetime | str, *, now: datetime | None = None,
                   provider: str | None = None, resource_type: str | None = None, tenant: str | None = None,
                   workers: int = 8) -> list[ResourceUsage]:
    """Every resource's billable intervals in the window, split per UTC day."""
    start_dt, horizon = window(start, end, now)
    if horizon <= start_dt:
        return []
    store = BillingStore(db)
    horizon_us = epoch_us(horizon)
    candidates = [r for r in store.resources(provider, resource_type, tenant)
                  if r.get("firstAtUs") is None or r["firstAtUs"] < horizon_us]
    if not candidates:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(candidates)))) as pool:
        transition_sets = list(pool.map(lambda r: store.transitions(r["id"]), candidates))
    out = []
    for r, transitions in zip(candidates, transition_sets):
        intervals = usage(transitions, r["resourceType"], start_dt, horizon, now=horizon)
        if tenant:
            intervals = [iv for iv in intervals if iv.labels.get("tenant") == tenant]
        if intervals:
            out.append(ResourceUsage(r["key"], r["provider"], r["resourceType"], intervals))
    return out


def _seconds(us: int) -> int | float:
    return us // 1_000_000 if us % 1_000_000 == 0 else us / 1_000_000


def aggregate(usages: Iterable[ResourceUsage], by: Sequence[str] = ("resourceType",), *, daily: bool = True,
              rates: RateCard | None = None) -> list[dict[str, Any]]:
    """Rows: [day,] the ``by`` dimensions, resources, seconds, hours[, cost, currency]."""
    dims = [dimension(d) for d in by]
    buckets: dict[tuple, dict[str, Any]] = {}
    for ru in usages:
        rate = rates.rate(ru.provider, ru.resource_type) if rates else None
        for iv in ru.intervals:
            values = ru.dimensions(iv)
            group = ((iv.day,) if daily else ()) + tuple(values[d] for d in dims)
            b = buckets.setdefault(group, {"us": 0, "resources": set(), "cost": 0.0, "unpriced": False})
            b["us"] += iv.microseconds
            b["resources"].add(ru.key)
            if rate is None:
                b["unpriced"] = True
            else:
                b["cost"] += iv.microseconds * rate / US_PER_HOUR
    rows = []
    for group in sorted(buckets, key=lambda g: tuple("" if v is None else v for v in g)):
        b = buckets[group]
        row: dict[str, Any] = {}
        values = list(group)
        if daily:
            row["day"] = values.pop(0)
        row.update(zip(dims, values))
        row.update({"resources": len(b["resources"]), "seconds": _seconds(b["us"]),
                    "hours": round(b["us"] / US_PER_HOUR, 6)})
        if rates is not None:
            row["cost"] = None if b["unpriced"] else round(b["cost"], 6)
            row["currency"] = rates.currency
        rows.append(row)
    return rows


def report(db, start: datetime | str, end: datetime | str, by: Sequence[str] = ("resourceType",), *,
           daily: bool = True, rates: RateCard | None = None, now: datetime | None = None,
           provider: str | None = None, resource_type: str | None = None,
           tenant: str | None = None) -> list[dict[str, Any]]:
    """Usage rows for ``[start, min(end, now))``; see ``aggregate`` for the row shape."""
    usages = resource_usage(db, start, end, now=now, provider=provider, resource_type=resource_type, tenant=tenant)
    return aggregate(usages, by, daily=daily, rates=rates)


def totals(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    rows = list(rows)
    seconds = sum(r["seconds"] for r in rows)
    out: dict[str, Any] = {"seconds": seconds, "hours": round(seconds / 3600, 6)}
    if rows and "cost" in rows[0]:
        costs = [r["cost"] for r in rows]
        out["cost"] = None if any(c is None for c in costs) else round(sum(costs), 6)
        out["currency"] = rows[0]["currency"]
    return out


# ---- formatting ----------------------------------------------------------------------
def columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    return list(rows[0]) if rows else []


def cell(column: str, value: Any) -> str:
    if value is None:
        return "-"
    if column == "hours":
        return f"{value:,.3f}"
    if column == "cost":
        return f"{value:,.4f}"
    if column == "seconds":
        return f"{value:,}" if isinstance(value, int) else f"{value:,.6f}"
    return str(value)


def render_text(rows: Sequence[Mapping[str, Any]], title: str | None = None) -> str:
    """A plain-text table with a total line (for logs and the demo)."""
    if not rows:
        return (title + "\n" if title else "") + "no billable usage in the window"
    cols = [c for c in columns(rows) if c != "currency"]
    body = [[cell(c, r[c]) for c in cols] for r in rows]
    total = totals(rows)
    foot = ["total" if i == 0 else "" for i in range(len(cols))]
    for c in ("seconds", "hours", "cost"):
        if c in cols:
            foot[cols.index(c)] = cell(c, total.get(c))
    if "cost" in cols:
        cols[cols.index("cost")] = f"cost ({rows[0]['currency']})"
    widths = [max(len(x) for x in [c] + [b[i] for b in body] + [foot[i]]) for i, c in enumerate(cols)]
    numeric = {i for i, c in enumerate(cols) if c in ("resources", "seconds", "hours") or c.startswith("cost")}

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if i in numeric else v.ljust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()

    out = [title] if title else []
    out += [line(cols), line(["-" * w for w in widths])] + [line(b) for b in body] + [line(foot)]
    return "\n".join(out)


def to_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=columns(rows), lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in rows)
    return buf.getvalue()


def summary(db, start: datetime | str, end: datetime | str, *, by: Sequence[str] = ("resourceType",),
            rates: RateCard | None = None, now: datetime | None = None) -> str:
    """A few lines for the end of the demo: resource-hours per ``by`` over the window, with a total."""
    start_dt, horizon = window(start, end, now)
    rows = report(db, start_dt, horizon, by, daily=False, rates=rates, now=horizon)
    title = (f"billing: resource-hours in billable states, "
             f"{timeutil.format(start_dt)[:19]}Z .. {timeutil.format(horizon)[:19]}Z")
    return render_text(rows, title)


# ---- for the demo ----------------------------------------------------------------------
def _count(query: Any) -> int:
    return int(query.count().get()[0][0].value)


def backlog(db) -> int:
    """Change events upsert announced (ledger entries carrying one) that billing has not stored yet.

    Meant for a fresh stack (the demo): ledger entries expire after their TTL, and
    change events published by hand have no ledger entry (the result is then < 0).
    """
    from shared.state_store import LEDGER

    announced = _count(db.collection(LEDGER).where(filter=FieldFilter("change", "!=", None)))
    stored = _count(db.collection_group(TRANSITIONS).where(filter=FieldFilter("implied", "==", False)))
    return announced - stored


def wait_for_billing(db, timeout: float = 60.0, interval: float = 0.5) -> int:
    """Wait until billing stored every announced change (or timeout); returns the backlog left."""
    import time

    deadline = time.monotonic() + timeout
    while (left := backlog(db)) > 0 and time.monotonic() < deadline:
        time.sleep(interval)
    return max(left, 0)


def usage_from_lifecycles(lifecycles: Mapping[str, Sequence[tuple[str, str]]],
                          labels: Mapping[str, Mapping[str, str]] | None, start: datetime | str,
                          end: datetime | str, now: datetime | None = None) -> list[ResourceUsage]:
    """Expected usage of known lifecycles ``{key: [(transition time, status), ...]}``, computed
    by the same interval arithmetic, to print next to what billing computed from the bus."""
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
    """Print a billing summary on a rich console (the demo's ``extra_summaries`` hook).

    Waits (up to ``wait`` s) until billing has stored every change upsert announced. The window
    defaults to [UTC midnight of the first transition, now). ``expected``: rows from
    ``aggregate(usage_from_lifecycles(...), by, daily=False)`` to compare with; returns False
    on a mismatch or a backlog left.
    """
    from rich.table import Table

    left = wait_for_billing(db, wait)
    now = timeutil.now()
    if start is None:
        firsts = [d.to_dict().get("firstAtUs") for d in db.collection(RESOURCES).select(["firstAtUs"]).stream()]
        firsts = [f for f in firsts if f is not None]
        if not firsts:
            console.print("[bold]billing:[/] no change events stored")
            return left == 0
        first = datetime.fromtimestamp(min(firsts) // 1_000_000, tz=now.tzinfo)
        start = day_start(first.date())
    end_dt = as_datetime(end) if end is not None else now
    rows = report(db, start, end_dt, by, daily=False, rates=rates, now=now)
    dims = [dimension(d) for d in by]
    want = {tuple(r[d] for d in dims): r["seconds"] for r in expected or []}
    table = Table(title="Billing (from the change events)", box=None)
    for c in dims + ["resources", "hours"] + (["expected h"] if expected is not None else []) + (
            [f"cost ({rates.currency})"] if rates else []):
        table.add_column(c, justify="left" if c in dims else "right")
    ok = left == 0
    groups = sorted({tuple(r[d] for d in dims) for r in rows} | set(want), key=lambda g: tuple(map(str, g)))
    by_group = {tuple(r[d] for d in dims): r for r in rows}
    for g in groups:
        r = by_group.get(g, {"resources": 0, "seconds": 0, "hours": 0.0, "cost": 0.0})
        cells = [cell(d, v) for d, v in zip(dims, g)] + [str(r["resources"]), cell("hours", r["hours"])]
        if expected is not None:
            match = want.get(g, 0) == r["seconds"]
            ok &= match
            cells.append(cell("hours", want.get(g, 0) / 3600) + ("" if match else " [red]≠[/]"))
        if rates:
            cells.append(cell("cost", r.get("cost")))
        table.add_row(*cells)
    console.print(table)
    total = totals(rows)
    cost = f", cost {cell('cost', total.get('cost'))} {rates.currency}" if rates else ""
    check = ""
    if expected is not None:
        check = "  [green]= expected[/]" if ok else "  [red]MISMATCH[/]"
    console.print(f"[bold]billing:[/] {total['hours']:,.3f} resource-hours{cost} in "
                  f"[{timeutil.format(as_datetime(start))[:16]}Z, {timeutil.format(min(end_dt, now))[:16]}Z)"
                  + (f"; [red]{left} change events not yet stored[/]" if left else "") + check)
    return ok
