"""Trends: the pipeline's counts per minute and provider, one small document a minute, written by the sweep.

``trends/{YYYYMMDDTHHMM}``: ``minute`` (its start, canonical UTC), ``countedUntil`` (the end of what it holds:
the minute's end once it is complete), ``complete``, and ``providers``: ``{provider: {applied, stale,
unchanged, duplicate, deadlettered}}`` (``received`` is their sum: shared/state/aggregates.py ``stats``), only
the providers with a non-zero count. No per-event write: each figure is an aggregation query over what the
pipeline writes anyway, windowed to the minute (Firestore bills one read per query up to 1,000 entries):

- applied, stale: ledger entries (history: ``provider``, ``outcome``, ``recordedAt``, every shard);
- duplicate: ``duplicates`` records by ``at``; deadlettered: dead-letter entries first seen in the minute;
- unchanged: the re-reports of a hot resource (ledger entries, by ``processedAt``) are not indexed by time;
  the re-reports that wrote their resource only are counters (``documentReReports``): neither can be
  windowed without a new index on a sequential value, so ``unchanged`` is left out of the trends (the
  accounting, /v1/stats, has it).

The sweep (shared/sweep/handler.py) writes the current minute at the summary's pace (so a burst shows within
one snapshot period) and completes the minutes its last writes left open, ``CATCH_UP`` at most (a sweep down
longer leaves those minutes out: a chart shows the gap). Kept as long as history (no TTL: 1,440 documents a
day). The api serves them bucketed (``bucket``, pure): ``GET /v1/trends``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Mapping, Sequence

from dcm_status_contracts import timeutil
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.state import aggregates, resources
from shared.state.documents import DEADLETTERS, DUPLICATES, LEDGER, SHARD_SPACE, TRENDS

MINUTE = timedelta(minutes=1)
CATCH_UP = 5  # minutes a tick completes at most (the ones before the current)


class Count(enum.Enum):
    APPLIED = "applied"
    STALE = "stale"
    DUPLICATE = "duplicate"
    DEADLETTERED = "deadlettered"


COUNTS = tuple(c.value for c in Count)


def floor_minute(at: datetime) -> datetime:
    return at.astimezone(timezone.utc).replace(second=0, microsecond=0)


def doc_id(minute: datetime) -> str:
    return minute.strftime("%Y%m%dT%H%M")


@dataclass(frozen=True)
class Written:
    """What the store holds of a minute: until when it was counted."""

    minute: datetime
    counted_until: datetime

    @property
    def complete(self) -> bool:
        return self.counted_until >= self.minute + MINUTE


def due(now: datetime, written: Mapping[datetime, Written], every_seconds: float) -> list[tuple[datetime, datetime]]:
    """The windows ``(minute, until)`` a tick at ``now`` counts: the minutes of the last ``CATCH_UP`` not yet
    complete (up to their end), and the current one up to now when its last write is ``every_seconds`` old or
    more (or missing). Pure."""
    current = floor_minute(now)
    out = []
    for i in range(CATCH_UP, 0, -1):
        m = current - i * MINUTE
        w = written.get(m)
        if w is None or not w.complete:
            out.append((m, m + MINUTE))
    w = written.get(current)
    if now > current and (w is None or (now - w.counted_until).total_seconds() >= every_seconds):
        out.append((current, now))
    return out


def queries(db: Any, providers: Iterable[str], start: datetime, end: datetime) -> dict[str, Any]:
    """The aggregation queries of one window, ``"provider:count"`` each."""
    s, e = timeutil.format(start), timeutil.format(end)
    [ledger] = resources.shard_groups(db.collection(LEDGER), SHARD_SPACE)
    out: dict[str, Any] = {}
    for p in providers:
        for outcome in (Count.APPLIED, Count.STALE):
            out[f"{p}:{outcome.value}"] = (
                ledger.where(filter=FieldFilter("provider", "==", p))
                .where(filter=FieldFilter("outcome", "==", outcome.value))
                .where(filter=FieldFilter("recordedAt", ">=", s)).where(filter=FieldFilter("recordedAt", "<", e)))
        out[f"{p}:{Count.DUPLICATE.value}"] = (
            db.collection(DUPLICATES).where(filter=FieldFilter("provider", "==", p))
            .where(filter=FieldFilter("at", ">=", s)).where(filter=FieldFilter("at", "<", e)))
        out[f"{p}:{Count.DEADLETTERED.value}"] = (
            db.collection(DEADLETTERS).where(filter=FieldFilter("provider", "==", p))
            .where(filter=FieldFilter("firstSeen", ">=", s)).where(filter=FieldFilter("firstSeen", "<", e)))
    return out


def per_provider(counted: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """``{provider: {count: n}}`` from the queries' counts (``"provider:count" -> n``): providers with a count only."""
    by_provider: dict[str, dict[str, int]] = {}
    for name, n in counted.items():
        provider, what = name.rsplit(":", 1)
        if n:
            by_provider.setdefault(provider, {c: 0 for c in COUNTS})[what] = n
    return by_provider


