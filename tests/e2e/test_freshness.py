"""Freshness on the emulators: provider "quiet" must report every 5 s (+1 s grace, set by the e2e
stack); silent, its resource becomes UNKNOWN (NotReported) with its last known status kept, billing
goes on as last known, and the next report restores it. Its only resource silent, the provider as a
whole is silent: one provider event (audited), then one when it reports again; GET /v1/providers says so."""

from __future__ import annotations

import requests
from dcm_status_contracts.model import ResourceKey
from google.cloud.firestore_v1.base_query import FieldFilter

from tests.e2e.conftest import QUIET, E2EStack, wait_until


def test_silence_is_unknown_not_reported_and_the_next_report_restores_it(e2e: E2EStack, uid: str):
    key = f"{QUIET}/vm/q-{uid}"
    reporter = e2e.reporter(QUIET)
    reporter.publish_now("vm", f"q-{uid}", "RUNNING", "up").result(timeout=30)
    e2e.wait_for_status(key, "RUNNING")
    silent = e2e.wait_for_status(key, "UNKNOWN", timeout=60)  # deadline 6 s, a tick every 5 s
    assert (silent["reason"], silent["extra"]["lastKnownStatus"]) == ("NotReported", "RUNNING")
    audited = lambda: sorted(d.to_dict()["state"] for d in e2e.db.collection("audit_providers").where(  # noqa: E731
        filter=FieldFilter("provider", "==", QUIET)).stream())
    assert wait_until(lambda: audited() == ["SILENT"] or None, 30, what="the provider event, audited")
    state = next(p for p in requests.get(e2e.api_url + "v1/providers", timeout=10).json()["providers"]
                 if p["provider"] == QUIET)
    assert (state["state"], state["deadlineSeconds"]) == ("SILENT", 6)
    reporter.publish_now("vm", f"q-{uid}", "RUNNING", "still up").result(timeout=30)
    back = e2e.wait_for_status(key, "RUNNING")
    assert back["reason"] is None and back["message"] == "still up"
    assert wait_until(lambda: audited() == ["REPORTING", "SILENT"] or None, 30, what="reporting again, audited")
    transitions = wait_until(lambda: [d.to_dict()["status"] for d in e2e.db.collection("billing_resources")
                                      .document(ResourceKey.parse(key).doc_id).collection("transitions").stream()]
                             or None, 30, what="billing's transitions")
    assert "UNKNOWN" not in transitions  # usage went on as last known
    changes = [d.to_dict() for d in e2e.db.collection("events").where(filter=FieldFilter("key", "==", key)).stream()]
    assert sum(c.get("status") == "UNKNOWN" for c in changes) == 1  # announced once, not at every tick
