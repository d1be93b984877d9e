"""A provider's snapshot batch through ingest's normalisation and upsert (functions-framework's test
client, the Firestore emulator): each listed resource records the batch, whatever the outcome of its
event; the batch is recorded from its first event."""

from __future__ import annotations

import pytest
from dcm_status_contracts import status_update
from dcm_status_contracts.errors import Rejected
from dcm_status_contracts.model import PubSubMessage
from dcm_status_contracts.resync import ResyncMark
from dcm_status_contracts.pubsub_binding import to_message
from dcm_status_contracts.status_report import ReportForm, build_event

from shared.ingest.normalize import normalize_message
from shared.runtime import settings
from tests.functional.conftest import SHAPES

AT = "2026-11-22T10:00:00.000000Z"



def update(rid: str, status: str, time: str, event_id: str, mark: ResyncMark | None = None, rtype: str = "vm"):
    event = build_event("aws", rtype, rid, status, event_id=event_id, time=time, form=ReportForm.CURRENT,
                        extensions=mark.attributes() if mark else None)
    data, attrs = to_message(event)
    return normalize_message(PubSubMessage(data, attrs, f"in-{event_id}", time, "dcm-status-ingress-aws"),
                             settings.from_env())


def post(client, u, message_id: str):
    return SHAPES["push"](client, "dcm-status-normalized-aws", status_update.to_bytes(u), {}, message_id)


def doc(db, path: str) -> dict | None:
    snap = db.document(path).get()
    return snap.to_dict() if snap.exists else None


def test_every_listed_resource_records_the_batch_whatever_its_outcome(upsert, firestore):
    mark = lambda i: ResyncMark("b1", 3, i, AT, ("vm",))  # noqa: E731
    post(upsert, update("i-2", "STOPPED", "2026-11-22T10:05:00Z", "live-2"), "n0")  # newer than the snapshot
    post(upsert, update("i-3", "RUNNING", "2026-11-22T09:00:00Z", "live-3"), "n1")
    assert post(upsert, update("i-1", "RUNNING", "2026-11-22T10:00:01Z", "s-1", mark(0)), "n2").status_code == 200
    post(upsert, update("i-2", "RUNNING", "2026-11-22T10:00:01Z", "s-2", mark(1)), "n3")  # stale: i-2 stopped later
    post(upsert, update("i-3", "RUNNING", "2026-11-22T10:00:01Z", "s-3", mark(2)), "n4")  # unchanged: a re-report
    for rid in ("i-1", "i-2", "i-3"):
        assert doc(firestore, f"resources/aws~vm~{rid}")["resync"]["id"] == "b1", rid
    assert doc(firestore, "resources/aws~vm~i-2")["status"] == "STOPPED"  # the snapshot did not undo a newer state
    batch = doc(firestore, "resyncs/aws~b1")
    assert (batch["total"], batch["at"], batch["scope"], batch["state"]) == (3, AT, ["vm"], "open")


def test_only_the_first_event_writes_the_batch(upsert, firestore):
    post(upsert, update("i-9", "RUNNING", "2026-11-22T10:00:01Z", "s-9", ResyncMark("b2", 2, 1, AT, ("vm",))), "n5")
    assert doc(firestore, "resyncs/aws~b2") is None
    assert doc(firestore, "resources/aws~vm~i-9")["resync"] == {"id": "b2", "at": AT, "index": 1}


def test_a_resource_outside_the_batchs_scope_is_refused_at_ingest():
    with pytest.raises(Rejected, match="outside the batch's scope") as refused:
        update("c-1", "RUNNING", "2026-11-22T10:00:01Z", "s-c", ResyncMark("b3", 1, 0, AT, ("vm",)),
               rtype="container")
    assert refused.value.reason.value == "not_a_cloudevent" and refused.value.key == "aws/container/c-1"
