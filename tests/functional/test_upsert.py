"""upsert through functions-framework's test client, on the Firestore emulator."""

from __future__ import annotations

import orjson
from dcm_status_contracts import deadletter as dl
from dcm_status_contracts import status_changed
from dcm_status_contracts import status_update
from dcm_status_contracts.model import PubSubMessage
from dcm_status_contracts.schemas import registry
from dcm_status_contracts.pubsub_binding import to_message
from dcm_status_contracts.status_report import build_event
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.ingest.normalize import normalize_message
from shared.runtime import settings
from tests.functional.conftest import SHAPES

KEY = "aws/vm/i-1"



def normalized(status: str, time: str, event_id: str, ingress_id: str | None = None, message: str = "",
               transition: bool = True, rid: str = "i-1") -> bytes:
    data, attrs = to_message(build_event("aws", "vm", rid, status, message, event_id=event_id, time=time,
                                         last_transition_time=time if transition else None,
                                         metadata={"tenant": "acme"}))
    msg = PubSubMessage(data, attrs, ingress_id or f"in-{event_id}", time, "dcm-status-ingress-aws")
    return status_update.to_bytes(normalize_message(msg, settings.from_env()))


def post(client, body: bytes, message_id: str = "n-1"):
    return SHAPES["push"](client, "dcm-status-normalized-aws", body, {}, message_id)


def resource(db):
    snap = db.collection("resources").document("aws~vm~i-1").get()
    return snap.to_dict() if snap.exists else None


def history(db, key: str = KEY) -> list[dict]:
    """The resource's history as stored: its ledger entries that carry it (issue 32)."""
    entries = (s.to_dict() for s in db.collection("events").where(filter=FieldFilter("key", "==", key)).stream())
    return [e for e in entries if "recordedAt" in e]


def no_history_subcollection(db) -> bool:
    return not list(db.collection("resources").document("aws~vm~i-1").collection("history").stream())


def test_first_report_creates_the_resource_and_announces_it(upsert, firestore, publisher):
    assert post(upsert, normalized("RUNNING", "2026-01-01T10:00:00Z", "e1")).status_code == 200
    doc = resource(firestore)
    assert doc["status"] == "RUNNING" and doc["updates"] == 1
    [out] = publisher.on("dcm-status-changed")
    event = orjson.loads(out.data)
    assert event["type"] == status_changed.EVENT_TYPE
    assert event["data"]["oldStatus"] is None and event["data"]["newStatus"] == "RUNNING"
    assert out.attributes["newStatus"] == "RUNNING" and out.attributes["provider"] == "aws"
    registry().get(status_changed.SCHEMA_URI).check(event["data"])


def test_status_change_lists_changed_attributes(upsert, firestore, publisher):
    post(upsert, normalized("RUNNING", "2026-01-01T10:00:00Z", "e1", message="up"))
    post(upsert, normalized("STOPPED", "2026-01-01T11:00:00Z", "e2", message="down"), "n-2")
    change = orjson.loads(publisher.on("dcm-status-changed")[-1].data)["data"]
    assert change["oldStatus"] == "RUNNING" and change["newStatus"] == "STOPPED"
    attrs = {c["attribute"]: (c["old"], c["new"]) for c in change["changes"]}
    assert attrs["/status"] == ("RUNNING", "STOPPED")
    assert attrs["/message"] == ("up", "down")
    assert "/metadata/tenant" not in attrs  # unchanged


def test_same_status_report_updates_state_without_change_event(upsert, firestore, publisher):
    post(upsert, normalized("RUNNING", "2026-01-01T10:00:00Z", "e1", message="a"))
    post(upsert, normalized("RUNNING", "2026-01-01T10:05:00Z", "e2", message="b", transition=False), "n-2")
    doc = resource(firestore)
    assert doc["message"] == "b" and doc["observedAt"] == "2026-01-01T10:05:00.000000Z"
    assert doc["lastTransitionTime"] == "2026-01-01T10:00:00.000000Z"  # a heartbeat is no transition
    assert len(publisher.on("dcm-status-changed")) == 1


