"""Upsert's decision without Firestore (shared/upsert/decide.py): each standing of an update against what is
stored, the writes it asks for and what it announces; what it has not read and could change it. The store's
I/O around it is tests/functional/test_upsert*.py's."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

from dcm_status_contracts.model import ResourceKey
from dcm_status_contracts.status_update import StatusUpdate

from shared.state.documents import DOCUMENT_WRITES, DUPLICATES, LEDGER, RE_REPORTED, RESOURCES, RESYNCS, Outcome
from shared.upsert.decide import decide, maybe_ahead, resource_document
from shared.upsert.decision import Increment, LedgerEntry, Policy, Server, Standing, Stored, Unread, WriteOp

KEY = ResourceKey("aws", "vm", "i-1")
NOW = datetime(2026, 1, 1, 11, 0, tzinfo=timezone.utc)
POLICY = Policy()


def update(status: str = "RUNNING", minute: int = 0, event_id: str = "e1", ingress: str = "in-1",
           **fields) -> StatusUpdate:
    at = f"2026-01-01T10:{minute:02d}:00Z"
    return replace(StatusUpdate(
        key=KEY, status=status, raw_status=status.lower(), status_recognized=True, message="up", reason=None,
        last_transition_time=at, observed_at=at, metadata={"tenant": "acme"}, resource_specific={},
        event_id=event_id, event_source="aws.ec2", event_type="dcm.status", event_subject=None,
        dataschema="https://example.com/schema", schema_defaulted=False, ingress_message_id=ingress,
        ingress_topic="dcm-status-ingress-aws", received_at=at, transition_reported=True), **fields)


def nothing_stored(u: StatusUpdate, read: bool = False) -> Stored:
    return Stored(None, LedgerEntry(u.dedup_id, read=read))


def stored_as(u: StatusUpdate, **fields) -> Stored:
    """The document as an earlier decision on ``u`` left it (its ledger entry not read)."""
    [doc] = [w.data for w in decide(POLICY, u, nothing_stored(u), NOW).writes if w.collection == RESOURCES]
    return Stored({**doc, DOCUMENT_WRITES: 1, **fields}, LedgerEntry("other", read=False))


def by_collection(decision) -> dict[str, list]:
    out: dict[str, list] = {}
    for w in decision.writes:
        out.setdefault(w.collection, []).append(w)
    return out


def test_a_first_report_is_applied_created_and_announced():
    u = update()
    d = decide(POLICY, u, nothing_stored(u), NOW)
    assert (d.standing, d.result.outcome, d.unread) == (Standing.NEWER, Outcome.APPLIED, Unread.NOTHING)
    assert d.result.change is not None and d.result.status == "RUNNING" and d.result.previous_status is None
    writes = by_collection(d)
    [entry], [document] = writes[LEDGER], writes[RESOURCES]
    assert (entry.op, entry.doc_id) == (WriteOp.CREATE, u.dedup_id)
    assert entry.data["outcome"] == "applied" and entry.data["committedAt"] is Server.TIME
    assert entry.data["change"] == d.result.change.to_record() and entry.data["changeAnnounced"] is False
    assert (document.op, document.doc_id) == (WriteOp.CREATE, KEY.doc_id)
    assert document.data["status"] == "RUNNING" and document.data[DOCUMENT_WRITES] == Increment(1)


def test_the_decision_is_pure_data():
    u = update()
    stored = nothing_stored(u)
    assert decide(POLICY, u, stored, NOW) == decide(POLICY, u, stored, NOW)
    assert stored == nothing_stored(u)


def test_a_newer_status_is_applied_over_the_document_with_its_precondition():
    first = update("RUNNING", 0, "e1")
    d = decide(POLICY, update("STOPPED", 5, "e2"), stored_as(first), NOW)
    assert (d.standing, d.result.outcome, d.result.previous_status) == (Standing.NEWER, Outcome.APPLIED, "RUNNING")
    [document] = by_collection(d)[RESOURCES]
    assert document.op is WriteOp.UPDATE and document.data["status"] == "STOPPED"  # unchanged since read


def test_a_re_report_is_one_document_write_and_no_announcement():
    first = update("RUNNING", 0, "e1")
    d = decide(POLICY, update("RUNNING", 5, "e2", transition_reported=False), stored_as(first), NOW)
    assert (d.standing, d.result.outcome, d.result.change) == (Standing.RE_REPORT, Outcome.UNCHANGED, None)
    [document] = d.writes
    assert (document.collection, document.op) == (RESOURCES, WriteOp.UPDATE)
    assert [e["id"] for e in document.data[RE_REPORTED]] == [update(event_id="e2").dedup_id]


def test_a_re_report_in_the_ring_is_a_duplicate_counted_only_when_published_again():
    first, again = update("RUNNING", 0, "e1"), update("RUNNING", 5, "e2", transition_reported=False)
    ring = [{"id": again.dedup_id, "in": again.ingress_message_id}]
    redelivered = decide(POLICY, again, stored_as(first, **{RE_REPORTED: ring}), NOW)
    assert (redelivered.standing, redelivered.result.outcome) == (Standing.RE_REPORTED_BEFORE, Outcome.DUPLICATE)
    assert redelivered.writes == ()
    copy = decide(POLICY, replace(again, ingress_message_id="in-2"), stored_as(first, **{RE_REPORTED: ring}), NOW)
    [counted] = copy.writes
    assert (counted.collection, counted.doc_id) == (DUPLICATES, "dcm-status-ingress-aws~in-2")


def test_an_older_update_asks_for_its_ledger_entry_then_for_an_earlier_versions():
    newer, older = update("STOPPED", 5, "e2"), update("RUNNING", 0, "e1")
    stored = stored_as(newer)
    unread = decide(POLICY, older, replace(stored, ledger=LedgerEntry(older.dedup_id, read=False)), NOW)
    assert (unread.standing, unread.unread) == (Standing.OLDER, Unread.LEDGER)
    d = decide(POLICY, older, replace(stored, ledger=LedgerEntry(older.dedup_id)), NOW)
    assert (d.standing, d.result.outcome, d.unread) == (Standing.OLDER, Outcome.STALE, Unread.LEGACY_LEDGER)
    assert d.result.change is not None and d.result.change.attributes["late"] == "true"
    [entry] = by_collection(d)[LEDGER]
    assert entry.data["outcome"] == "stale" and entry.data["changeAnnounced"] is False
    assert RESOURCES not in by_collection(d)  # the state stays


def test_the_stored_event_itself_is_a_duplicate_that_writes_nothing():
    u = update()
    d = decide(POLICY, u, replace(stored_as(u), ledger=LedgerEntry(u.dedup_id)), NOW)
    assert (d.standing, d.result.outcome, d.writes) == (Standing.SAME_EVENT, Outcome.DUPLICATE, ())


def test_a_ledger_entry_found_is_a_duplicate_announcing_what_its_first_delivery_may_not_have():
    u = update()
    first = decide(POLICY, u, nothing_stored(u), NOW)
    [entry] = by_collection(first)[LEDGER]
    d = decide(POLICY, u, Stored(None, LedgerEntry(u.dedup_id, entry.data)), NOW)
    assert (d.standing, d.result.outcome, d.unread) == (Standing.DELIVERED_BEFORE, Outcome.DUPLICATE, Unread.NOTHING)
    assert d.result.change == first.result.change and d.result.ledger_id == u.dedup_id
    assert d.writes == ()  # the same publication: no duplicate to count
    announced = decide(POLICY, u, Stored(None, LedgerEntry(u.dedup_id, {**entry.data, "changeAnnounced": True})), NOW)
    assert announced.result.change is None


def test_a_hot_resource_carries_its_state_on_the_ledger_entry_and_marks_the_document_once():
    first = update("RUNNING", 0, "e1")
    hot = stored_as(first, writeTokens=0.0, writtenAt="2026-01-01T11:00:00Z")
    d = decide(POLICY, update("STOPPED", 5, "e2"), hot, NOW)
    [entry], [mark] = by_collection(d)[LEDGER], by_collection(d)[RESOURCES]
    assert entry.data["state"]["status"] == "STOPPED"
    assert mark.op is WriteOp.UPDATE and mark.data == {"hot": True, DOCUMENT_WRITES: Increment(1)}
    marked = replace(hot, document={**hot.document, "hot": True})
    assert maybe_ahead(marked.document) and not maybe_ahead(hot.document)
    assert RESOURCES not in by_collection(decide(POLICY, update("STOPPED", 5, "e2"), marked, NOW))


def test_the_first_event_of_a_snapshot_batch_opens_the_batch():
    mark = {"id": "b1", "at": "2026-01-01T10:00:00Z", "index": 0, "total": 2, "scope": []}
    u = update(resync=mark)
    [batch] = by_collection(decide(POLICY, u, nothing_stored(u), NOW))[RESYNCS]
    assert (batch.op, batch.doc_id, batch.data["state"]) == (WriteOp.SET, "aws~b1", "open")
    assert resource_document(u, "t")["key"] == str(KEY)


def test_a_change_writes_its_transition_of_usage_in_the_same_commit_and_decided_again_the_same_document():
    """Issue 40: billing's record of a change is a write of upsert's commit (shared/state/usage/transitions.py
    ``recorded_transition``): keyed by the change event's id, its content the change's but when it was recorded."""
    from dcm_status_contracts import status_changed

    from shared.state.usage.transitions import RECORDED_US, recorded_transition, transitions_path

    first = update("RUNNING", 0, "e1")
    stop = update("STOPPED", 5, "e2")
    d = decide(POLICY, stop, stored_as(first), NOW)
    [transition] = by_collection(d)[transitions_path(KEY.doc_id)]
    assert (transition.op, transition.doc_id) == (WriteOp.SET, d.result.change.event_id)
    assert transition.data == recorded_transition(status_changed.from_change(d.result.change), NOW)
    assert transition.data["oldSide"]["status"] == "RUNNING" and transition.data["status"] == "STOPPED"
    later = NOW.replace(minute=7)
    [again] = by_collection(decide(POLICY, stop, stored_as(first), later))[transitions_path(KEY.doc_id)]
    stamps = ("recordedAt", RECORDED_US, "oldSide")
    assert {k: v for k, v in again.data.items() if k not in stamps} == {
        k: v for k, v in transition.data.items() if k not in stamps}
    assert again.data[RECORDED_US] > transition.data[RECORDED_US]
    # a late change: its ledger entry and its transition (no old side); new outputs alone: a change, no transition
    late = decide(POLICY, update("STOPPED", 1, "e0"), stored_as(stop), NOW)
    assert late.result.outcome is Outcome.STALE
    [late_transition] = by_collection(late)[transitions_path(KEY.doc_id)]
    assert late_transition.data["late"] is True and "oldSide" not in late_transition.data
    outputs = decide(POLICY, update("RUNNING", 5, "e5", transition_reported=False, outputs={"ip": "10.0.0.1"}),
                     stored_as(first), NOW)
    assert outputs.result.outcome is Outcome.APPLIED and outputs.result.change is not None
    assert sorted(by_collection(outputs)) == [LEDGER, RESOURCES]
