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

Counted again only what moved (issue 42): a window's counts start with its marker, one count per kind over
every provider (4 aggregation queries, read at one time, kept in the minute's ``marker`` with a digest of the
providers counted). A kind none of whose entries is in the window needs no per-provider count; nor does an
applied or stale total equal to the one the stored counts were taken at (``APPEND_ONLY``): an idle minute
costs 4 counts whatever the number of providers, a busy one 4 + one per provider and kind that moved. Exact:
a commit into the window since the stored counts (a late one into the minute being completed included) moves
its kind's total, and the per-provider counts are read at the marker's read time.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field
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
    """What the store holds of a minute: until when it was counted, its counts (``{provider: {count: n}}``) and
    the marker they were taken at (``window_counts``; None before the marker was kept)."""

    minute: datetime
    counted_until: datetime
    counts: Mapping[str, Any] = field(default_factory=dict)
    marker: Mapping[str, Any] | None = None

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


# The counts whose entries are only ever added to a window: a ledger history entry is written once (its
# provider, outcome and recordedAt never change) and never deleted. For these, the window's total over every
# provider equal at two read times means no entry came or went, so the per-provider counts taken at the first
# still hold. A duplicate's record is rewritten with a later ``at`` when its copy is redelivered, a dead letter
# may be deleted by an operator: an equal total could hide one provider's entry leaving as another's came, so
# theirs are skipped only when the window holds none.
APPEND_ONLY = frozenset({Count.APPLIED.value, Count.STALE.value})


def _query(db: Any, what: str, start: str, end: str, provider: str | None = None) -> Any:
    """The entries of one count in ``[start, end)``: of one provider, or of all (``provider`` None)."""
    if what in APPEND_ONLY:
        [query] = resources.shard_groups(db.collection(LEDGER), SHARD_SPACE)
        query, field = query.where(filter=FieldFilter("outcome", "==", what)), "recordedAt"
    else:
        query, field = db.collection(DUPLICATES if what == Count.DUPLICATE.value else DEADLETTERS), (
            "at" if what == Count.DUPLICATE.value else "firstSeen")
    if provider is not None:
        query = query.where(filter=FieldFilter("provider", "==", provider))
    return query.where(filter=FieldFilter(field, ">=", start)).where(filter=FieldFilter(field, "<", end))


def queries(db: Any, providers: Iterable[str], start: datetime, end: datetime,
            what: Iterable[str] = COUNTS) -> dict[str, Any]:
    """The aggregation queries of one window, ``"provider:count"`` each (the counts ``what`` names)."""
    s, e = timeutil.format(start), timeutil.format(end)
    return {f"{p}:{w}": _query(db, w, s, e, p) for p in providers for w in what}


def total_queries(db: Any, start: datetime, end: datetime) -> dict[str, Any]:
    """One aggregation query per count over every provider: the window's marker (``window_counts``)."""
    s, e = timeutil.format(start), timeutil.format(end)
    return {w: _query(db, w, s, e) for w in COUNTS}


def providers_digest(providers: Iterable[str]) -> str:
    """Which providers a minute's counts were taken for, in 16 characters (5,000 names would be 100 KB)."""
    return hashlib.sha256("\n".join(sorted(providers)).encode()).hexdigest()[:16]


