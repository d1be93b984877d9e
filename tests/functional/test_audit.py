"""The audit consumer through the in-process pipeline (moved from tests/e2e, issue 41): a filtered subscription
on the changed topic. The pipeline applies the subscription's filter as production does, so the RUNNING change
never reaches audit that way; it is pushed to audit straight too (a replay, a manual push, the emulator that
ignores filters), and audit must ignore it there."""

from __future__ import annotations

from dcm_status_contracts import status_changed
from dcm_status_contracts import timeutil
from dcm_status_contracts.model import ResourceKey
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.upsert.decide import resource_document
from tests.billing_fleet import CHANGED, status_update
from tests.pipeline import Delivery, Message, push_body


def test_audit_records_stopped_and_ignores_running(pipeline, firestore, logged):
    uid = "fn"
    key = ResourceKey("aws", "vm", f"vm-audit-{uid}")
    meta = {"tenant": f"audit-{uid}"}
    running = status_update(key, "RUNNING", "2026-03-01T09:00:00Z", f"a-{uid}-1", meta)
    stopped = status_update(key, "STOPPED", "2026-03-01T17:00:00Z", f"a-{uid}-2", meta)
    run_doc = resource_document(running, running.observed_at)
    run_ev = status_changed.build(running, None, run_doc, late=False)
    stop_ev = status_changed.build(stopped, run_doc, resource_document(stopped, stopped.observed_at), late=False)
    for ev in (run_ev, stop_ev, stop_ev):  # the stop is delivered twice; no callback: upsert would mark it so
        pipeline.publish(CHANGED, ev.body, **{"notify": "0", **ev.attributes})
    pipeline.settle()

    stop = firestore.collection("audit_stopped").document(stop_ev.event_id).get().to_dict()
    assert {k: stop[k] for k in ("key", "at", "oldStatus", "provider", "tenant", "late")} == {
        "key": str(key), "at": timeutil.canonical("2026-03-01T17:00:00Z"), "oldStatus": "RUNNING",
        "provider": "aws", "tenant": f"audit-{uid}", "late": False}

    # the subscription's filter kept the RUNNING change from audit; pushed to it straight, it is ignored
    assert [d.message.attributes["newStatus"] for d in pipeline.bus.filtered
            if d.subscription.name == "dcm-audit-stopped"] == ["RUNNING"]
    [sub] = [s for s in pipeline.topology.subscriptions if s.name == "dcm-audit-stopped"]
    straight = Delivery(sub, Message(CHANGED, run_ev.body, dict(run_ev.attributes), "", "direct-1"), attempt=1)
    assert pipeline.push("audit", CHANGED, push_body(straight)) == 200
    assert not firestore.collection("audit_stopped").document(run_ev.event_id).get().exists
    assert any(line["message"].startswith("change ignored") and run_ev.event_id in str(line)
               for line in logged() if line["logger"] == "dcm.audit")
    # the second delivery of the stop was handled as a duplicate: still one record, the first one
    assert any(line["message"] == "stop duplicate" and stop_ev.event_id in str(line)
               for line in logged() if line["logger"] == "dcm.audit")
    query = firestore.collection("audit_stopped").where(filter=FieldFilter("key", "==", str(key)))
    docs = [d.to_dict() for d in query.stream()]
    assert len(docs) == 1 and docs[0]["recordedAt"] == stop["recordedAt"]
