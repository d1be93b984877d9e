"""Interval arithmetic: a pure function of the transition set (shared.state.usage.intervals)."""

from __future__ import annotations

import itertools
import random
from datetime import datetime, timedelta, timezone

import pytest

from shared.state.usage.intervals import (
    BILLABLE,
    Interval,
    Transition,
    billable_intervals,
    billable_states,
    clip,
    per_day,
    split_days,
    usage,
)

D1, D2, D3, D4 = "2026-03-01", "2026-03-02", "2026-03-03", "2026-03-04"
START, END = f"{D1}T00:00:00Z", f"{D4}T00:00:00Z"
LONG_AGO_NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)  # "now" well after the window


def t(at: str, status: str, eid: str | None = None, **labels: str) -> Transition:
    return Transition.of(at, status, eid, labels=labels)


def seconds_per_day(transitions, resource_type="vm", start=START, end=END, now=LONG_AGO_NOW) -> dict[str, float]:
    return {day: us / 1e6 for day, us in per_day(usage(transitions, resource_type, start, end, now)).items()}


# ---- billable states ------------------------------------------------------------------
def test_billable_states_per_type():
    assert billable_states("vm") == {"RUNNING"}
    assert billable_states("container") == {"RUNNING"}
    assert billable_states("cluster") == {"ACTIVE", "DEGRADED", "UPDATING"}
    assert billable_states("volume") == {"AVAILABLE", "RUNNING", "DEGRADED"}
    assert billable_states("network") == {"READY", "DEGRADED", "ACTIVE"}
    assert billable_states("storage") == {"RUNNING"}
    assert billable_states("database") == {"RUNNING"}  # CloudNativePG (issue 38)
    assert billable_states("queue") == frozenset()  # unknown type: recorded, never billed


def test_every_billable_state_exists_in_its_status_schema():
    from dcm_status_contracts.schemas import registry

    from shared.state.usage.intervals import BILLABLE_ONCE_SERVED

    reg = registry()
    for resource_type, states in list(BILLABLE.items()) + list(BILLABLE_ONCE_SERVED.items()):
        known = {st for s in reg.status.values() if s.resource_type == resource_type for st in s.statuses}
        assert states <= known, resource_type  # a status of some version of the type's schema


# ---- basic lifecycles -----------------------------------------------------------------
def test_running_then_stopped():
    ts = [t(f"{D1}T09:00:00Z", "RUNNING"), t(f"{D1}T17:30:00Z", "STOPPED")]
    assert seconds_per_day(ts) == {D1: 8.5 * 3600}


def test_non_billable_states_count_nothing():
    ts = [t(f"{D1}T08:00:00Z", "PROVISIONING"), t(f"{D1}T09:00:00Z", "STOPPED"), t(f"{D1}T10:00:00Z", "PAUSED"),
          t(f"{D1}T11:00:00Z", "FAILED")]
    assert seconds_per_day(ts) == {}


def test_restart_counts_both_runs_and_not_the_pause_between():
    ts = [t(f"{D1}T09:00:00Z", "RUNNING"), t(f"{D1}T10:00:00Z", "STOPPING"), t(f"{D1}T10:01:00Z", "STOPPED"),
          t(f"{D1}T12:00:00Z", "RUNNING"), t(f"{D1}T12:30:00Z", "STOPPED")]
    assert seconds_per_day(ts) == {D1: 3600 + 1800}
    intervals = usage(ts, "vm", START, END, LONG_AGO_NOW)
    assert [(iv.start.hour, iv.end.hour, iv.end.minute) for iv in intervals] == [(9, 10, 0), (12, 12, 30)]


def test_deletion_ends_billing():
    ts = [t(f"{D1}T09:00:00Z", "RUNNING"), t(f"{D1}T09:00:10Z", "DELETED")]
    assert seconds_per_day(ts) == {D1: 10}


def test_deleted_then_nothing_more_even_when_report_runs_later():
    ts = [t(f"{D1}T23:00:00Z", "RUNNING"), t(f"{D2}T01:00:00Z", "DELETING"), t(f"{D2}T01:05:00Z", "DELETED")]
    assert seconds_per_day(ts) == {D1: 3600, D2: 3600}


