"""A resource's usage one UTC day at a time, pure: what the daily snapshot (shared/state/usage/snapshot.py) stores
and serves, equal to ``intervals.usage`` over the resource's whole transition set (tests/unit/test_usage_daily.py).

A day's ``Entry`` holds the billable stretches of the day that a later transition of the day ended (``closed``,
merged as ``billable_intervals`` merges them), the latest transition before the day's end (``last``) and whether
the resource had served by then (``served``). The stretch ``last`` opens is not stored: ``intervals`` ends it at
the day's end or at the horizon it is asked for, so an entry does not change as time passes, only when a
transition arrives. A day is the fold of its transitions over the day before's entry (``carried``); a
transition arriving in order (after ``last``) extends the entry (``extend``), the same fold.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta, timezone
from typing import Any, Iterable, Mapping, Sequence

from dcm_status_contracts import timeutil

from shared.state.usage.intervals import (BILLABLE_ONCE_SERVED, ONE_DAY, Interval, Transition, billable_states,
                                          day_start, ordered)

EPOCH_UTC = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Identity:
    doc_id: str
    key: str
    provider: str
    resource_type: str


MAX_CLOSED = 48  # stretches an entry keeps as they were; beyond, one total per status and labels (``compact``)


class Unservable(Exception):
    """A compacted entry asked for up to a time before its last transition: compute from the transitions."""


@dataclass(frozen=True)
class Entry:
    """One resource's day (see the module's docstring). ``compacted``: ``closed`` holds one stretch per status
    and labels, its length their total (a resource that flapped all day: the chunk stays small)."""

    identity: Identity
    closed: tuple[Interval, ...] = ()
    last: Transition | None = None
    served: bool = False
    compacted: bool = False


def _billable(resource_type: str, status: str, served: bool) -> bool:
    return (status in billable_states(resource_type)
            or (served and status in BILLABLE_ONCE_SERVED.get(resource_type, frozenset())))


def _append(out: list[Interval], iv: Interval) -> None:
    """``iv`` after ``out``, merged with the last one as ``billable_intervals`` merges adjacent stretches."""
    prev = out[-1] if out else None
    if prev and prev.end == iv.start and prev.status == iv.status and prev.labels == iv.labels:
        out[-1] = Interval(prev.start, iv.end, prev.status, prev.labels)
    else:
        out.append(iv)


def _fold(entry: Entry, transitions: Iterable[Transition], day: date) -> Entry:
    """``entry`` followed by ``transitions`` (all after its ``last``, in order, inside the day)."""
    start = day_start(day)
    closed, last, served = list(entry.closed), entry.last, entry.served
    for t in transitions:
        if last is not None:
            s = max(last.at, start)
            if t.at > s and _billable(entry.identity.resource_type, last.status, served):
                _append(closed, Interval(s, t.at, last.status, last.labels))
        last = t
        served = served or t.status in billable_states(entry.identity.resource_type)
    return compact(Entry(entry.identity, tuple(closed), last, served, entry.compacted))


def compact(entry: Entry) -> Entry:
    """Beyond ``MAX_CLOSED`` stretches, one per status and labels from the day's start, as long as their total:
    the same hours, resources and cost in every row (``report.aggregate`` sums microseconds before pricing)."""
    if len(entry.closed) <= MAX_CLOSED:
        return entry
    totals: dict[tuple, tuple[timedelta, Interval]] = {}
    for iv in entry.closed:
        k = (iv.status, tuple(sorted(iv.labels.items())))
        total, first = totals.get(k, (timedelta(0), iv))
        totals[k] = (total + iv.duration, first)
    start = day_start(entry.closed[0].start.date())
    closed = tuple(Interval(start, start + total, first.status, first.labels) for total, first in totals.values())
    return replace(entry, closed=closed, compacted=True)


def carried(previous: Entry) -> Entry:
    """The next day's entry before any of its transitions."""
    return Entry(previous.identity, (), previous.last, previous.served)


def compute(identity: Identity, previous: Entry | None, transitions: Iterable[Transition], day: date) -> Entry:
    """A day's entry from the day before's (None: the resource had no transition before) and every transition
    whose time lies in the day (others are ignored)."""
    start, end = day_start(day), day_start(day) + ONE_DAY
    ts = [t for t in ordered(transitions) if start <= t.at < end]
    base = carried(previous) if previous is not None else Entry(identity)
    return _fold(replace(base, identity=identity), ts, day)


