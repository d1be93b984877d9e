"""The daily usage snapshot (shared/state/usage/snapshot.py, issue 40) on the Firestore emulator: usage served
from it equals the computation from every transition, whatever arrives after billing kept it (late changes
for a stored day, a redelivery, a new resource dated days back, changes across midnight), before and after the
next tick, and a call reads a few documents per day instead of every transition; billing keeps it on the sweep's
ticks."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import pytest
from dcm_status_contracts import timeutil
from dcm_status_contracts.model import PubSubMessage

from shared.state.usage import keeper, snapshot
from shared.state.usage import report as usage_report
from tests.functional.test_billing import deliver, lifecycle
from tests.functional.test_usage_api import ACME, FLEET, ZETA
from tests.functional.test_usage_api import D1 as FLEET_D1

# test_usage_api's known fleet, moved to end two days ago (the snapshot stores every day up to today)
D1, D2, D3, D5 = (timeutil.now().date() - timedelta(days=2 - n) for n in (0, 1, 2, 4))
SHIFT = D1 - date.fromisoformat(FLEET_D1)


def moved(steps):
    return [(timeutil.format(timeutil.parse(at) + SHIFT), status, labels) for at, status, labels in steps]


def at(day: date, hhmmss: str) -> str:
    return f"{day.isoformat()}T{hhmmss}Z"


LATER = {  # arrives after the first tick
    "aws/vm/i-2": lifecycle("aws/vm/i-2", [], late=[(at(D1, "03:00:00"), "STOPPED", ACME),
                                                     (at(D1, "04:30:00"), "RUNNING", ACME)]),
    "gcp/vm/long": lifecycle("gcp/vm/long", [(at(D2, "23:30:00"), "RUNNING", ZETA),
                                             (at(D3, "00:30:00"), "STOPPED", ZETA),
                                             (at(D3, "01:00:00"), "RUNNING", ACME)]),
    "aws/volume/late-new": lifecycle("aws/volume/late-new", [(at(D1, "23:59:59"), "AVAILABLE", {})]),
}
BYS = ("resource", "tenant", "provider", "resourceType")


def _after_grace() -> datetime:
    """A tick's time at which everything recorded so far is GRACE old: its watermark is now."""
    return timeutil.now() + snapshot.GRACE


def _both(db, start: str, end: str, now: datetime) -> tuple[list, list]:
    s = timeutil.parse(start) if isinstance(start, str) else start
    served = usage_report.resource_usage(db, s, end, now=now)
    reference = usage_report.from_transitions(db, s, min(timeutil.parse(end), now))
    return served, reference


def _same(db, start, end, now) -> None:
    served, reference = _both(db, start, end, now)
    assert [(u.key, u.provider, u.resource_type, [(iv.start, iv.end, iv.status, dict(iv.labels))
                                                  for iv in u.intervals]) for u in served] == \
        [(u.key, u.provider, u.resource_type, [(iv.start, iv.end, iv.status, dict(iv.labels))
                                               for iv in u.intervals]) for u in reference]
    for by in BYS:
        assert usage_report.aggregate(served, [by]) == usage_report.aggregate(reference, [by])
    return served


@pytest.fixture
def fleet(upsert, firestore):
    for key, steps in FLEET.items():
        deliver(upsert, lifecycle(key, moved(steps)))
    return firestore


def test_without_a_snapshot_the_computation_reads_every_transition(fleet):
    assert snapshot.read_state(fleet) is None
    assert snapshot.serve(fleet, timeutil.parse(at(D1, "00:00:00")), timeutil.parse(at(D3, "00:00:00"))) is None


def test_served_usage_equals_the_transitions_through_late_changes_and_midnight(fleet, upsert):
    first = snapshot.tick(fleet, _after_grace())
    assert first["chunksWritten"] > 0
    state = snapshot.read_state(fleet)
    assert state.first == D1 and state.last == D3  # today
    now = timeutil.now()
    _same(fleet, at(D1, "00:00:00"), at(D3, "00:00:00"), now)

    for events in LATER.values():  # recorded after the watermark: applied at each call
        deliver(upsert, events)
    deliver(upsert, LATER["aws/vm/i-2"])  # redelivered
    for start, end in ((D1, D3), (D2, D5), (D1, D5)):
        _same(fleet, at(start, "00:00:00"), at(end, "00:00:00"), timeutil.now())

    snapshot.tick(fleet, _after_grace())  # ... then kept in the days
    assert snapshot.read_state(fleet).watermark_us > state.watermark_us
    for start, end in ((D1, D3), (D2, D5), (D1, D5)):
        _same(fleet, at(start, "00:00:00"), at(end, "00:00:00"), timeutil.now())
    served = _same(fleet, at(D3, "00:00:00"), at(D5, "00:00:00"), timeutil.now())
    assert {u.key for u in served} == {"gcp/vm/long", "aws/volume/late-new"}  # still billed today


def test_a_window_before_the_first_day_is_computed_from_the_transitions(fleet):
    snapshot.tick(fleet, _after_grace())
    before = D1 - timedelta(days=2)
    assert snapshot.serve(fleet, timeutil.parse(at(before, "00:00:00")), timeutil.parse(at(D2, "00:00:00"))) is None
    _same(fleet, at(before, "00:00:00"), at(D2, "00:00:00"), timeutil.now())