# ---- midnight ------------------------------------------------------------------------
def test_split_at_midnight():
    ts = [t(f"{D1}T22:00:00Z", "RUNNING"), t(f"{D2}T06:15:00Z", "STOPPED")]
    intervals = usage(ts, "vm", START, END, LONG_AGO_NOW)
    assert [(iv.day, iv.seconds) for iv in intervals] == [(D1, 7200), (D2, 22500)]
    assert intervals[0].end == intervals[1].start == datetime(2026, 3, 2, tzinfo=timezone.utc)


def test_transition_exactly_at_midnight():
    ts = [t(f"{D1}T00:00:00Z", "RUNNING"), t(f"{D2}T00:00:00Z", "STOPPED")]
    assert seconds_per_day(ts) == {D1: 86400}


def test_one_microsecond_before_midnight():
    ts = [t(f"{D1}T23:59:59.999999Z", "RUNNING"), t(f"{D2}T00:00:00.000001Z", "STOPPED")]
    intervals = usage(ts, "vm", START, END, LONG_AGO_NOW)
    assert [(iv.day, iv.microseconds) for iv in intervals] == [(D1, 1), (D2, 1)]


def test_multi_day_run_is_one_interval_per_day():
    ts = [t(f"{D1}T12:00:00Z", "RUNNING"), t(f"{D3}T12:00:00Z", "STOPPED")]
    assert seconds_per_day(ts) == {D1: 43200, D2: 86400, D3: 43200}


def test_offsets_are_converted_to_utc_before_splitting():
    # 01:00+02:00 is 23:00Z the day before
    ts = [t("2026-03-02T01:00:00+02:00", "RUNNING"), t("2026-03-02T03:00:00+02:00", "STOPPED")]
    assert seconds_per_day(ts) == {D1: 3600, D2: 3600}


# ---- stuck resources and the horizon ---------------------------------------------------
def test_stuck_running_is_counted_to_the_report_end():
    ts = [t(f"{D2}T10:00:30Z", "RUNNING")]
    assert seconds_per_day(ts) == {D2: 50370, D3: 86400}


def test_stuck_running_is_counted_to_now_when_now_is_before_the_end():
    ts = [t(f"{D1}T10:00:00Z", "RUNNING")]
    now = datetime(2026, 3, 2, 6, 0, tzinfo=timezone.utc)
    assert seconds_per_day(ts, now=now) == {D1: 14 * 3600, D2: 6 * 3600}


def test_stuck_in_a_non_billable_state_counts_nothing():
    assert seconds_per_day([t(f"{D1}T10:00:00Z", "PROVISIONING")]) == {}


def test_cluster_billable_through_updating_and_degraded():
    ts = [t(f"{D1}T00:00:00Z", "CREATING"), t(f"{D1}T01:00:00Z", "ACTIVE"), t(f"{D1}T12:00:00Z", "UPDATING"),
          t(f"{D2}T00:00:00Z", "DEGRADED"), t(f"{D2}T03:00:00Z", "ACTIVE"), t(f"{D3}T12:00:00Z", "DELETED")]
    assert seconds_per_day(ts, "cluster") == {D1: 82800, D2: 86400, D3: 43200}


def test_volume_billed_while_it_exists():
    ts = [t(f"{D1}T10:00:00Z", "CREATING"), t(f"{D1}T10:05:00Z", "AVAILABLE"), t(f"{D2}T08:00:00Z", "RUNNING"),
          t(f"{D2}T09:00:00Z", "DEGRADED"), t(f"{D3}T09:00:00Z", "DELETING"), t(f"{D3}T09:10:00Z", "DELETED")]
    assert seconds_per_day(ts, "volume") == {D1: 50100, D2: 86400, D3: 32400}


# ---- the window ------------------------------------------------------------------------
def test_transitions_before_the_window_set_the_initial_state():
    ts = [t("2026-02-27T10:00:00Z", "RUNNING"), t(f"{D1}T02:00:00Z", "STOPPED")]
    assert seconds_per_day(ts) == {D1: 7200}


def test_transitions_after_the_window_are_ignored():
    ts = [t(f"{D3}T23:00:00Z", "RUNNING"), t(f"{D4}T05:00:00Z", "STOPPED"), t(f"{D4}T06:00:00Z", "RUNNING")]
    assert seconds_per_day(ts) == {D3: 3600}


def test_resource_running_across_the_whole_window():
    ts = [t("2026-01-01T00:00:00Z", "RUNNING"), t("2026-06-01T00:00:00Z", "STOPPED")]
    assert seconds_per_day(ts) == {D1: 86400, D2: 86400, D3: 86400}


