"""Usage intervals: a pure function of a resource's set of status transitions.

A *transition* says "from ``at`` on, the resource was ``status``" (``at`` is the
provider's lastTransitionTime, the change event's ``newTransitionTime``). The
billing function stores every transition it receives, keyed by change-event id,
so the stored set is the same whatever the delivery order and however often
a change was redelivered. Intervals are then recomputed from that set:

1. drop duplicates (same event id), order by ``at``; transitions at the same
   instant are ordered as upsert orders updates (``observedAt``, event id);
2. each transition holds until the next one (or the horizon, ``min(end, now)``:
   a resource still running at report time is counted up to then);
3. keep the stretches spent in a billable state of the resource type;
4. clip to the report window ``[start, horizon)`` and split at UTC midnight.

A late change (one upsert refused as stale for the current state) is just one
more transition in the set: it corrects the intervals it falls into.

Everything here is exact to the microsecond (timedelta arithmetic).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from typing import Iterable, Mapping, Sequence

from dcm_status_contracts import timeutil

# The states in which a resource is billed, per resource type. Each type is stored in its current
# vocabulary; the names of earlier schema versions stay listed for transitions recorded before.
BILLABLE: Mapping[str, frozenset[str]] = {
    "vm": frozenset({"RUNNING"}),
    "container": frozenset({"RUNNING"}),
    "cluster": frozenset({"ACTIVE", "DEGRADED", "UPDATING"}),  # UPDATING: cluster v1
    "volume": frozenset({"AVAILABLE", "RUNNING", "DEGRADED"}),  # a volume is billed while it exists
    "storage": frozenset({"RUNNING"}),  # bound: capacity allocated
    "network": frozenset({"READY", "DEGRADED", "ACTIVE"}),  # ACTIVE: network v1
    "database": frozenset({"RUNNING"}),  # CloudNativePG: a ready instance serves
}
# States billed only once the resource has served (been in a BILLABLE state): the same word means a
# first creation (not billed) or, later, an update or an outage of something that exists (billed).
# cluster v2 merged CREATING and UPDATING into PROGRESSING; storage reports an expansion as PROVISIONING.
BILLABLE_ONCE_SERVED: Mapping[str, frozenset[str]] = {
    "cluster": frozenset({"PROGRESSING", "UNAVAILABLE"}),
    "storage": frozenset({"PROVISIONING"}),
}

ONE_DAY = timedelta(days=1)
ONE_MICROSECOND = timedelta(microseconds=1)


def billable_states(resource_type: str) -> frozenset[str]:
    """The billable states of a resource type (none for a type billing does not know)."""
    return BILLABLE.get(resource_type, frozenset())


def as_datetime(value: datetime | str) -> datetime:
    """An aware UTC datetime from a datetime or an RFC 3339 string."""
    if isinstance(value, str):
        return timeutil.parse(value)
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: give a timezone (UTC)")
    return value.astimezone(timezone.utc)


def microseconds(delta: timedelta) -> int:
    return delta // ONE_MICROSECOND


@dataclass(frozen=True)
class Transition:
    """From ``at`` on, the resource was ``status`` (labels: its metadata at that time)."""

    at: datetime
    status: str
    event_id: str
    observed_at: str = ""  # tie-breaks between transitions at the same instant, as upsert orders them:
    labels: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    published_at: str = ""  # event time, then ingress publication (whole-second clocks)

    @property
    def order(self) -> tuple[datetime, str, str, str]:
        return (self.at, self.observed_at, self.published_at, self.event_id)

    @classmethod
    def of(cls, at: datetime | str, status: str, event_id: str | None = None, observed_at: str = "",
           labels: Mapping[str, str] | None = None) -> "Transition":
        at_dt = as_datetime(at)
        return cls(at_dt, status, event_id or f"{timeutil.format(at_dt)}/{status}", observed_at, dict(labels or {}))


@dataclass(frozen=True)
class Interval:
    """``[start, end)`` spent in ``status``; labels from the transition that began it."""

    start: datetime
    end: datetime
    status: str
    labels: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def duration(self) -> timedelta:
        return self.end - self.start

    @property
    def microseconds(self) -> int:
        return microseconds(self.duration)

    @property
    def seconds(self) -> float:
        return self.microseconds / 1_000_000

    @property
    def day(self) -> str:
        """The UTC day the interval starts on (after split_days: the day it lies in)."""
        return self.start.date().isoformat()


def ordered(transitions: Iterable[Transition]) -> list[Transition]:
    """Distinct transitions (by event id; first seen wins) in time order."""
    seen: dict[str, Transition] = {}
    for t in transitions:
        seen.setdefault(t.event_id, t)
    return sorted(seen.values(), key=lambda t: t.order)


def billable_intervals(transitions: Iterable[Transition], resource_type: str,
                       horizon: datetime) -> list[Interval]:
    """Stretches in a billable state, each ending at the next transition or at ``horizon``.

    A state of ``BILLABLE_ONCE_SERVED`` counts only after the resource was once in a billable
    state. Adjacent stretches with the same status and labels are merged.
    """
    billable = billable_states(resource_type)
    once_served = BILLABLE_ONCE_SERVED.get(resource_type, frozenset())
    ts = [t for t in ordered(transitions) if t.at < horizon]
    out: list[Interval] = []
    served = False
    for i, cur in enumerate(ts):
        end = ts[i + 1].at if i + 1 < len(ts) else horizon
        served = served or cur.status in billable
        if not (cur.status in billable or (served and cur.status in once_served)) or end <= cur.at:
            continue
        prev = out[-1] if out else None
        if prev and prev.end == cur.at and prev.status == cur.status and prev.labels == cur.labels:
            out[-1] = Interval(prev.start, end, prev.status, prev.labels)
        else:
            out.append(Interval(cur.at, end, cur.status, cur.labels))
    return out


def clip(intervals: Iterable[Interval], start: datetime, end: datetime) -> list[Interval]:
    """The parts of the intervals inside ``[start, end)``."""
    out = []
    for iv in intervals:
        s, e = max(iv.start, start), min(iv.end, end)
        if e > s:
            out.append(Interval(s, e, iv.status, iv.labels))
    return out


def _next_midnight(dt: datetime) -> datetime:
    return datetime.combine(dt.date() + ONE_DAY, time(0), tzinfo=timezone.utc)


def split_days(intervals: Iterable[Interval]) -> list[Interval]:
    """Cut every interval at each UTC midnight it spans."""
    out = []
    for iv in intervals:
        s = iv.start
        while s < iv.end:
            e = min(iv.end, _next_midnight(s))
            out.append(Interval(s, e, iv.status, iv.labels))
            s = e
    return out


def usage(transitions: Iterable[Transition], resource_type: str, start: datetime | str, end: datetime | str,
          now: datetime | None = None) -> list[Interval]:
    """Billable intervals in ``[start, min(end, now))``, split per UTC day."""
    start_dt, end_dt = as_datetime(start), as_datetime(end)
    horizon = min(end_dt, as_datetime(now) if now is not None else timeutil.now())
    if horizon <= start_dt:
        return []
    return split_days(clip(billable_intervals(transitions, resource_type, horizon), start_dt, horizon))


def day_start(day: date | str) -> datetime:
    d = date.fromisoformat(day) if isinstance(day, str) else day
    return datetime.combine(d, time(0), tzinfo=timezone.utc)


def per_day(intervals: Sequence[Interval]) -> dict[str, int]:
    """Microseconds per UTC day (intervals already split)."""
    totals: dict[str, int] = {}
    for iv in intervals:
        totals[iv.day] = totals.get(iv.day, 0) + iv.microseconds
    return totals