def test_same_status_reentered_at_a_reported_time_is_announced(upsert, firestore, publisher):
    """A restart (RUNNING again, new lastTransitionTime) is a change billing must see."""
    post(upsert, normalized("RUNNING", "2026-01-01T10:00:00Z", "e1"))
    post(upsert, normalized("RUNNING", "2026-01-01T13:00:00Z", "e3"), "n-3")
    [_, restart] = publisher.on("dcm-status-changed")
    data = orjson.loads(restart.data)["data"]
    assert (data["oldStatus"], data["newStatus"]) == ("RUNNING", "RUNNING")
    assert data["newTransitionTime"] == "2026-01-01T13:00:00.000000Z"
    assert {c["attribute"] for c in data["changes"]} == {"/lastTransitionTime"}


def test_duplicate_event_is_applied_once(upsert, firestore, publisher):
    body = normalized("RUNNING", "2026-01-01T10:00:00Z", "e1")
    again = normalized("RUNNING", "2026-01-01T10:00:00Z", "e1", ingress_id="in-republished")
    for i, b in enumerate((body, body, again)):
        assert post(upsert, b, f"n-{i}").status_code == 200
    assert resource(firestore)["updates"] == 1
    # announced once; the first redelivery re-announces it (the first may not have gone out), same id
    announced = publisher.on("dcm-status-changed")
    assert len(announced) == 2 and len({orjson.loads(m.data)["id"] for m in announced}) == 1
    # a redelivery (same ingress message) is not a provider duplicate; a re-publication is
    assert len(list(firestore.collection("duplicates").stream())) == 1


def test_stale_event_never_overwrites_and_is_kept_in_history(upsert, firestore, publisher):
    post(upsert, normalized("STOPPED", "2026-01-01T11:00:00Z", "e2"))
    post(upsert, normalized("RUNNING", "2026-01-01T10:00:00Z", "e1"), "n-2")
    doc = resource(firestore)
    assert doc["status"] == "STOPPED" and doc["eventId"] == "e2"
    assert {h["eventId"]: h["outcome"] for h in history(firestore)} == {"e2": "applied", "e1": "stale"}
    late = orjson.loads(publisher.on("dcm-status-changed")[-1].data)["data"]
    assert late["late"] is True and late["newStatus"] == "RUNNING"
    assert publisher.on("dcm-status-changed")[-1].attributes["late"] == "true"


def test_crash_between_commit_and_publish_loses_no_change_event(upsert, firestore, publisher):
    body = normalized("RUNNING", "2026-01-01T10:00:00Z", "e1")
    publisher.fail = True
    assert post(upsert, body).status_code == 500  # committed, not announced: Pub/Sub redelivers
    assert resource(firestore)["status"] == "RUNNING"
    ledger = firestore.collection("events").document(
        next(iter(d.id for d in firestore.collection("events").stream()))).get().to_dict()
    assert ledger["changeAnnounced"] is False
    publisher.fail = False
    assert post(upsert, body).status_code == 200  # the redelivery
    [out] = publisher.on("dcm-status-changed")
    assert orjson.loads(out.data)["data"]["newStatus"] == "RUNNING"
    assert resource(firestore)["updates"] == 1  # not applied twice
    assert post(upsert, body).status_code == 200  # and never announced twice once sent
    assert len(publisher.on("dcm-status-changed")) == 1


def test_malformed_internal_message_is_dead_lettered(upsert, firestore, publisher):
    resp = post(upsert, b'{"not": "a status update"}')
    assert resp.status_code == 200
    [out] = publisher.on("dcm-status-deadletter")
    assert out.attributes[dl.REASON] == "malformed_internal"
    assert out.attributes[dl.REJECTED_BY] == "upsert"


def test_concurrent_updates_of_one_resource_lose_nothing(firestore, publisher):
    """Optimistic concurrency: racing writers re-read and re-decide; none overwrites another blindly."""
    from concurrent.futures import ThreadPoolExecutor

    from dcm_status_contracts.errors import Transient

    from shared.state.resources import newest
    from shared.upsert.store import StateStore

    store = StateStore(firestore)
    updates = [status_update.from_bytes(normalized(status, f"2026-01-01T10:{i:02d}:00Z", f"c{i}"))
               for i, status in enumerate(["RUNNING", "STOPPED"] * 6)]

    def delivered(update):  # a writer that lost every attempt raises Transient: Pub/Sub delivers it again
        for _ in range(5):
            try:
                return store.apply(update)
            except Transient:
                continue
        raise AssertionError(f"{update.event_id} never committed")

    with ThreadPoolExecutor(6) as pool:
        outcomes = list(pool.map(delivered, updates + updates))  # every event twice, all at once
    kinds = [o.outcome for o in outcomes]
    assert kinds.count("duplicate") == len(updates)
    assert kinds.count("applied") + kinds.count("stale") == len(updates)
    doc = newest(firestore, resource(firestore))  # a dozen updates at once: hot, so coalesced on the ledger
    assert doc["eventId"] == "c11" and doc["status"] == "STOPPED"
    assert len(history(firestore)) == len(updates) and no_history_subcollection(firestore)


