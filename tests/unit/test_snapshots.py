"""A snapshot of the aggregates, by its own rules (shared/state/snapshots.py): how old it is, when its writer
computes it again, how long a reader may keep it, when it is outdated; and the settings of its periods."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest
from dcm_status_contracts import timeutil
from google.api_core import exceptions as gexc

from shared.api.served import Periods, Served, cache_control
from shared.runtime import settings
from shared.runtime.settings import ConfigError
from shared.state import snapshots
from shared.state.snapshots import SnapshotKind, Snapshot

AS_OF = timeutil.parse("2026-11-27T10:00:00.000000Z")


def at(seconds: float):
    return AS_OF + timedelta(seconds=seconds)


def snapshot(every: int = 60) -> Snapshot:
    return Snapshot(SnapshotKind.SUMMARY, {"total": 3}, AS_OF, every)


@pytest.mark.parametrize("seconds, due, max_age, outdated", [
    (0, False, 60, False),
    (20, False, 40, False),
    (59.5, False, 0, False),
    (60, True, 0, False),
    (180, True, 0, False),
    (181, True, 0, True),  # three periods and more: the sweep is not refreshing it
])
def test_age_says_when_it_is_due_how_long_it_may_be_kept_and_when_it_is_outdated(seconds, due, max_age, outdated):
    s = snapshot()
    assert (s.due(at(seconds)), s.max_age(at(seconds)), s.outdated(at(seconds))) == (due, max_age, outdated)
    assert cache_control(s, at(seconds)) == f"private, max-age={max_age}"


def test_a_tick_a_little_early_still_finds_it_due_within_the_slack():
    assert not snapshot().due(at(45)) and snapshot().due(at(45), slack_seconds=30)


def test_the_answer_carries_the_figures_their_time_their_period_and_whether_outdated():
    assert snapshot().answer(at(10)) == {"total": 3, "asOf": "2026-11-27T10:00:00.000000Z", "everySeconds": 60,
                                         "outdated": False}
    assert snapshot().answer(at(1000))["outdated"] is True


def test_a_claim_is_no_snapshot_and_a_document_with_figures_is():
    assert snapshots.decode(SnapshotKind.SUMMARY, None) is None
    claimed = {"kind": "summary", "claimedAt": "2026-11-27T10:00:00.000000Z"}
    assert snapshots.decode(SnapshotKind.SUMMARY, claimed) is None
    got = snapshots.decode(SnapshotKind.STATS, {"asOf": "2026-11-27T10:00:00.000000Z", "everySeconds": 900,
                                                "figures": orjson.dumps({"applied": 1})})
    assert got == Snapshot(SnapshotKind.STATS, {"applied": 1}, AS_OF, 900)


def test_an_instance_keeps_a_snapshot_a_few_seconds_never_more_than_half_its_period():
    served = Served(None, (), Periods(summary_seconds=5, stats_seconds=900), {})
    assert served.keep_seconds(SnapshotKind.SUMMARY) == 2.5 and served.keep_seconds(SnapshotKind.STATS) == 5.0


def test_an_instance_reads_the_snapshot_once_while_it_keeps_it(monkeypatch):
    reads, clock = [], [100.0]

    def first(db, kind, compute, every, by, options):
        reads.append(kind)
        return snapshot(every)

    monkeypatch.setattr(snapshots, "first", first)
    served = Served(None, (), Periods(), {}, monotonic=lambda: clock[0])
    assert served.get(SnapshotKind.SUMMARY) == served.get(SnapshotKind.SUMMARY) == snapshot()
    clock[0] += 4.9
    served.get(SnapshotKind.SUMMARY)
    assert reads == [SnapshotKind.SUMMARY]
    clock[0] += 0.2  # 5.1 s after the read
    served.get(SnapshotKind.SUMMARY)
    served.get(SnapshotKind.STATS)
    assert reads == [SnapshotKind.SUMMARY, SnapshotKind.SUMMARY, SnapshotKind.STATS]


def test_the_statuses_the_summary_saw_are_a_hint_never_computed_and_none_when_unreadable(monkeypatch):
    """``withCounts`` starts with them (shared/api/queries.py); without them every status is counted."""
    stored = Snapshot(SnapshotKind.SUMMARY, {"byType": {"vm": {"RUNNING": 2, "FAILED": 1}, "container": {"PENDING": 1}}},
                      AS_OF, 60)
    answers = [(None, None), (stored, None), gexc.DeadlineExceeded("slow")]

    def read(db, kind, options):
        got = answers.pop(0)
        if isinstance(got, Exception):
            raise got
        return got

    monkeypatch.setattr(snapshots, "read", read)
    monkeypatch.setattr(snapshots, "first", lambda *a, **k: pytest.fail("the hint never computes a snapshot"))
    clock = [100.0]
    served = Served(None, (), Periods(), {}, monotonic=lambda: clock[0])
    assert served.statuses_seen() is None  # no summary yet
    assert served.statuses_seen("vm") == {"RUNNING", "FAILED"}
    assert served.statuses_seen() == {"RUNNING", "FAILED", "PENDING"}  # kept: not read again
    clock[0] += 60
    assert served.statuses_seen() is None  # unreadable: a hint only


def test_the_periods_are_settings_with_the_production_defaults():
    s = settings.from_env({"DCM_PROJECT": "p"})
    assert (s.summary_every_seconds, s.stats_every_seconds) == (60, 900)
    s = settings.from_env({"DCM_PROJECT": "p", "DCM_SUMMARY_EVERY_SECONDS": "5", "DCM_STATS_EVERY_SECONDS": "30"})
    assert (s.summary_every_seconds, s.stats_every_seconds) == (5, 30)
    for bad in ("0", "-1", "soon"):
        with pytest.raises(ConfigError, match="DCM_STATS_EVERY_SECONDS"):
            settings.from_env({"DCM_PROJECT": "p", "DCM_STATS_EVERY_SECONDS": bad})


def test_a_searchs_one_pass_count_is_a_setting_off_by_default():
    assert settings.from_env({"DCM_PROJECT": "p"}).search_count_rows == 0
    assert settings.from_env({"DCM_PROJECT": "p", "DCM_SEARCH_COUNT_ROWS": "10000"}).search_count_rows == 10000
    for bad in ("-1", "many"):
        with pytest.raises(ConfigError, match="DCM_SEARCH_COUNT_ROWS"):
            settings.from_env({"DCM_PROJECT": "p", "DCM_SEARCH_COUNT_ROWS": bad})