def per_provider(counted: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """``{provider: {count: n}}`` from the queries' counts (``"provider:count" -> n``): providers with a count only."""
    by_provider: dict[str, dict[str, int]] = {}
    for name, n in counted.items():
        provider, what = name.rsplit(":", 1)
        if n:
            by_provider.setdefault(provider, {c: 0 for c in COUNTS})[what] = n
    return by_provider


def document(minute: datetime, until: datetime, providers: Mapping[str, Any], written_at: str,
             previous: Mapping[str, Any] | None = None, marker: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A minute's document. ``previous``: the minute before's final counts, when known complete, so that a
    reader that keeps up (the dashboard, at each snapshot) reads one document, not two. ``marker``: what the
    counts were taken at (``window_counts``), so that the next tick can tell whether they still hold."""
    doc = {"minute": timeutil.format(minute), "countedUntil": timeutil.format(min(until, minute + MINUTE)),
           "complete": until >= minute + MINUTE, "providers": dict(providers), "writtenAt": written_at}
    if previous is not None:
        doc["previous"] = dict(previous)
    if marker is not None:
        doc["marker"] = dict(marker)
    return doc


def written(db: Any, since: datetime, options: Mapping[str, Any] | None = None) -> dict[datetime, Written]:
    """The minutes stored from ``since`` on (one read each), with their counts and marker."""
    got = {}
    query = db.collection(TRENDS).where(filter=FieldFilter("minute", ">=", timeutil.format(since)))
    for snap in query.select(["minute", "countedUntil", "providers", "marker"]).stream(**(options or {})):
        d = snap.to_dict()
        m = timeutil.parse(d["minute"])
        got[m] = Written(m, timeutil.parse(d["countedUntil"]), d.get("providers") or {}, d.get("marker"))
    return got


def unmoved(totals: Mapping[str, int], marker: Mapping[str, Any], before: Written | None, until: datetime) -> set[str]:
    """The counts whose per-provider figures need no query (pure): none in the window (every provider's is 0),
    or an ``APPEND_ONLY`` one whose total equals the one ``before``'s counts were taken at, for the same
    providers, over a window that ended no later (so its entries are among today's: as many, the same ones)."""
    old: Mapping[str, int] = {}
    if (before is not None and before.marker and before.counted_until <= until
            and before.marker.get("providers") == marker["providers"]):
        old = before.marker.get("totals") or {}
    return {w for w, n in totals.items() if n == 0 or (w in APPEND_ONLY and old.get(w) == n)}


def window_counts(db: Any, providers: Sequence[str], minute: datetime, until: datetime, before: Written | None,
                  options: Mapping[str, Any] | None = None) -> tuple[dict[str, dict[str, int]], dict[str, Any]]:
    """A window's counts per provider and the marker they hold at: first one count per kind over every provider
    (4 aggregation queries, read at one time), then per provider only the kinds that may have moved since
    ``before`` (``unmoved``), read at that same time; the others are ``before``'s, or none."""
    totals, at = aggregates.counts_at_one_time(total_queries(db, minute, until), options)
    marker = {"totals": totals, "providers": providers_digest(providers)}
    keep = unmoved(totals, marker, before, until)
    moved = [w for w in COUNTS if w not in keep]
    at_once = {**(options or {}), aggregates.READ_TIME: at}
    got = aggregates.counts(queries(db, providers, minute, until, moved), at_once) if moved and providers else {}
    for p, kept in (before.counts if before is not None else {}).items():
        got.update({f"{p}:{w}": n for w, n in kept.items() if w in keep and totals[w]})
    return per_provider(got), marker


def record(db: Any, providers: Sequence[str], now: datetime, every_seconds: float,
           options: Mapping[str, Any] | None = None) -> list[str]:
    """One tick's trends: count the windows that are ``due`` (``window_counts``: per provider only what moved)
    and write each minute's document (a tick redelivered, or two at once, write the same counts); returns the
    minutes written."""
    have = written(db, floor_minute(now) - CATCH_UP * MINUTE, options)
    final = {m: w.counts for m, w in have.items() if w.complete}
    done = []
    for minute, until in due(now, have, every_seconds):  # oldest first: a minute completed here is the next's previous
        counted, marker = window_counts(db, list(providers), minute, until, have.get(minute), options)
        if until >= minute + MINUTE:
            final[minute] = counted
        db.collection(TRENDS).document(doc_id(minute)).set(
            document(minute, until, counted, timeutil.format(now), final.get(minute - MINUTE), marker),
            **(options or {}))
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