class CountingBatches:
    """The emulator's client, counting the document writes of every batch committed through it, as sent (its
    ``Write`` messages, whichever code encoded them: shared/runtime/firestore_writes.py or the library)."""

    def __init__(self, db):
        self.db, self.writes, self.paths = db, [], []

    def __getattr__(self, name):
        return getattr(self.db, name)

    def batch(self):
        batch, counted = self.db.batch(), self

        class Counted:
            def __getattr__(self, name):
                return counted._commit(batch) if name == "commit" else getattr(batch, name)
        return Counted()

    def _commit(self, batch):
        def commit(*args, **kwargs):
            for w in batch._write_pbs:
                self.writes.append(_verb(w._pb))
                self.paths.append((w._pb.update.name or w._pb.delete).split("/documents/", 1)[1])
            return batch.commit(*args, **kwargs)
        return commit


def _verb(pb) -> str:
    """What a ``Write`` does, named as the batch's method that makes it."""
    if pb.WhichOneof("operation") == "delete":
        return "delete"
    if pb.HasField("update_mask"):
        return "update"
    return "create" if pb.HasField("current_document") and not pb.current_document.exists else "set"


def test_a_re_report_costs_one_write_no_history_and_no_change_event(firestore, publisher):
    """OSAC republishes every resource on resync: same status, same message. Once 3 writes per re-report
    (ledger, resource, history), then 2 (ledger, resource last-seen); now 1: the resource's order and last-seen
    fields, and the re-report's dedup id in its ring (no ledger entry), and no change event."""
    from shared.upsert.handler import Upsert
    from shared.state.documents import Outcome
    from shared.upsert.store import StateStore

    counting = CountingBatches(firestore)
    upsert = Upsert(StateStore(counting), publisher, "projects/p/topics/dcm-status-changed")
    first = upsert.apply(status_update.from_bytes(normalized("RUNNING", "2026-01-01T10:00:00Z", "r1", message="up",
                                                         transition=False)))
    assert first.outcome is Outcome.APPLIED and len(counting.writes) == 3  # ledger entry, document, its transition
    counting.writes.clear()
    again = upsert.apply(status_update.from_bytes(normalized("RUNNING", "2026-01-01T10:05:00Z", "r2", message="up",
                                                         transition=False)))
    assert again.outcome is Outcome.UNCHANGED and again.change is None
    assert counting.writes == ["update"]
    doc = resource(firestore)
    assert doc["eventId"] == "r2" and doc["observedAt"] == "2026-01-01T10:05:00.000000Z" and doc["reReports"] == 1
    assert doc["lastTransitionTime"] == "2026-01-01T10:00:00.000000Z" and doc["updates"] == 1
    assert len(history(firestore)) == 1 and len(publisher.on("dcm-status-changed")) == 1
    # a changed message is no re-report: it is applied (history), still no change event (same status)
    changed = upsert.apply(status_update.from_bytes(normalized("RUNNING", "2026-01-01T10:06:00Z", "r3", message="slow",
                                                           transition=False)))
    assert changed.outcome is Outcome.APPLIED and changed.change is None