def test_window_inside_a_day():
    ts = [t(f"{D1}T00:00:00Z", "RUNNING")]
    assert seconds_per_day(ts, start=f"{D1}T10:00:00Z", end=f"{D1}T10:00:05Z") == {D1: 5}


def test_window_in_the_future_counts_nothing():
    now = datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
    assert usage([t(f"{D1}T00:00:00Z", "RUNNING")], "vm", f"{D2}T00:00:00Z", END, now) == []


def test_empty_transition_set():
    assert usage([], "vm", START, END, LONG_AGO_NOW) == []


# ---- duplicates, same instants, late and shuffled ----------------------------------------
def test_a_redelivered_transition_never_counts_twice():
    run = t(f"{D1}T09:00:00Z", "RUNNING", "ev-1")
    stop = t(f"{D1}T10:00:00Z", "STOPPED", "ev-2")
    assert seconds_per_day([run, run, stop, run, stop]) == {D1: 3600}


def test_repeated_status_at_different_times_does_not_restart_the_clock():
    # a late RUNNING report (same status, later transition time) inside a run: still one run
    ts = [t(f"{D1}T09:00:00Z", "RUNNING"), t(f"{D1}T09:30:00Z", "RUNNING"), t(f"{D1}T10:00:00Z", "STOPPED")]
    intervals = usage(ts, "vm", START, END, LONG_AGO_NOW)
    assert [iv.seconds for iv in intervals] == [3600]


def test_duplicate_timestamps_tie_broken_by_observation_then_event_id():
    at = f"{D1}T10:00:00Z"
    running = Transition.of(at, "RUNNING", "b", observed_at="2026-03-01T10:00:01.000000Z")
    stopped = Transition.of(at, "STOPPED", "a", observed_at="2026-03-01T10:00:02.000000Z")
    start = t(f"{D1}T09:00:00Z", "RUNNING", "z")
    # STOPPED was observed last: from 10:00 on the resource is stopped
    assert seconds_per_day([stopped, start, running]) == {D1: 3600}
    # same observation time: event id decides, deterministically, in any input order
    r2 = Transition.of(at, "RUNNING", "b")
    s2 = Transition.of(at, "STOPPED", "a")
    for perm in itertools.permutations([start, r2, s2]):
        assert seconds_per_day(list(perm)) == {D1: 15 * 3600, D2: 86400, D3: 86400}  # RUNNING (id b) wins


def test_late_transition_before_a_counted_one_corrects_the_intervals():
    run = t(f"{D1}T10:00:00Z", "RUNNING")
    restart = t(f"{D1}T14:00:00Z", "RUNNING", "restart")
    delete = t(f"{D2}T00:00:00Z", "DELETED")
    assert seconds_per_day([run, restart, delete]) == {D1: 14 * 3600}
    late_stop = t(f"{D1}T12:00:00Z", "STOPPED", "late")  # arrives last, belongs in the middle
    assert seconds_per_day([run, restart, delete, late_stop]) == {D1: 12 * 3600}


def test_any_order_and_any_duplication_gives_the_same_intervals():
    ts = [t(f"{D1}T08:00:00Z", "PROVISIONING"), t(f"{D1}T09:00:00Z", "RUNNING"), t(f"{D1}T17:30:00Z", "STOPPED"),
          t(f"{D1}T22:00:00Z", "RUNNING"), t(f"{D2}T06:15:00Z", "DELETED")]
    expected = usage(ts, "vm", START, END, LONG_AGO_NOW)
    rng = random.Random(4)
    for _ in range(50):
        shuffled = ts * rng.randint(1, 3)
        rng.shuffle(shuffled)
        assert usage(shuffled, "vm", START, END, LONG_AGO_NOW) == expected
    assert per_day(expected) == {D1: 37800_000_000, D2: 22500_000_000}


# ---- labels ------------------------------------------------------------------------------
def test_intervals_carry_the_labels_of_the_transition_that_began_them():
    ts = [t(f"{D1}T09:00:00Z", "RUNNING", tenant="a"), t(f"{D1}T10:00:00Z", "RUNNING", "moved", tenant="b"),
          t(f"{D1}T11:00:00Z", "STOPPED", tenant="b")]
    intervals = usage(ts, "vm", START, END, LONG_AGO_NOW)
    assert [(iv.labels["tenant"], iv.seconds) for iv in intervals] == [("a", 3600), ("b", 3600)]


