"""The sweep through functions-framework's test client, on the Firestore emulator. Reconciliation: a
complete snapshot batch, delivered shuffled and duplicated, deletes exactly the resources the provider
no longer has, once; a partial one deletes nothing and is abandoned when too old. Freshness: a resource
past its deadline is UNKNOWN (NotReported), last known kept, until it reports again."""

from __future__ import annotations

import orjson
import pytest

from shared.contracts import status_update
from shared.contracts.errors import Rejected, Transient
from shared.contracts.model import PubSubMessage
from shared.contracts.resync import ResyncMark
from shared.contracts.status_report import ReportForm, build_event, to_message
from shared.ingest.normalize import normalize_message
from shared.runtime import settings
from shared.sweep.handler import Sweep
from tests.functional.conftest import SHAPES, client_for

AT = "2026-11-22T10:00:00.000000Z"


@pytest.fixture(scope="module")
def upsert():
    return client_for("upsert")


@pytest.fixture(scope="module")
def sweep():
    return client_for("sweep")


def report(upsert, rid: str, status: str, time: str, event_id: str, mark: ResyncMark | None = None) -> None:
    event = build_event("aws", "vm", rid, status, event_id=event_id, time=time, form=ReportForm.CURRENT,
                        metadata={"tenant": "acme"}, extensions=mark.attributes() if mark else None)
    data, attrs = to_message(event)
    update = normalize_message(PubSubMessage(data, attrs, f"in-{event_id}", time, "dcm-status-ingress-aws"),
                               settings.from_env())
    assert SHAPES["push"](upsert, "dcm-status-normalized", status_update.encode(update), {}, event_id).status_code == 200


def tick(sweep, publisher, upsert) -> list[str]:
    """Run the sweep once; hand what it published to upsert; the keys it deleted."""
    before = len(publisher.on("dcm-status-normalized"))
    assert SHAPES["push"](sweep, "dcm-status-sweep", orjson.dumps({"tick": "test"}), {}, "tick").status_code == 200
    out = publisher.on("dcm-status-normalized")[before:]
    for i, m in enumerate(out):
        SHAPES["push"](upsert, "dcm-status-normalized", m.data, m.attributes, f"sweep-{i}")
    return [m.attributes["key"] for m in out]


def resource(db, rid: str) -> dict:
    return db.document(f"resources/aws~vm~{rid}").get().to_dict()


def test_a_complete_snapshot_shuffled_and_duplicated_deletes_what_is_gone_once(upsert, sweep, firestore, publisher):
    report(upsert, "gone", "RUNNING", "2026-11-22T09:00:00Z", "old-gone")
    report(upsert, "created-meanwhile", "RUNNING", "2026-11-22T10:00:30Z", "new-1")  # after the listing began
    mark = lambda i: ResyncMark("b1", 3, i, AT, ("vm",))  # noqa: E731
    for i in (2, 0, 2, 1):  # shuffled, one twice
        report(upsert, f"i-{i}", "RUNNING", "2026-11-22T10:00:05Z", f"snap-{i}-{len(publisher.messages)}", mark(i))
    assert tick(sweep, publisher, upsert) == ["aws/vm/gone"]
    gone = resource(firestore, "gone")
    assert (gone["status"], gone["reason"], gone["eventSource"]) == ("DELETED", "NotInSnapshot", "dcm/platform/reconcile")
    assert gone["metadata"] == {"tenant": "acme"}  # billing still knows whose it was
    assert resource(firestore, "created-meanwhile")["status"] == "RUNNING"
    assert all(resource(firestore, f"i-{i}")["status"] == "RUNNING" for i in range(3))
    batch = firestore.document("resyncs/aws~b1").get().to_dict()
    assert (batch["state"], batch["listed"], batch["deleted"]) == ("reconciled", 3, 1)
    assert tick(sweep, publisher, upsert) == []  # closed: never again


