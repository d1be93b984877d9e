"""The aggregates' snapshots on the Firestore emulator: the sweep writes them (the summary each tick, the
accounting when due), the api serves them (one read: the figures stored, not counted again) with their
``asOf`` and a Cache-Control that matches; a deployment with none yet has the first computed once by one
reader; an old one is marked outdated; a writer never puts an older snapshot over a newer one."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest
from dcm_status_contracts import timeutil
from google.api_core import exceptions as gexc
from google.cloud import firestore as gfirestore

from shared.state import aggregates, snapshots
from shared.state.documents import DOCUMENT_WRITES
from shared.state.snapshots import SnapshotKind
from tests.functional.conftest import SHAPES

HOUR_AGO = lambda: timeutil.format(timeutil.now() - timedelta(hours=1))  # noqa: E731


def resource(db, provider: str, rtype: str, rid: str, status: str) -> None:
    """A resource document with what the counts read, and what tells the sweep it was written (every writer
    adds one to ``documentWrites``; upsert writes many more fields)."""
    db.document(f"resources/{provider}~{rtype}~{rid}").set(
        {"key": f"{provider}/{rtype}/{rid}", "provider": provider, "resourceType": rtype, "resourceId": rid,
         "status": status, DOCUMENT_WRITES: gfirestore.Increment(1)}, merge=True)


def tick(sweep) -> None:
    assert SHAPES["push"](sweep, "dcm-status-sweep", orjson.dumps({"tick": "test"}), {}, "tick").status_code == 200


def stored(db, kind: SnapshotKind) -> dict:
    return db.document(f"aggregates/{kind.value}").get().to_dict()


def figures(db, kind: SnapshotKind) -> dict:
    return orjson.loads(stored(db, kind)["figures"])


def backdate(db, kind: SnapshotKind) -> None:
    db.document(f"aggregates/{kind.value}").update({"asOf": HOUR_AGO()})


def test_the_sweep_writes_the_summary_each_tick_and_the_accounting_when_it_is_due(sweep, firestore):
    resource(firestore, "aws", "vm", "i-1", "RUNNING")
    resource(firestore, "azure", "vm", "w-1", "FAILED")
    tick(sweep)
    summary, stats = stored(firestore, SnapshotKind.SUMMARY), stored(firestore, SnapshotKind.STATS)
    assert (summary["computedBy"], summary["everySeconds"], stats["everySeconds"]) == ("sweep", 60, 900)
    assert figures(firestore, SnapshotKind.SUMMARY)["byType"] == {"vm": {"RUNNING": 1, "FAILED": 1}}
    assert figures(firestore, SnapshotKind.SUMMARY)["byProvider"] == {"aws": 1, "azure": 1}
    assert figures(firestore, SnapshotKind.STATS)["resources"] == 2

    # The next tick, a period later (the stored one made a period older): the summary again, not the
    # accounting (its period, 15 min, has not passed).
    resource(firestore, "aws", "vm", "i-2", "STOPPED")
    backdate(firestore, SnapshotKind.SUMMARY)
    tick(sweep)
    assert figures(firestore, SnapshotKind.SUMMARY)["total"] == 3
    assert stored(firestore, SnapshotKind.SUMMARY)["asOf"] > HOUR_AGO()
    assert figures(firestore, SnapshotKind.STATS)["resources"] == 2
    assert stored(firestore, SnapshotKind.STATS)["asOf"] == stats["asOf"]

    # Within its period the summary is left as it is; once the accounting's is over, it is counted again.
    resource(firestore, "aws", "vm", "i-3", "RUNNING")
    backdate(firestore, SnapshotKind.STATS)
    tick(sweep)
    assert figures(firestore, SnapshotKind.SUMMARY)["total"] == 3
    assert figures(firestore, SnapshotKind.STATS)["resources"] == 4


def test_the_api_serves_the_snapshot_not_a_count_with_its_as_of_and_how_long_it_may_be_kept(api, firestore):
    resource(firestore, "aws", "vm", "i-1", "RUNNING")
    as_of = timeutil.now_str()
    _, missing = snapshots.read(firestore, SnapshotKind.SUMMARY)
    assert snapshots.store(firestore, SnapshotKind.SUMMARY, {"total": 41, "byType": {"vm": {"RUNNING": 41}},
                                                     "byProvider": {"aws": 41}, "silentProviders": [],
                                                     "asOf": as_of}, 60, missing, "sweep")
    response = api.get("/v1/summary")
    body = response.json
    assert (body["total"], body["asOf"], body["everySeconds"], body["outdated"]) == (41, as_of, 60, False)
    control = response.headers["Cache-Control"]
    assert control.startswith("private, max-age=") and 55 <= int(control.rsplit("=", 1)[1]) <= 60


def test_an_outdated_snapshot_is_served_marked_as_such_and_not_to_be_kept(api, firestore):
    _, missing = snapshots.read(firestore, SnapshotKind.STATS)
    snapshots.store(firestore, SnapshotKind.STATS, {"applied": 5, "unchanged": 0, "stale": 0, "duplicate": 0,
                                            "deadlettered": 0, "resources": 5, "received": 5, "asOf": HOUR_AGO()},
                    900, missing, "sweep")  # 4 periods of 15 min ago: the sweep has stopped
    response = api.get("/v1/stats")
    assert response.json["outdated"] is True and response.json["applied"] == 5 and response.json["windowDays"] == 7
    assert response.headers["Cache-Control"] == "private, max-age=0"


def test_no_snapshot_yet_the_first_reader_computes_it_once_and_stores_it(api, firestore):
    resource(firestore, "aws", "vm", "i-1", "RUNNING")
    first = api.get("/v1/summary").json
    assert first["total"] == 1 and first["outdated"] is False
    doc = stored(firestore, SnapshotKind.SUMMARY)
    assert doc["computedBy"] == "api" and doc["asOf"] == first["asOf"] and orjson.loads(doc["figures"])["total"] == 1
    stats = api.get("/v1/stats").json
    assert (stats["resources"], stats["received"]) == (1, 0)
    assert stored(firestore, SnapshotKind.STATS)["computedBy"] == "api"


def test_a_reader_waits_for_the_first_snapshot_another_computes_then_says_503_retry(api, firestore, monkeypatch):
    monkeypatch.setattr(snapshots, "WAIT_FOR_FIRST", 0.0)
    firestore.document("aggregates/summary").create({"kind": "summary", "claimedAt": timeutil.now_str(),
                                                     "claimedBy": "api"})
    response = api.get("/v1/summary")
    assert response.status_code == 503 and response.headers["Retry-After"] == "2"
    assert "first summary snapshot is being computed" in response.json["detail"]
    assert "figures" not in stored(firestore, SnapshotKind.SUMMARY)  # nothing computed by this reader


def test_a_claim_its_claimer_left_is_taken_over_by_one_reader(api, firestore):
    resource(firestore, "aws", "vm", "i-1", "RUNNING")
    firestore.document("aggregates/summary").create({"kind": "summary", "claimedAt": HOUR_AGO(), "claimedBy": "api"})
    assert api.get("/v1/summary").json["total"] == 1
    assert orjson.loads(stored(firestore, SnapshotKind.SUMMARY)["figures"])["total"] == 1


def test_a_writer_that_read_an_older_state_never_overwrites_a_newer_snapshot(firestore):
    _, missing = snapshots.read(firestore, SnapshotKind.SUMMARY)
    newer = {"total": 2, "byType": {}, "byProvider": {}, "silentProviders": [], "asOf": timeutil.now_str()}
    older = {**newer, "total": 1, "asOf": HOUR_AGO()}
    assert snapshots.store(firestore, SnapshotKind.SUMMARY, newer, 60, missing, "sweep")
    assert not snapshots.store(firestore, SnapshotKind.SUMMARY, older, 60, missing, "sweep")  # it read "missing" too
    _, current = snapshots.read(firestore, SnapshotKind.SUMMARY)
    assert snapshots.store(firestore, SnapshotKind.SUMMARY, {**newer, "total": 3}, 60, current, "sweep")
    assert not snapshots.store(firestore, SnapshotKind.SUMMARY, older, 60, current, "api")  # current has changed since
    assert figures(firestore, SnapshotKind.SUMMARY)["total"] == 3


def test_the_counts_are_read_at_one_time_and_a_change_committed_after_it_is_not_in_them(firestore):
    resource(firestore, "aws", "vm", "i-1", "RUNNING")
    before = aggregates.summary(firestore, ("aws",))
    resource(firestore, "aws", "vm", "i-2", "RUNNING")
    written = firestore.document("resources/aws~vm~i-2").get().update_time
    assert timeutil.format(written) > before["asOf"]  # committed after the counts' time
    again = aggregates.summary(firestore, ("aws",), {"read_time": timeutil.parse(before["asOf"])})
    assert (again["total"], again["byProvider"], again["asOf"]) == (1, {"aws": 1}, before["asOf"])
    assert aggregates.summary(firestore, ("aws",))["total"] == 2


@pytest.mark.parametrize("path", ["/v1/summary?fresh=1", "/v1/stats?asOf=now"])
def test_no_parameter_makes_the_api_count_again(api, path):
    response = api.get(path)
    assert response.status_code == 400 and response.json["parameter"] == path.split("?")[1].split("=")[0]


def test_a_snapshot_that_cannot_be_written_leaves_the_ticks_other_work_done(sweep, firestore, monkeypatch):
    def down(*args, **kwargs):
        raise gexc.ServiceUnavailable("Firestore unavailable")

    firestore.document("resyncs/aws~b9").set({"provider": "aws", "batch": "b9", "total": 1, "at": HOUR_AGO(),
                                              "scope": ["vm"], "state": "open", "openedAt": HOUR_AGO()})
    monkeypatch.setattr(aggregates, "counts", down)  # every count of the summary and the accounting
    tick(sweep)  # acked
    assert firestore.document("resyncs/aws~b9").get().to_dict()["state"] == "abandoned"  # reconciled all the same
    assert not firestore.document("aggregates/summary").get().exists


def test_the_summary_is_counted_again_only_once_a_resource_document_was_written_since(sweep, firestore,
                                                                                      monkeypatch):
    recounts = []
    real = aggregates.summary_counts
    monkeypatch.setattr(aggregates, "summary_counts", lambda *a, **k: recounts.append(1) or real(*a, **k))
    resource(firestore, "aws", "vm", "i-1", "RUNNING")
    resource(firestore, "azure", "vm", "w-1", "FAILED")
    tick(sweep)
    first = stored(firestore, SnapshotKind.SUMMARY)
    assert len(recounts) == 1 and figures(firestore, SnapshotKind.SUMMARY)["byType"] == {"vm": {"RUNNING": 1, "FAILED": 1}}

    backdate(firestore, SnapshotKind.SUMMARY)  # a period later, nothing written: the same counts, as of now
    tick(sweep)
    again = stored(firestore, SnapshotKind.SUMMARY)
    assert len(recounts) == 1 and again["figures"] == first["figures"] and again["asOf"] > HOUR_AGO()
    assert again["marker"] == first["marker"]

    resource(firestore, "aws", "vm", "i-1", "STOPPED")  # one write, the count of documents unchanged
    backdate(firestore, SnapshotKind.SUMMARY)
    tick(sweep)
    assert len(recounts) == 2 and figures(firestore, SnapshotKind.SUMMARY)["byType"] == {"vm": {"STOPPED": 1, "FAILED": 1}}


def test_a_summary_counts_every_status_present_whatever_the_previous_one_saw(firestore):
    for i, (rtype, status) in enumerate([("vm", "RUNNING"), ("vm", "PAUSED"), ("container", "PENDING"),
                                         ("vm", "RUNNING")]):
        resource(firestore, "aws", rtype, f"r-{i}", status)
    full = aggregates.summary(firestore, ("aws",))
    saw = snapshots.Snapshot(SnapshotKind.SUMMARY, {"byType": {"vm": {"RUNNING": 9}}}, timeutil.now(), 60, {"moved": 1})
    figures_since, _ = aggregates.summary_since(firestore, ("aws",), saw)
    assert {k: v for k, v in figures_since.items() if k != "asOf"} == {k: v for k, v in full.items() if k != "asOf"}
    assert full["byType"] == {"vm": {"RUNNING": 2, "PAUSED": 1}, "container": {"PENDING": 1}}
