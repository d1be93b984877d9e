"""Billing reports: resource-hours (and cost, with a rate card) over a window.

    rows = report(db, "2026-03-01T00:00:00Z", "2026-03-04T00:00:00Z", by=("tenant", "resourceType"))
    print(to_csv(rows))

The window is ``[start, end)``, clipped at ``now``: a resource still in a
billable state is counted up to ``min(end, now)``. Rows are per UTC day
(``daily=True``) and per value of the ``by`` dimensions; each interval is
labelled with the metadata of the transition that began it, so a resource
that moved between tenants is split between them.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Mapping, Sequence

from dcm_status_contracts import timeutil

from shared.state.usage import snapshot
from shared.state.usage.intervals import Interval, as_datetime, usage
from shared.state.usage.rates import RateCard
from shared.state.usage.transitions import TransitionReader

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
                   workers: int = 8, options: Mapping[str, Any] | None = None) -> list[ResourceUsage]:
    """Every resource's billable intervals in the window, split per UTC day.

    Unfiltered, from a window starting at a midnight: the daily snapshot (shared/state/usage/snapshot.py: a
    few documents per day of the window, and what billing recorded since the sweep last kept it). Otherwise, or
    with no snapshot yet, from every transition of the resources the filters select (``from_transitions``).
    ``options``: each query page's retry and timeout (the caller's).
    """
    start_dt, horizon = window(start, end, now)
    if horizon <= start_dt:
        return []
    if not (provider or resource_type or tenant):
        served = snapshot.serve(db, start_dt, horizon, options)
        if served is not None:
            return [ResourceUsage(i.key, i.provider, i.resource_type, ivs) for i, ivs in served]
    return from_transitions(db, start_dt, horizon, provider=provider, resource_type=resource_type, tenant=tenant,
                            workers=workers, options=options)


def from_transitions(db, start_dt: datetime, horizon: datetime, *, provider: str | None = None,
                     resource_type: str | None = None, tenant: str | None = None, workers: int = 8,
                     options: Mapping[str, Any] | None = None) -> list[ResourceUsage]:
    """``resource_usage`` from every transition of the resources the filters select (the reference the daily
    snapshot equals)."""
    out = []
    for r in TransitionReader(db, options).transition_sets(provider, resource_type, tenant, workers=workers):
        intervals = usage(r.transitions, r.resource_type, start_dt, horizon, now=horizon)
        if tenant:
            intervals = [iv for iv in intervals if iv.labels.get("tenant") == tenant]
        if intervals:
            out.append(ResourceUsage(r.key, r.provider, r.resource_type, intervals))
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
            b = buckets.setdefault(group, {"us": 0, "resources": set(), "at_rate": {}, "unpriced": False})
            b["us"] += iv.microseconds
            b["resources"].add(ru.key)
            if rate is None:
                b["unpriced"] = True
            else:  # microseconds per rate, priced once: the same cost however the hours are cut in intervals
                b["at_rate"][rate] = b["at_rate"].get(rate, 0) + iv.microseconds
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
            cost = sum(us * rate / US_PER_HOUR for rate, us in sorted(b["at_rate"].items()))
            row["cost"] = None if b["unpriced"] else round(cost, 6)
            row["currency"] = rates.currency
        rows.append(row)
    return rows


def report(db, start: datetime | str, end: datetime | str, by: Sequence[str] = ("resourceType",), *,
           daily: bool = True, rates: RateCard | None = None, now: datetime | None = None,
           provider: str | None = None, resource_type: str | None = None,
           tenant: str | None = None, options: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Usage rows for ``[start, min(end, now))``; see ``aggregate`` for the row shape."""
    usages = resource_usage(db, start, end, now=now, provider=provider, resource_type=resource_type, tenant=tenant,
                            options=options)
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


# A spreadsheet runs a cell that starts with one of these as a formula (CSV injection, OWASP): a text cell that
# does is written with a leading apostrophe, which spreadsheets show as text. Numbers are ours, never negative.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def columns_for(by: Sequence[str], *, daily: bool = True, rated: bool = False) -> list[str]:
    """The columns of the rows ``aggregate`` makes, in their order (a CSV's header, even with no row):
    ``[day,]`` the dimensions, ``resources, seconds, hours[, cost, currency]``."""
    return [*(["day"] if daily else []), *(dimension(d) for d in by), "resources", "seconds", "hours",
            *(["cost", "currency"] if rated else [])]


def safe_cell(value: Any) -> Any:
    """A CSV cell that no spreadsheet runs: text starting like a formula gets a leading apostrophe."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def to_csv(rows: Sequence[Mapping[str, Any]], header: Sequence[str] | None = None, line_end: str = "\n") -> str:
    """The rows as CSV: a header row (``header``, else the first row's keys; nothing at all for no rows and no
    header), one line per row, text cells neutralised (``safe_cell``). ``line_end="\r\n"``: RFC 4180's."""
    fields = list(header) if header is not None else columns(rows)
    buf = io.StringIO()
    if fields:
        writer = csv.DictWriter(buf, fieldnames=fields, lineterminator=line_end)
        writer.writeheader()
        writer.writerows({k: safe_cell(r.get(k)) for k in fields} for r in rows)
    return buf.getvalue()
