"""The daily usage snapshot (shared/state/usage/snapshot.py, issue 40) on the Firestore emulator: usage served
from it equals the computation from every transition, whatever arrives after the sweep kept it (late changes
for a stored day, a redelivery, a new resource dated days back, changes across midnight), before and after the
next tick, and a call reads a few documents per day instead of every transition."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from dcm_status_contracts import timeutil

from shared.state.usage import report as usage_report
from shared.state.usage import snapshot
from tests.functional.test_billing import deliver, lifecycle
from tests.functional.test_usage_api import FLEET, D1, D2, D3, ACME, ZETA

LATER = {  # arrives after the first tick
    "aws/vm/i-2": lifecycle("aws/vm/i-2", [], late=[(f"{D1}T03:00:00Z", "STOPPED", ACME),
                                                     (f"{D1}T04:30:00Z", "RUNNING", ACME)]),
    "gcp/vm/long": lifecycle("gcp/vm/long", [(f"{D2}T23:30:00Z", "RUNNING", ZETA),
                                             (f"{D3}T00:30:00Z", "STOPPED", ZETA),
                                             (f"{D3}T01:00:00Z", "RUNNING", ACME)]),
    "aws/volume/late-new": lifecycle("aws/volume/late-new", [(f"{D1}T23:59:59Z", "AVAILABLE", {})]),
}
BYS = ("resource", "tenant", "provider", "resourceType")


def _after_grace() -> datetime:
    return timeutil.now() + snapshot.GRACE + timedelta(seconds=1)


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
def fleet(billing, firestore):
    for key, steps in FLEET.items():
        deliver(billing, lifecycle(key, steps))
    return firestore


def test_without_a_snapshot_the_computation_reads_every_transition(fleet):
    assert snapshot.read_state(fleet) is None
    assert snapshot.serve(fleet, timeutil.parse(f"{D1}T00:00:00Z"), timeutil.parse(f"{D3}T00:00:00Z")) is None


def test_served_usage_equals_the_transitions_through_late_changes_and_midnight(fleet, billing):
    first = snapshot.tick(fleet, _after_grace())
    assert first["chunksWritten"] > 0
    state = snapshot.read_state(fleet)
    assert state.first.isoformat() == D1
    now = timeutil.now()
    _same(fleet, f"{D1}T00:00:00Z", f"{D3}T00:00:00Z", now)

    for events in LATER.values():  # recorded after the watermark: applied at each call
        deliver(billing, events)
    deliver(billing, LATER["aws/vm/i-2"])  # redelivered
    for start, end in ((D1, D3), (D2, "2026-03-05"), (D1, "2026-04-01")):
        _same(fleet, f"{start}T00:00:00Z", f"{end}T00:00:00Z", timeutil.now())

    snapshot.tick(fleet, _after_grace())  # ... then kept in the days
    assert snapshot.read_state(fleet).watermark_us > state.watermark_us
    for start, end in ((D1, D3), (D2, "2026-03-05"), (D1, "2026-04-01")):
        _same(fleet, f"{start}T00:00:00Z", f"{end}T00:00:00Z", timeutil.now())
    today = timeutil.now().date()
    recent = datetime.combine(today - timedelta(days=2), datetime.min.time(), tzinfo=timezone.utc)
    served = _same(fleet, recent, timeutil.format(recent + timedelta(days=3)), timeutil.now())
    assert {u.key for u in served} == {"gcp/vm/long", "aws/volume/late-new"}  # still billed today


def test_a_window_before_the_first_day_is_computed_from_the_transitions(fleet):
    snapshot.tick(fleet, _after_grace())
    assert snapshot.serve(fleet, timeutil.parse("2026-02-27T00:00:00Z"), timeutil.parse(f"{D2}T00:00:00Z")) is None
    _same(fleet, "2026-02-27T00:00:00Z", f"{D2}T00:00:00Z", timeutil.now())


def test_a_call_reads_the_windows_days_not_every_transition(fleet, billing, monkeypatch):
    snapshot.tick(fleet, _after_grace())
    deliver(billing, LATER["gcp/vm/long"])
    snapshot.tick(fleet, _after_grace())
    read = []
    day = snapshot.Snapshot.day

    def counted(self, d):
        out = day(self, d)
        read.append(self.reads)
        return out

    monkeypatch.setattr(snapshot.Snapshot, "day", counted)
    served = snapshot.serve(fleet, timeutil.parse(f"{D1}T00:00:00Z"), timeutil.parse(f"{D3}T00:00:00Z"))
    assert served and max(read) == 2  # one chunk a day: D1 and D2