def test_a_partial_snapshot_deletes_nothing_and_is_abandoned_when_too_old(upsert, sweep, firestore, publisher):
    report(upsert, "still-there", "RUNNING", "2026-11-22T09:00:00Z", "old-still")
    mark = lambda i: ResyncMark("b2", 3, i, AT, ("vm",))  # noqa: E731
    report(upsert, "j-0", "RUNNING", "2026-11-22T10:00:05Z", "p-0", mark(0))
    report(upsert, "j-2", "RUNNING", "2026-11-22T10:00:05Z", "p-2", mark(2))  # j-1 delayed, or lost
    assert tick(sweep, publisher, upsert) == []
    assert firestore.document("resyncs/aws~b2").get().to_dict()["state"] == "open"
    firestore.document("resyncs/aws~b2").update({"openedAt": "2026-11-22T08:00:00.000000Z"})
    assert tick(sweep, publisher, upsert) == []
    assert firestore.document("resyncs/aws~b2").get().to_dict()["state"] == "abandoned"
    assert resource(firestore, "still-there")["status"] == "RUNNING"
    report(upsert, "j-1", "RUNNING", "2026-11-22T10:00:05Z", "p-1", mark(1))  # arrives after all: too late
    assert tick(sweep, publisher, upsert) == [] and resource(firestore, "still-there")["status"] == "RUNNING"


def test_a_report_newer_than_the_snapshot_outlives_its_deletion(upsert, sweep, firestore, publisher):
    report(upsert, "back", "RUNNING", "2026-11-22T09:00:00Z", "old-back")
    report(upsert, "k-0", "RUNNING", "2026-11-22T10:00:05Z", "q-0", ResyncMark("b3", 1, 0, AT, ("vm",)))
    assert tick(sweep, publisher, upsert) == ["aws/vm/back"]
    report(upsert, "back", "RUNNING", "2026-11-22T10:10:00Z", "new-back")  # re-created after the snapshot
    assert resource(firestore, "back")["status"] == "RUNNING"


def test_a_resource_past_its_deadline_is_unknown_not_reported_until_its_next_report(upsert, sweep, firestore,
                                                                                   publisher):
    report(upsert, "quiet", "RUNNING", "2026-11-22T09:00:00Z", "q-1")
    doc = resource(firestore, "quiet")
    assert doc["staleAt"] > doc["lastSeenAt"]  # topology.yaml's freshness: report_every + grace after it
    firestore.document("resources/aws~vm~quiet").update({"staleAt": "2026-11-22T10:15:00.000000Z"})  # passed
    assert tick(sweep, publisher, upsert) == ["aws/vm/quiet"]
    doc = resource(firestore, "quiet")
    assert (doc["status"], doc["reason"], doc["extra"]["lastKnownStatus"]) == ("UNKNOWN", "NotReported", "RUNNING")
    assert doc["metadata"] == {"tenant": "acme"} and doc["staleAt"] is None  # marked once, not every tick
    assert tick(sweep, publisher, upsert) == []
    report(upsert, "quiet", "RUNNING", "2026-11-22T11:00:00Z", "q-2")  # it reports again
    doc = resource(firestore, "quiet")
    assert (doc["status"], doc["reason"]) == ("RUNNING", None) and doc["staleAt"] > "2026-11-22T11"


def test_a_provider_may_not_pose_as_the_platform(upsert):
    event = build_event("aws", "vm", "i-x", "DELETED", event_id="spoof", time="2026-11-22T10:00:00Z",
                        form=ReportForm.CURRENT, source="dcm/platform/reconcile")
    data, attrs = to_message(event)
    with pytest.raises(Rejected, match="the platform's own") as refused:
        normalize_message(PubSubMessage(data, attrs, "in-spoof", None, "dcm-status-ingress-aws"), settings.from_env())
    assert refused.value.reason.value == "provider_mismatch"


def test_a_tick_that_fails_is_acked_the_next_one_does_the_work(sweep, monkeypatch):
    def down(self):
        raise Transient("Firestore query failed: unavailable")
    monkeypatch.setattr(Sweep, "_open_batches", down)
    assert SHAPES["push"](sweep, "dcm-status-sweep", orjson.dumps({"tick": "t"}), {}, "t-down").status_code == 200