def before(identity: Identity, transitions: Iterable[Transition], day: date) -> Entry | None:
    """The entry a resource ends the day before ``day`` in (its stretches not kept), from its transitions; None
    when it had none before."""
    ts = [t for t in ordered(transitions) if t.at < day_start(day)]
    if not ts:
        return None
    billable = billable_states(identity.resource_type)
    return Entry(identity, (), ts[-1], any(t.status in billable for t in ts))


def beyond_last(entry: Entry, transitions: Iterable[Transition]) -> list[Transition]:
    """The transitions without those that repeat the entry's ``last`` just before it (same time and status,
    ordered before it: a change's old side, ``{eventId}~old``, usually is). Such a one changes nothing: its
    stretch ends at ``last`` the same instant, and ``last`` has its status."""
    last = entry.last
    return [t for t in transitions
            if last is None or not (t.at == last.at and t.status == last.status and t.order < last.order)]


def in_order(entry: Entry, transitions: Sequence[Transition]) -> bool:
    """Can ``extend`` add these: all after ``last`` (a redelivered one, or one arriving late, is not)?"""
    return entry.last is None or all(t.order > entry.last.order for t in transitions)


def extend(entry: Entry, transitions: Iterable[Transition], day: date) -> Entry:
    """The entry with transitions that came after it (``in_order``), in the day."""
    return _fold(entry, ordered(transitions), day)


def intervals(entry: Entry, day: date, horizon: datetime) -> list[Interval]:
    """The day's billable intervals up to ``horizon``: as ``intervals.usage`` gives them for the day."""
    start = day_start(day)
    end = min(start + ONE_DAY, horizon)
    if entry.compacted and entry.last is not None and end < entry.last.at:
        raise Unservable(f"{entry.identity.key} on {day}: compacted, asked up to before its last transition")
    out = [Interval(iv.start, min(iv.end, end), iv.status, iv.labels) for iv in entry.closed if iv.start < end]
    last = entry.last
    if last is not None and last.at < end and _billable(entry.identity.resource_type, last.status, entry.served):
        s = max(last.at, start)
        if end > s:
            _append(out, Interval(s, end, last.status, last.labels))
    return out


def days(first: date, last: date) -> list[date]:
    out, d = [], first
    while d <= last:
        out.append(d)
        d += timedelta(days=1)
    return out


# ---- stored form ----------------------------------------------------------------------------------------------
def to_us(dt: datetime) -> int:
    return (dt - EPOCH_UTC) // timedelta(microseconds=1)


def from_us(us: int) -> datetime:
    return EPOCH_UTC + timedelta(microseconds=us)


def _t_doc(t: Transition) -> dict[str, Any]:
    return {"at": timeutil.format(t.at), "status": t.status, "id": t.event_id, "observedAt": t.observed_at,
            "publishedAt": t.published_at, "labels": dict(t.labels)}


def _t_of(d: Mapping[str, Any]) -> Transition:
    return Transition(timeutil.parse(d["at"]), d["status"], d["id"], d.get("observedAt", ""),
                      dict(d.get("labels") or {}), d.get("publishedAt", ""))


def encode(e: Entry) -> dict[str, Any]:
    i = e.identity
    return {"doc": i.doc_id, "key": i.key, "provider": i.provider, "type": i.resource_type, "served": e.served,
            "compacted": e.compacted,
            "last": _t_doc(e.last) if e.last else None,
            "iv": [{"s": to_us(iv.start), "e": to_us(iv.end), "status": iv.status, "labels": dict(iv.labels)}
                   for iv in e.closed]}


def decode(d: Mapping[str, Any]) -> Entry:
    return Entry(Identity(d["doc"], d["key"], d["provider"], d["type"]),
                 tuple(Interval(from_us(i["s"]), from_us(i["e"]), i["status"], dict(i.get("labels") or {}))
                       for i in d.get("iv") or []),
                 _t_of(d["last"]) if d.get("last") else None, bool(d.get("served")), bool(d.get("compacted")))
