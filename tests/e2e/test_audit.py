"""The audit consumer end to end: a filtered subscription on the changed topic.

The Pub/Sub emulator ignores subscription filters, so the audit function receives
every change event; it must record the STOPPED one and ignore the RUNNING one.
"""

from __future__ import annotations

import pytest
from dcm_status_contracts import status_changed
from dcm_status_contracts import timeutil
from dcm_status_contracts.model import ResourceKey
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.upsert.decide import resource_document
from tests.e2e.conftest import wait_until
from tests.e2e.test_billing import CHANGED, status_update

pytestmark = pytest.mark.e2e


def test_audit_records_stopped_and_ignores_running(e2e, uid):
    key = ResourceKey("aws", "vm", f"vm-audit-{uid}")
    meta = {"tenant": f"audit-{uid}"}
    running = status_update(key, "RUNNING", "2026-03-01T09:00:00Z", f"a-{uid}-1", meta)
    stopped = status_update(key, "STOPPED", "2026-03-01T17:00:00Z", f"a-{uid}-2", meta)
    run_doc = resource_document(running, running.observed_at)
    run_ev = status_changed.build(running, None, run_doc, late=False)
    stop_ev = status_changed.build(stopped, run_doc, resource_document(stopped, stopped.observed_at), late=False)
    topic = e2e.topic_path(CHANGED)
    for ev in (run_ev, stop_ev, stop_ev):  # the stop is delivered twice
        e2e.publisher.publish(topic, ev.body, **ev.attributes).result(timeout=30)

    audit_log = e2e.stack.paths.log_dir / "audit.log"
    stop = wait_until(lambda: (s := e2e.db.collection("audit_stopped").document(stop_ev.event_id).get()).exists
                      and s.to_dict(), 30, what="audit to record the STOPPED change")
    assert {k: stop[k] for k in ("key", "at", "oldStatus", "provider", "tenant", "late")} == {
        "key": str(key), "at": timeutil.canonical("2026-03-01T17:00:00Z"), "oldStatus": "RUNNING",
        "provider": "aws", "tenant": f"audit-{uid}", "late": False}

    # the RUNNING change reached the function (the emulator does not filter) and was ignored
    wait_until(lambda: run_ev.event_id in audit_log.read_text(errors="replace"), 30,
               what="audit to receive the RUNNING change")
    assert not e2e.db.collection("audit_stopped").document(run_ev.event_id).get().exists
    # the second delivery of the stop was handled as a duplicate: still one record, the first one
    wait_until(lambda: any('"stop duplicate"' in line and stop_ev.event_id in line
                           for line in audit_log.read_text(errors="replace").splitlines()), 30,
               what="audit to see the duplicate stop")
    query = e2e.db.collection("audit_stopped").where(filter=FieldFilter("key", "==", str(key)))
    docs = [d.to_dict() for d in query.stream()]
    assert len(docs) == 1 and docs[0]["recordedAt"] == stop["recordedAt"]
