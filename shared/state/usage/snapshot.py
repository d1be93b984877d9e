"""The daily usage snapshot: every resource's usage per UTC day (shared/state/usage/daily.py ``Entry``), kept
by the sweep from what billing recorded since it last looked, so a usage computation reads a few documents per
day of its window instead of every transition ever stored (docs/billing.md "Daily snapshot", docs/cost.md).

- ``usage_days/{YYYY-MM-DD}/chunks/{n}``: the day's entries, ``of`` chunks a day (a resource in chunk
  ``hash(doc id) % of``), each at most ``CHUNK_MAX`` entries (a few hundred bytes each: under 1 MiB). Every
  resource with a transition before the day's end has an entry on every day from its first on.
- ``usage_snapshot/state``: ``firstDay``, ``lastDay`` (the days stored) and ``watermarkUs``: every transition
  recorded (``recordedUs``) up to it is in the days.

The sweep's tick (``tick``) reads the transitions recorded since the watermark (``TransitionReader.recorded``:
one query per shard over (shard, recordedUs), each transition read once) up to ``GRACE`` ago (a write stamped
before it commits), carries the last day into each new one, and applies them: a resource's transitions that
come after its day's ``last`` extend the day's entry (no read); any other (late, redelivered, dated in another
day) recomputes the resource from that day on, from the day before's entry and its own transitions since
(``TransitionReader.since``: one resource's subcollection). Only the chunks that changed are written.

A computation (``serve``) reads the window's days and applies, in memory and the same way, what was recorded
after the watermark: its rows equal the computation from every transition (tests/functional/test_usage_snapshot.py).
With no snapshot yet, or a window starting before its first day, the caller computes from every transition.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, Mapping

from dcm_status_contracts import timeutil

from shared.state.usage import daily, keeper
from shared.state.usage.daily import Entry, Identity
from shared.state.usage.intervals import Interval, day_start
from shared.state.usage.transitions import ResourceTransitions, TransitionReader, epoch_us

USAGE_DAYS, CHUNKS = "usage_days", "chunks"
STATE = ("usage_snapshot", "state")
CHUNK = 1000  # entries a chunk when a day's chunk count is chosen
CHUNK_MAX = 2000  # ... and at most, before the day is split again (an entry is a few hundred bytes)
BATCH = 10  # chunk documents a commit (a commit holds 10 MiB at most; a chunk up to CHUNK_MAX entries, < 1 MiB)
GRACE = timedelta(minutes=2)  # a transition stamped this long ago has committed (billing's write timeout: 5 s)


def chunk_of(doc_id: str, of: int) -> int:
    return int.from_bytes(hashlib.sha256(doc_id.encode()).digest()[:8], "big") % of


def chunks_for(n: int) -> int:
    of = 1
    while of * CHUNK < n:
        of *= 2
    return of


@dataclass(frozen=True)
class State:
    first: date
    last: date
    watermark_us: int


@dataclass
class Day:
    entries: dict[str, Entry] = field(default_factory=dict)
    of: int = 0  # the chunks stored (0: none)
    dirty: set[str] = field(default_factory=set)  # doc ids changed since read


class Snapshot:
    """The days, read lazily, changed in memory (``apply``), written back (``save``)."""

    def __init__(self, db: Any, reader: TransitionReader, state: State | None,
                 options: Mapping[str, Any] | None = None):
        self.db, self.reader, self.state, self.options = db, reader, state, dict(options or {})
        self.days: dict[date, Day] = {}
        self.reads = 0  # snapshot documents read (docs/cost.md)

    # ---- storage -----------------------------------------------------------------------------------------
    def _chunks(self, d: date) -> Any:
        return self.db.collection(USAGE_DAYS).document(d.isoformat()).collection(CHUNKS)

    def day(self, d: date) -> Day:
        """A day's entries: stored, else (after the last stored day) carried from the day before."""
        if d not in self.days:
            if self.state is not None and self.state.first <= d <= self.state.last:
                snaps = list(self._chunks(d).stream(**self.options))
                self.reads += max(1, len(snaps))
                entries = {e["doc"]: daily.decode(e) for s in snaps for e in (s.to_dict().get("entries") or [])}
                self.days[d] = Day(entries, len(snaps))
            elif self.state is not None and d > self.state.last:
                before = self.day(d - timedelta(days=1))
                self.days[d] = Day({k: daily.carried(e) for k, e in before.entries.items()}, 0, set(before.entries))
            else:
                self.days[d] = Day()
        return self.days[d]

    def save(self, last: date, watermark_us: int, claim: keeper.Claim, now: datetime) -> int:
        """Writes the days changed (their changed chunks; every chunk of a new or re-split day), then the state,
        every commit guarded by this keeper's ``claim`` (keeper.py): once another keeper has claimed the state,
        nothing more is written (``claim.lost``). Returns the chunk documents written."""
        written, committed, batch = 0, 0, self._guarded(claim, now)
        for d in sorted(self.days):
            day = self.days[d]
            if not day.dirty and (day.of or not day.entries):
                continue
            of = max(day.of, chunks_for(len(day.entries)))
            while max(_sizes(day.entries, of), default=0) > CHUNK_MAX:
                of *= 2  # a day that grew: split again (every chunk rewritten, none left over: the ids only grow)
            whole = of != day.of
            changed = set(range(of)) if whole else {chunk_of(k, of) for k in day.dirty}
            groups: dict[int, list[dict[str, Any]]] = {n: [] for n in changed}
            for k in sorted(day.entries):
                n = chunk_of(k, of)
                if n in groups:
                    groups[n].append(daily.encode(day.entries[k]))
            for n, group in sorted(groups.items()):
                batch.set(self._chunks(d).document(f"{n:05d}"), {"day": d.isoformat(), "n": n, "of": of,
                                                                 "entries": group})
                written += 1
                if written % BATCH == 0:
                    if not self._commit(batch, claim):
                        return committed
                    committed, batch = written, self._guarded(claim, now)
            day.of, day.dirty = of, set()
        if not self._commit(batch, claim):
            return committed
        stored = [d for d, day in self.days.items() if day.of]
        first = min([*stored, *([self.state.first] if self.state else [])], default=last)
        self.state = State(first, max([last, *stored, *([self.state.last] if self.state else [])]), watermark_us)
        claim.release({"firstDay": first.isoformat(), "lastDay": self.state.last.isoformat(),
                       "watermarkUs": watermark_us, "watermark": timeutil.format(daily.from_us(watermark_us))})
        return written

    def _guarded(self, claim: keeper.Claim, now: datetime) -> Any:
        batch = self.db.batch()
        claim.guard(batch, now)
        return batch

    @staticmethod
    def _commit(batch: Any, claim: keeper.Claim) -> bool:
        try:
            claim.committed(batch.commit())
        except keeper.LOST:
            claim.lost = True
        return not claim.lost

    # ---- changes -----------------------------------------------------------------------------------------
    def apply(self, recorded: Mapping[str, ResourceTransitions], last: date, cap: date | None = None) -> None:
        """Every resource's newly recorded transitions into the days, through ``last`` at least (the tick: every
        day stored and today); ``cap``: through that day only, later transitions left out (a window's end)."""
        for doc_id, r in recorded.items():
            ident = Identity(doc_id, r.key, r.provider, r.resource_type)
            ts = [t for t in r.transitions if cap is None or t.at.date() <= cap]
            if not ts:
                continue
            first_day = min(t.at.date() for t in ts)
            end = cap if cap is not None else max([last, *(t.at.date() for t in ts)])
            self.day(end)  # carries every day up to it
            here = self.day(first_day).entries.get(doc_id)
            prev = self.day(first_day - timedelta(days=1)).entries.get(doc_id) if here is None else None
            base = here or (daily.carried(prev) if prev else Entry(ident))
            news = daily.beyond_last(base, ts)
            if first_day == end and first_day >= self.state.first and daily.in_order(base, news):
                self._set(first_day, doc_id, daily.extend(base, news, first_day))
            else:
                self.recompute(ident, first_day, end)

    def recompute(self, ident: Identity, since: date, end: date) -> None:
        """One resource's entries from ``since`` to ``end``: from the day before's entry and its transitions
        since (from its whole set when ``since`` is the first day stored or before)."""
        first = self.state.first
        if since <= first:
            start, ts = first, self.reader.transitions(ident.doc_id)
            prev = daily.before(ident, ts, first)
        else:
            start, ts = since, self.reader.since(ident.doc_id, epoch_us(day_start(since)))
            prev = self.day(since - timedelta(days=1)).entries.get(ident.doc_id)
        for d in daily.days(start, end):
            entry = daily.compute(ident, prev, ts, d)
            if entry.last is not None:
                self._set(d, ident.doc_id, entry)
                prev = entry

    def _set(self, d: date, doc_id: str, entry: Entry) -> None:
        day = self.day(d)
        day.entries[doc_id] = entry
        day.dirty.add(doc_id)

    # ---- reading -----------------------------------------------------------------------------------------
    def usage(self, start: date, horizon: datetime) -> list[tuple[Identity, list[Interval]]]:
        """Every resource's billable intervals in ``[start, horizon)``, per day, in doc id order."""
        window = daily.days(start, (horizon - timedelta(microseconds=1)).date())
        per: dict[str, tuple[Identity, list[Interval]]] = {}
        for d in window:
            for doc_id, entry in self.day(d).entries.items():
                ivs = daily.intervals(entry, d, horizon)
                if ivs:
                    per.setdefault(doc_id, (entry.identity, []))[1].extend(ivs)
        return [per[k] for k in sorted(per)]