def test_a_call_reads_the_windows_days_not_every_transition(fleet, upsert, monkeypatch):
    snapshot.tick(fleet, _after_grace())
    deliver(upsert, LATER["gcp/vm/long"])
    snapshot.tick(fleet, _after_grace())
    read = []
    day = snapshot.Snapshot.day

    def counted(self, d):
        out = day(self, d)
        read.append(self.reads)
        return out

    monkeypatch.setattr(snapshot.Snapshot, "day", counted)
    served = snapshot.serve(fleet, timeutil.parse(at(D1, "00:00:00")), timeutil.parse(at(D3, "00:00:00")))
    assert served and max(read) == 2  # one chunk a day: D1 and D2


def test_a_day_is_split_into_more_chunks_as_it_grows_and_served_whole(fleet, upsert, monkeypatch):
    monkeypatch.setattr(snapshot, "CHUNK", 2)
    monkeypatch.setattr(snapshot, "CHUNK_MAX", 3)
    snapshot.tick(fleet, _after_grace())
    before = {s.to_dict()["of"] for s in fleet.collection(snapshot.USAGE_DAYS).document(D2.isoformat())
              .collection(snapshot.CHUNKS).stream()}
    for events in LATER.values():
        deliver(upsert, events)
    snapshot.tick(fleet, _after_grace())
    chunks = [s.to_dict() for s in fleet.collection(snapshot.USAGE_DAYS).document(D2.isoformat())
              .collection(snapshot.CHUNKS).stream()]
    assert before and max(before) >= 2 and len(chunks) == chunks[0]["of"] >= max(before)
    assert all(len(c["entries"]) <= 3 for c in chunks)
    _same(fleet, at(D1, "00:00:00"), at(D5, "00:00:00"), timeutil.now())


def test_a_second_keeper_waits_while_another_holds_the_snapshot(fleet):
    """Two ticks at once (a redelivery while the first still keeps): the second finds the claim and writes
    nothing (shared/state/usage/keeper.py)."""
    now = _after_grace()
    held = keeper.claim(fleet, snapshot.state_ref(fleet), now)
    assert held is not None
    assert snapshot.tick(fleet, now) == {"transitions": 0, "chunksRead": 0, "chunksWritten": 0, "held": 1}
    assert snapshot.read_state(fleet) is None  # a claim is no snapshot: usage is computed from the transitions
    assert snapshot.tick(fleet, now + keeper.LEASE + timedelta(seconds=1))["chunksWritten"] > 0  # a crashed keeper's claim ends


def test_a_keeper_overtaken_mid_keep_writes_nothing_more_and_nothing_is_lost(fleet, upsert, monkeypatch):
    """A keeper that outlived its claim (another took it over) loses its next commit: none of its chunks, and not
    its older watermark over the newer keeper's, under which the transitions between the two would be lost."""
    snapshot.tick(fleet, _after_grace())
    for events in LATER.values():
        deliver(upsert, events)
    slow = _after_grace()
    real_save, newer = snapshot.Snapshot.save, {}

    def overtaken_save(self, last, watermark_us, claim, now):
        if not newer:  # the slow keeper has computed: another keeps everything meanwhile, past its claim
            newer["tick"] = snapshot.tick(fleet, slow + keeper.LEASE + timedelta(seconds=1))
            newer["state"] = snapshot.read_state(fleet)
        return real_save(self, last, watermark_us, claim, now)

    monkeypatch.setattr(snapshot.Snapshot, "save", overtaken_save)
    slow_tick = snapshot.tick(fleet, slow)
    assert slow_tick["lost"] == 1 and slow_tick["chunksWritten"] == 0
    assert "lost" not in newer["tick"] and newer["tick"]["chunksWritten"] > 0
    assert snapshot.read_state(fleet) == newer["state"]  # the newer watermark stands
    for start, end in ((D1, D3), (D2, D5), (D1, D5)):
        _same(fleet, at(start, "00:00:00"), at(end, "00:00:00"), timeutil.now())


def test_billing_keeps_the_snapshot_on_a_tick_and_reads_only_its_state_before_its_period(fleet, upsert, pipeline):
    """Issue 40: billing, pushed the sweep's ticks (infra/topology.yaml ``dcm-billing``), keeps the snapshot every
    ``DCM_USAGE_EVERY_SECONDS``; a tick before that reads the snapshot's state and nothing else."""
    from shared.billing.handler import Billing

    now = _after_grace()
    tick = PubSubMessage(b'{"tick": "sweep"}', {}, "t-1", None, "dcm-status-sweep")
    Billing(fleet, 300, clock=lambda: now)(tick)
    state = snapshot.read_state(fleet)
    assert state is not None and state.first == D1 and state.last == D3
    _same(fleet, at(D1, "00:00:00"), at(D3, "00:00:00"), timeutil.now())
    deliver(upsert, LATER["gcp/vm/long"])
    Billing(fleet, 300, clock=lambda: now + timedelta(seconds=299))(tick)  # not due: its state read, nothing kept
    assert snapshot.read_state(fleet) == state
    Billing(fleet, 300, clock=lambda: now + timedelta(seconds=300) + snapshot.GRACE)(tick)
    assert snapshot.read_state(fleet).watermark_us > state.watermark_us
    _same(fleet, at(D1, "00:00:00"), at(D5, "00:00:00"), timeutil.now())
    # the wiring: a tick on the sweep's topic reaches billing (and the sweep), as the topology routes it
    pipeline.publish("dcm-status-sweep", b'{"tick": "sweep"}')
    assert {d.subscription.name for d in pipeline.settle()} >= {"dcm-sweep", "dcm-billing"}
