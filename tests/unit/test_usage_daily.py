"""A resource's usage a day at a time (shared/state/usage/daily.py) equals ``intervals.usage`` over its whole
transition set: computed day by day, extended by transitions arriving in order, compacted after a day of
flapping (the rows, then, not the intervals), stored and read back; and a compacted day asked up to before its
last transition refuses rather than guess."""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta, timezone

import pytest

from shared.state.usage import daily
from shared.state.usage.intervals import Transition, usage
from shared.state.usage.rates import RateCard
from shared.state.usage.report import ResourceUsage, aggregate

D0 = date(2026, 3, 1)
START = datetime(2026, 3, 1, tzinfo=timezone.utc)
STATUSES = {"vm": ["RUNNING", "STOPPED", "PROVISIONING", "FAILED"],
            "cluster": ["PROVISIONING", "PROGRESSING", "ACTIVE", "UNAVAILABLE", "DELETED"]}
CARD = RateCard.from_dict({"currency": "EUR", "resourceTypes": {"vm": 0.045, "cluster": 0.1337}})


def fleet_of(seed: int, rtype: str, n: int = 12) -> list[Transition]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        at = START + timedelta(seconds=rng.choice([0, rng.randrange(0, 4 * 86400)]))  # ties and midnights too
        out.append(Transition(at, rng.choice(STATUSES[rtype]), f"e{i}", f"o{rng.randrange(3)}",
                              {"tenant": rng.choice(["a", "b"])}))
    return out


def by_days(ident: daily.Identity, ts: list[Transition], last: date) -> list[daily.Entry]:
    entries, prev = [], None
    for d in daily.days(D0, last):
        e = daily.compute(ident, prev, ts, d)
        entries.append(e)
        prev = e if e.last else None
    return entries


def served(entries: list[daily.Entry], horizon: datetime) -> list:
    return [iv for d, e in zip(daily.days(D0, (horizon - timedelta(microseconds=1)).date()), entries)
            for iv in daily.intervals(e, d, horizon)]


def shape(ivs) -> list:
    return [(iv.start, iv.end, iv.status, dict(iv.labels)) for iv in ivs]


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("rtype", ["vm", "cluster"])
def test_day_by_day_equals_the_whole_set(seed, rtype):
    ts = fleet_of(seed, rtype)
    ident = daily.Identity("d", "k", "aws", rtype)
    entries = by_days(ident, ts, D0 + timedelta(days=4))
    for horizon in (START + timedelta(days=2), START + timedelta(days=3, hours=7, seconds=13),
                    START + timedelta(days=5)):
        if any(e.compacted for e in entries):
            continue
        assert shape(served(entries, horizon)) == shape(usage(ts, rtype, START, horizon, now=horizon))


@pytest.mark.parametrize("seed", range(30))
def test_transitions_arriving_in_order_extend_the_day_as_computing_it_whole(seed):
    ts = sorted(fleet_of(seed, "vm"), key=lambda t: t.order)
    ident = daily.Identity("d", "k", "aws", "vm")
    whole = daily.compute(ident, None, [t for t in ts if t.at.date() == D0], D0)
    entry = daily.Entry(ident)
    for t in (t for t in ts if t.at.date() == D0):
        assert daily.in_order(entry, [t])
        entry = daily.extend(entry, [t], D0)
    assert entry == whole
    if whole.last:  # a redelivery, or anything before the last, cannot extend it
        assert not daily.in_order(whole, [whole.last])


@pytest.mark.parametrize("seed", range(30))
def test_a_changes_old_side_repeating_the_last_transition_changes_nothing(seed):
    ts = sorted(fleet_of(seed, "cluster"), key=lambda t: t.order)
    ident = daily.Identity("d", "k", "aws", "cluster")
    day = [t for t in ts if t.at.date() == D0]
    if len(day) < 2:
        return
    entry = daily.compute(ident, None, day[:-1], D0)
    old = Transition(entry.last.at, entry.last.status, entry.last.event_id + "~old", "", {"tenant": "other"})
    news = daily.beyond_last(entry, [old, day[-1]])
    assert news == [day[-1]] and daily.in_order(entry, news)
    whole = daily.compute(ident, None, [*day, old], D0)
    assert daily.extend(entry, news, D0) == whole


def test_a_day_of_flapping_is_compacted_into_the_same_rows():
    ts = [Transition(START + timedelta(minutes=7 * i), "RUNNING" if i % 2 == 0 else "STOPPED", f"f{i}",
                     labels={"tenant": "a" if i % 4 < 2 else "b"}) for i in range(400)]
    ident = daily.Identity("d", "aws/vm/flap", "aws", "vm")
    entries = by_days(ident, ts, D0 + timedelta(days=2))
    assert entries[0].compacted and len(entries[0].closed) <= 2
    stored = [daily.decode(daily.encode(e)) for e in entries]
    horizon = START + timedelta(days=3)
    got = [ResourceUsage("aws/vm/flap", "aws", "vm", served(stored, horizon))]
    want = [ResourceUsage("aws/vm/flap", "aws", "vm", usage(ts, "vm", START, horizon, now=horizon))]
    for by in (["tenant"], ["resource"], ["status"]):
        assert aggregate(got, by, rates=CARD) == aggregate(want, by, rates=CARD)
    with pytest.raises(daily.Unservable):
        daily.intervals(stored[0], D0, START + timedelta(hours=3))