def _sizes(entries: Mapping[str, Entry], of: int) -> list[int]:
    counts: dict[int, int] = {}
    for k in entries:
        counts[chunk_of(k, of)] = counts.get(chunk_of(k, of), 0) + 1
    return list(counts.values())


# ---- the sweep's tick and a computation ------------------------------------------------------------------------
def to_us_delta(delta: timedelta) -> int:
    return delta // timedelta(microseconds=1)


def state_ref(db: Any) -> Any:
    return db.collection(STATE[0]).document(STATE[1])


def read_state(db: Any, options: Mapping[str, Any] | None = None) -> State | None:
    snap = state_ref(db).get(**dict(options or {}))
    return state_of(snap.to_dict() if snap.exists else None)


def state_of(doc: Mapping[str, Any] | None) -> State | None:
    """The state a ``usage_snapshot/state`` document holds; None for none, or only a first keeper's claim."""
    if not doc or "firstDay" not in doc:
        return None
    return State(date.fromisoformat(doc["firstDay"]), date.fromisoformat(doc["lastDay"]), int(doc["watermarkUs"]))


def tick(db: Any, now: datetime, options: Mapping[str, Any] | None = None,
         every: timedelta = timedelta(0)) -> dict[str, int]:
    """The sweep's step: what billing recorded since the watermark (up to ``GRACE`` ago) into the days, today
    carried, once the watermark is ``every`` old (else one read: the state). The first one reads every
    transition once (``bootstrap``). Returns what it read and wrote."""
    reader = TransitionReader(db, options)
    until = epoch_us(now - GRACE)
    state = read_state(db, options)
    if state is not None and until - state.watermark_us < max(1, to_us_delta(every)):
        return {"transitions": 0, "chunksRead": 0, "chunksWritten": 0}
    claim = keeper.claim(db, state_ref(db), now, options)
    if claim is None:  # another keeper holds it
        return {"transitions": 0, "chunksRead": 0, "chunksWritten": 0, "held": 1}
    state = state_of(claim.doc)  # as the claim read it: another keeper may have moved it since the first read
    if state is None:
        return bootstrap(db, reader, now, until, claim, options)
    snap = Snapshot(db, reader, state, options)
    recorded = reader.recorded(state.watermark_us, until)
    last = max(now.date(), state.last)
    snap.day(last)
    snap.apply(recorded, last)
    written = snap.save(last, until, claim, now)
    return {"transitions": sum(len(r.transitions) for r in recorded.values()), "chunksRead": snap.reads,
            "chunksWritten": written, **({"lost": 1} if claim.lost else {})}


