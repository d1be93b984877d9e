"""Lifecycle guarantees on the emulators, published through Pub/Sub as a provider would, the sweep
ticked by its keeper: a snapshot delivered shuffled, duplicated and partly delayed deletes nothing
until it is complete, then exactly the resource it no longer lists, once; a flapping resource is
flagged on its change events; a report newer than a deletion is announced as a re-creation."""

from __future__ import annotations

import time
from datetime import timedelta

import orjson
from dcm_status_contracts import timeutil
from dcm_status_contracts.resync import ResyncMark
from dcm_status_contracts.status_report import ReportForm, build_event
from dcm_status_contracts.pubsub_binding import to_message
from google.cloud.firestore_v1.base_query import FieldFilter

from tests.e2e.conftest import E2EStack, wait_until

TICKS = 1  # the sweep's ticks (the keeper's, every 5 s) a test lets pass before it looks: one begun after what
# it must see was stored has read it (a second one read the same again, at 5 s a wait; issue 41)


def send(e2e: E2EStack, provider: str, rtype: str, rid: str, status: str, at: str, event_id: str,
         mark: ResyncMark | None = None) -> None:
    event = build_event(provider, rtype, rid, status, event_id=event_id, time=at, last_transition_time=at,
                        form=ReportForm.CURRENT, extensions=mark.attributes() if mark else None)
    data, attributes = to_message(event)
    e2e.publish_raw(provider, data, **attributes)


def changes_of(e2e: E2EStack, key: str) -> list[dict]:
    """The change events upsert announced for ``key`` (its ledger's outbox), in event-time order."""
    entries = [d.to_dict() for d in e2e.db.collection("events").where(filter=FieldFilter("key", "==", key)).stream()]
    found = [orjson.loads(e["change"]["body"])["data"] for e in entries if e.get("change")]
    return sorted(found, key=lambda c: c["newTransitionTime"])


def test_a_shuffled_duplicated_partly_delayed_snapshot_deletes_only_what_it_no_longer_lists_once(e2e: E2EStack,
                                                                                                 uid: str):
    rids = [f"net-{uid}-{i}" for i in range(3)] + [f"net-{uid}-gone"]
    before = timeutil.format(timeutil.now() - timedelta(minutes=5))
    for n, rid in enumerate(rids):
        send(e2e, "azure", "network", rid, "READY", before, f"before-{uid}-{n}")
    for rid in rids:
        e2e.wait_for_status(f"azure/network/{rid}", "READY")
    taken = timeutil.now_str()
    mark = lambda i: ResyncMark(f"snap-{uid}", 3, i, taken, ("network",))  # noqa: E731
    for n, i in enumerate((2, 0, 2)):  # shuffled, one twice; index 1 delayed
        send(e2e, "azure", "network", rids[i], "READY", taken, f"snap-{uid}-{i}-{n}", mark(i))
    wait_until(lambda: all(((e2e.resource(f"azure/network/{rids[i]}") or {}).get("resync") or {}).get("id")
                           == f"snap-{uid}" for i in (0, 2)), 30, what="the batch's first marks stored")
    e2e.wait_for_sweep_ticks(TICKS, time.time_ns())  # the sweep ticks over the incomplete batch
    assert e2e.resource(f"azure/network/{rids[3]}")["status"] == "READY"  # nothing deleted
    send(e2e, "azure", "network", rids[1], "READY", taken, f"snap-{uid}-1", mark(1))  # the late one
    gone = e2e.wait_for_status(f"azure/network/{rids[3]}", "DELETED", timeout=60)
    assert (gone["reason"], gone["eventSource"]) == ("NotInSnapshot", "dcm/platform/reconcile")
    assert all(e2e.resource(f"azure/network/{rid}")["status"] == "READY" for rid in rids[:3])
    e2e.wait_for_sweep_ticks(TICKS, time.time_ns())  # a later tick changes nothing
    deletions = [c for c in changes_of(e2e, f"azure/network/{rids[3]}") if c["newStatus"] == "DELETED"]
    assert len(deletions) == 1 and deletions[0]["resource"]["reason"] == "NotInSnapshot"


def test_a_flapping_resource_is_flagged_and_a_report_after_its_deletion_is_a_re_creation(e2e: E2EStack, uid: str):
    key, rid = f"aws/vm/flap-{uid}", f"flap-{uid}"
    start = timeutil.now() - timedelta(minutes=30)
    statuses = ["RUNNING", "FAILED"] * 4 + ["DELETED", "RUNNING"]
    for i, status in enumerate(statuses):  # one change a minute: 8 within the 10 min window, then a pause
        at = start + timedelta(minutes=i if i < 8 else 20 + i)
        send(e2e, "aws", "vm", rid, status, timeutil.format(at), f"flap-{uid}-{i}")
        # the local stack delivers without ordering (production orders by resource key): each change is
        # announced before the next is sent, so none is decided beside the one before it
        wait_until(lambda n=i + 1: len(changes_of(e2e, key)) == n, 30, interval=0.05, what=f"change {i} announced")
    changes = wait_until(lambda: (c := changes_of(e2e, key)) and len(c) == len(statuses) and c, 60,
                         what="every change announced")
    assert [c["newStatus"] for c in changes] == statuses  # every one announced (its transition in its commit)
    assert [(c["flapping"] or {}).get("changes", 0) for c in changes[:8]] == [0] * 5 + [6, 6, 6]
    assert [c["recreated"] for c in changes] == [False] * 9 + [True]  # DELETED -> RUNNING
    assert changes[-1]["flapping"] is None  # twenty minutes on: calm