def test_an_applied_and_a_stale_update_write_one_ledger_entry_that_is_their_history(firestore, publisher):
    """Issue 32: the history entry is the ledger entry (no resources/{key}/history write): an applied update
    writes the entry and the document, a stale one the entry alone; both keep the history fields and no
    TTL (kept as long as history); a re-report's entry carries no history and still expires."""
    from shared.state.documents import HISTORY_FIELDS
    from shared.upsert.handler import Upsert
    from shared.state.documents import Outcome
    from shared.upsert.store import StateStore

    counting = CountingBatches(firestore)
    upsert = Upsert(StateStore(counting), publisher, "projects/p/topics/dcm-status-changed")
    applied = status_update.from_bytes(normalized("STOPPED", "2026-01-01T11:00:00Z", "h2", message="down"))
    assert upsert.apply(applied).outcome is Outcome.APPLIED
    # and, in the same commit, the change's transition of usage (issue 40: billing's record, written by upsert)
    assert sorted(p.split("/")[0] for p in counting.paths) == ["billing_resources", "events", "resources"]
    counting.paths.clear()
    stale = status_update.from_bytes(normalized("RUNNING", "2026-01-01T10:00:00Z", "h1", message="up"))
    assert upsert.apply(stale).outcome is Outcome.STALE
    assert counting.paths == [f"events/{stale.dedup_id}", f"billing_resources/aws~vm~i-1/transitions/{stale.dedup_id}"]
    counting.paths.clear()
    again = status_update.from_bytes(normalized("STOPPED", "2026-01-01T11:05:00Z", "h3", message="down",
                                            transition=False))
    assert upsert.apply(again).outcome is Outcome.UNCHANGED
    assert [p.split("/")[0] for p in counting.paths] == ["resources"]  # a re-report: its document only

    entries = {e.id: e.to_dict() for e in firestore.collection("events").stream()}
    for update, outcome, previous in ((applied, "applied", None), (stale, "stale", "STOPPED")):
        entry = entries[update.dedup_id]
        assert "expireAt" not in entry and entry["outcome"] == outcome and entry["previousStatus"] == previous
        assert {"status", "rawStatus", "message", "observedAt", "recordedAt", "eventSource"} <= set(entry)
        assert set(entry) >= {f for f in HISTORY_FIELDS if f not in ("output_spec", "outputs")}
        assert entry["observedAt"] == update.observed_at and entry["message"] == update.message
    assert again.dedup_id not in entries  # the re-report's trace is its resource's ring
    assert no_history_subcollection(firestore)


def test_a_duplicate_finds_the_ledger_entry_that_carries_history(firestore, publisher):
    """The entry of an applied (or stale) update is never expired: a redelivery or re-publication of that
    event is a duplicate however late it comes, and it adds nothing to the history."""
    from shared.state.documents import Outcome
    from shared.upsert.store import StateStore

    store = StateStore(firestore)
    update = status_update.from_bytes(normalized("RUNNING", "2026-01-01T10:00:00Z", "d1"))
    stale = status_update.from_bytes(normalized("STOPPED", "2026-01-01T09:00:00Z", "d0"))
    assert store.apply(update).outcome is Outcome.APPLIED and store.apply(stale).outcome is Outcome.STALE
    for u in (update, stale):
        again = store.apply(u)
        assert again.outcome is Outcome.DUPLICATE and again.ledger_id == u.dedup_id
    assert sorted(h["eventId"] for h in history(firestore)) == ["d0", "d1"]


def test_its_log_line_carries_what_the_log_based_metrics_read(upsert, firestore, publisher):
    """terraform/monitoring.tf counts updates by labels.outcome/provider/resourceType and takes the publish ->
    stored latency from jsonPayload.storedAfterPublishMs: the very line Cloud Logging gets."""
    import io
    import logging

    from shared.runtime.logs import CloudLoggingFormatter

    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(CloudLoggingFormatter())
    logging.getLogger("dcm.upsert").addHandler(handler)
    try:
        post(upsert, normalized("RUNNING", "2026-01-01T10:00:00Z", "e1"))
        post(upsert, normalized("RUNNING", "2026-01-01T10:00:00Z", "e1"), "n-2")
    finally:
        logging.getLogger("dcm.upsert").removeHandler(handler)
    applied, duplicate = (orjson.loads(line) for line in out.getvalue().splitlines())
    assert applied["logging.googleapis.com/labels"] == {"outcome": "applied", "provider": "aws", "resourceType": "vm"}
    assert duplicate["logging.googleapis.com/labels"]["outcome"] == "duplicate"
    assert applied["message"] == "update applied" and applied["logger"] == "dcm.upsert"
    assert applied["storedAfterPublishMs"] > 0  # published 2026-01-01T10:00:00Z, stored now


def test_publish_to_stored_latency_is_none_without_a_publish_time():
    from datetime import datetime, timezone

    from shared.upsert.handler import stored_after_publish_ms

    stored = datetime(2026, 1, 1, 10, 0, 1, 500000, tzinfo=timezone.utc)
    assert stored_after_publish_ms("2026-01-01T10:00:00Z", stored) == 1500.0
    assert stored_after_publish_ms(None, stored) is None
    assert stored_after_publish_ms("yesterday", stored) is None