def bootstrap(db: Any, reader: TransitionReader, now: datetime, until: int, claim: keeper.Claim,
              options: Mapping[str, Any] | None = None) -> dict[str, int]:
    """The first snapshot: every resource's days from the first transition stored on, from its whole set."""
    today = now.date()
    sets = reader.transition_sets()
    first = min((t.at.date() for r in sets for t in r.transitions), default=today)
    snap = Snapshot(db, reader, State(first, first, 0), options)
    snap.state = None  # nothing stored yet: no day to read
    for r in sets:
        ident, prev = Identity(r.doc_id, r.key, r.provider, r.resource_type), None
        for d in daily.days(first, max(today, *(t.at.date() for t in r.transitions))):
            entry = daily.compute(ident, prev, r.transitions, d)
            if entry.last is not None:
                snap.day(d).entries[r.doc_id] = entry
                snap.day(d).dirty.add(r.doc_id)
                prev = entry
    snap.day(today)
    written = snap.save(today, until, claim, now)
    return {"transitions": sum(len(r.transitions) for r in sets), "chunksRead": 0, "chunksWritten": written,
            **({"lost": 1} if claim.lost else {})}


def serve(db: Any, start: datetime, horizon: datetime, options: Mapping[str, Any] | None = None
          ) -> list[tuple[Identity, list[Interval]]] | None:
    """Every resource's billable intervals in ``[start, horizon)`` from the snapshot and what was recorded after
    its watermark; None when it cannot (no snapshot, ``start`` no midnight or before its first day)."""
    state = read_state(db, options)
    if state is None or start != day_start(start.date()) or start.date() < state.first:
        return None
    reader = TransitionReader(db, options)
    snap = Snapshot(db, reader, state, options)
    cap = (horizon - timedelta(microseconds=1)).date()
    snap.apply(reader.recorded(state.watermark_us), cap, cap)
    try:
        return snap.usage(start.date(), horizon)
    except daily.Unservable:
        return None