def test_adjacent_runs_with_the_same_labels_merge():
    ts = [t(f"{D1}T09:00:00Z", "RUNNING", tenant="a"), t(f"{D1}T10:00:00Z", "RUNNING", "again", tenant="a"),
          t(f"{D1}T11:00:00Z", "STOPPED")]
    assert len(billable_intervals(ts, "vm", LONG_AGO_NOW)) == 1


# ---- building blocks -------------------------------------------------------------------
def test_clip_and_split_days():
    utc = timezone.utc
    iv = Interval(datetime(2026, 3, 1, 20, tzinfo=utc), datetime(2026, 3, 3, 4, tzinfo=utc), "RUNNING")
    clipped = clip([iv], datetime(2026, 3, 1, 22, tzinfo=utc), datetime(2026, 3, 3, 2, tzinfo=utc))
    parts = split_days(clipped)
    assert [(p.day, p.seconds) for p in parts] == [(D1, 7200), (D2, 86400), (D3, 7200)]
    assert clip([iv], datetime(2026, 3, 4, tzinfo=utc), datetime(2026, 3, 5, tzinfo=utc)) == []


def test_naive_datetimes_are_refused():
    with pytest.raises(ValueError):
        usage([], "vm", datetime(2026, 3, 1), END, LONG_AGO_NOW)


def test_exact_to_the_microsecond_over_many_intervals():
    base = datetime(2026, 3, 1, tzinfo=timezone.utc)
    ts = []
    for i in range(1000):  # 1000 runs of 1.000001 s each, 10 s apart
        ts.append(Transition.of(base + timedelta(seconds=10 * i), "RUNNING", f"r{i}"))
        ts.append(Transition.of(base + timedelta(seconds=10 * i, microseconds=1_000_001), "STOPPED", f"s{i}"))
    assert per_day(usage(ts, "vm", START, END, LONG_AGO_NOW)) == {D1: 1000 * 1_000_001}


@pytest.mark.parametrize("rtype, lifecycle, hours", [
    # cluster v2: PROGRESSING is a creation (not billed) until the cluster has been ACTIVE, an update after
    ("cluster", ["PROGRESSING", "ACTIVE", "PROGRESSING", "ACTIVE", "DELETING"], 3),
    ("cluster", ["PROGRESSING", "UNAVAILABLE", "PROGRESSING", "FAILED", "DELETED"], 0),
    ("cluster", ["PROGRESSING", "ACTIVE", "UNAVAILABLE", "ACTIVE", "DELETED"], 3),
    # cluster v1 names, recorded before v2: UPDATING billed, CREATING not
    ("cluster", ["CREATING", "ACTIVE", "UPDATING", "ACTIVE", "DELETED"], 3),
    # storage: PROVISIONING before the first bind is not billed; an expansion of a bound claim is
    ("storage", ["PROVISIONING", "RUNNING", "PROVISIONING", "RUNNING", "DELETED"], 3),
    ("storage", ["PROVISIONING", "FAILED", "PROVISIONING", "DELETED"], 0),
    ("network", ["PENDING", "READY", "DEGRADED", "READY", "DELETED"], 3),
])
def test_billable_once_served(rtype, lifecycle, hours):
    start = datetime(2026, 3, 1, tzinfo=timezone.utc)
    ts = [Transition.of(start + timedelta(hours=i), status) for i, status in enumerate(lifecycle)]
    ivs = billable_intervals(ts, rtype, start + timedelta(hours=len(lifecycle)))
    assert sum(iv.seconds for iv in ivs) == hours * 3600


def test_same_instant_transitions_follow_the_ingress_publication():
    """Whole-second clocks: PENDING and RUNNING stamped at the same second; the later publication is later."""
    at = datetime(2026, 3, 1, 10, tzinfo=timezone.utc)
    pending = Transition(at, "PENDING", "e-pending", "2026-03-01T10:00:00.000000Z", {},
                         published_at="2026-03-01T10:00:00.200000Z")
    running = Transition(at, "RUNNING", "e-running", "2026-03-01T10:00:00.000000Z", {},
                         published_at="2026-03-01T10:00:00.300000Z")
    ivs = billable_intervals([running, pending], "container", at + timedelta(hours=1))
    assert [(iv.status, iv.seconds) for iv in ivs] == [("RUNNING", 3600)]
