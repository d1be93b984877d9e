"""Snapshot reconciliation on the emulators: a provider on the kit resyncs its inventory, the sweep
(ticked by its keeper every few seconds, as Cloud Scheduler does each minute) deletes what the
snapshot no longer lists, and only that."""

from __future__ import annotations

from dcm_status_contracts import timeutil
from dcm_status_sdk import Reporter, ReporterConfig, ResourceState

from tests.e2e.conftest import E2EStack, wait_until


def test_what_a_complete_snapshot_no_longer_lists_is_deleted_by_the_sweep(e2e: E2EStack, uid: str):
    ids = [f"rc-{uid}-{i}" for i in range(4)]
    keys = [f"kubernetes/container/{rid}" for rid in ids]
    with Reporter(ReporterConfig(project=e2e.project, provider="kubernetes")) as reporter:
        for rid in ids:
            reporter.report("container", rid, "RUNNING", "up")
        reporter.flush()
        for key in keys:
            e2e.wait_for_status(key, "RUNNING")
        taken = timeutil.now_str()
        reporter.resync([ResourceState("container", rid, "RUNNING") for rid in ids[:3]], taken_at=taken)
    gone = e2e.wait_for_status(keys[3], "DELETED", timeout=60)
    assert (gone["reason"], gone["eventSource"]) == ("NotInSnapshot", "dcm/platform/reconcile")
    assert all(e2e.resource(k)["status"] == "RUNNING" for k in keys[:3])
    batch = wait_until(lambda: [d.to_dict() for d in e2e.db.collection("resyncs").stream()
                                if d.to_dict()["provider"] == "kubernetes" and d.to_dict()["at"] == taken
                                and d.to_dict()["state"] == "reconciled"], 30, what="the batch closed")[0]
    assert (batch["listed"], batch["deleted"]) == (3, 1)