def document(minute: datetime, until: datetime, providers: Mapping[str, Any], written_at: str,
             previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A minute's document. ``previous``: the minute before's final counts, when known complete, so that a
    reader that keeps up (the dashboard, at each snapshot) reads one document, not two."""
    doc = {"minute": timeutil.format(minute), "countedUntil": timeutil.format(min(until, minute + MINUTE)),
           "complete": until >= minute + MINUTE, "providers": dict(providers), "writtenAt": written_at}
    if previous is not None:
        doc["previous"] = dict(previous)
    return doc


def written(db: Any, since: datetime, options: Mapping[str, Any] | None = None
            ) -> tuple[dict[datetime, Written], dict[datetime, Mapping[str, Any]]]:
    """The minutes stored from ``since`` on (one read each), and the counts of the complete ones."""
    got, final = {}, {}
    query = db.collection(TRENDS).where(filter=FieldFilter("minute", ">=", timeutil.format(since)))
    for snap in query.select(["minute", "countedUntil", "providers"]).stream(**(options or {})):
        d = snap.to_dict()
        m = timeutil.parse(d["minute"])
        got[m] = Written(m, timeutil.parse(d["countedUntil"]))
        if got[m].complete:
            final[m] = d.get("providers") or {}
    return got, final


def record(db: Any, providers: Sequence[str], now: datetime, every_seconds: float,
           options: Mapping[str, Any] | None = None) -> list[str]:
    """One tick's trends: count the windows that are ``due`` and write each minute's document (a tick
    redelivered, or two at once, write the same counts); returns the minutes written."""
    have, final = written(db, floor_minute(now) - CATCH_UP * MINUTE, options)
    done = []
    for minute, until in due(now, have, every_seconds):  # oldest first: a minute completed here is the next's previous
        counted = per_provider(aggregates.counts(queries(db, providers, minute, until), options) if providers else {})
        if until >= minute + MINUTE:
            final[minute] = counted
        db.collection(TRENDS).document(doc_id(minute)).set(
            document(minute, until, counted, timeutil.format(now), final.get(minute - MINUTE)), **(options or {}))
        done.append(timeutil.format(minute))
    return done


def read(db: Any, since: datetime, until: datetime, options: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The stored minutes in ``[since, until)``, oldest first (one read each)."""
    query = (db.collection(TRENDS).where(filter=FieldFilter("minute", ">=", timeutil.format(since)))
             .where(filter=FieldFilter("minute", "<", timeutil.format(until))).order_by("minute"))
    return [s.to_dict() for s in query.stream(**(options or {}))]


def bucket(minutes: Iterable[Mapping[str, Any]], since: datetime, until: datetime, step: int,
           provider: str | None = None) -> dict[str, Any]:
    """The minutes summed into buckets of ``step`` seconds from ``since`` (every bucket present, zeros
    included, so a chart shows a quiet time as quiet): ``{"buckets": [{"at", "applied", ..., "received",
    "providers": {p: {...}}}], "providers": [...], "asOf": the newest countedUntil, "before": the minute before
    ``since`` as its successor's document holds it (its final counts, or None)}``. Pure."""
    n = max(0, -(-int((until - since).total_seconds()) // step))
    buckets = [{"at": timeutil.format(since + timedelta(seconds=i * step)), **{c: 0 for c in COUNTS},
                "received": 0, "providers": {}} for i in range(n)]
    seen: set[str] = set()
    as_of = None
    minutes = list(minutes)
    first = minutes[0] if minutes else None
    before = None
    if first is not None and first.get("previous") is not None and timeutil.parse(first["minute"]) == since:
        counts = {p: {**{k: int(c.get(k, 0)) for k in COUNTS}, "received": sum(int(c.get(k, 0)) for k in COUNTS)}
                  for p, c in first["previous"].items() if provider is None or p == provider}
        before = {"at": timeutil.format(since - MINUTE), **{c: sum(int(v.get(c, 0)) for v in counts.values())
                                                            for c in COUNTS}, "providers": counts}
        before["received"] = sum(before[c] for c in COUNTS)
    for m in minutes:
        at = timeutil.parse(m["minute"])
        i = int((at - since).total_seconds()) // step
        if not 0 <= i < n:
            continue
        as_of = max(as_of or m["countedUntil"], m["countedUntil"])
        for p, counts in (m.get("providers") or {}).items():
            if provider is not None and p != provider:
                continue
            seen.add(p)
            mine = buckets[i]["providers"].setdefault(p, {c: 0 for c in COUNTS} | {"received": 0})
            for c in COUNTS:
                v = int(counts.get(c, 0))
                buckets[i][c] += v
                buckets[i]["received"] += v
                mine[c] += v
                mine["received"] += v
    return {"buckets": buckets, "providers": sorted(seen), "asOf": as_of, "before": before}
