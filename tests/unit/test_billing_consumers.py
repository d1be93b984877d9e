"""The changed topic's consumers and billing without the cloud: decode, the transition upsert records with a
change (billing's rules), billing's tick, audit's records, reject, filter."""

from __future__ import annotations

import base64
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import orjson
import pytest
from cloudevents.http import CloudEvent
from dcm_status_contracts import status_changed
from dcm_status_contracts.errors import Reason, Rejected, Transient
from dcm_status_contracts.model import PubSubMessage
from dcm_status_contracts.status_changed import ChangeEventView, from_message
from google.api_core import exceptions as gexc

from shared.audit import handler as audit
from shared.audit.handler import Audit, Audited
from shared.billing.handler import Billing
from shared.billing.store import EPOCH, GROUP_FILTER_FIELDS, OLD_SIDE, epoch_us, implied_document, transition_document
from shared.state.usage.transitions import RECORDED_US, recorded_transition, transitions_path
from shared.runtime.entrypoint import pubsub_function
from tests.fakes import FakePublisher, runtime_of
from tests.unit.test_change_event_contract import KINDS, as_message, build


def message_of(kind: str, **data_overrides: Any) -> PubSubMessage:
    msg = as_message(build(kind))
    msg["event"]["data"].update(data_overrides)
    return PubSubMessage(orjson.dumps(msg["event"]), msg["attributes"], "m-1", topic="dcm-status-changed")


@pytest.fixture
def dead_letters() -> FakePublisher:
    """What the entry point publishes to the dead-letter topic."""
    return FakePublisher()


class Forbidden:
    """A store or database the test says must not be touched."""

    def __getattr__(self, name):
        pytest.fail(f"must not write ({name})")


def through_entry_point(name, handler, message: PubSubMessage, publisher: FakePublisher) -> None:
    """Call a consumer as functions-framework would: a messagePublished CloudEvent, via the entry point."""
    event = CloudEvent({"type": "google.cloud.pubsub.topic.v1.messagePublished", "id": message.message_id,
                        "source": f"//pubsub.googleapis.com/projects/unit/topics/{message.topic}"},
                       {"message": {"data": base64.b64encode(message.data).decode(),
                                    "attributes": dict(message.attributes), "messageId": message.message_id}})
    pubsub_function(name, lambda runtime: handler, make_runtime=lambda: runtime_of(publisher=publisher))(event)


# ---- decode ---------------------------------------------------------------------------
def test_decode_changed():
    c = from_message(message_of("changed"))
    assert (c.key, c.provider, c.resource_type, c.resource_id) == ("aws/vm/i-0abc123", "aws", "vm", "i-0abc123")
    assert (c.old_status, c.new_status, c.late) == ("PROVISIONING", "RUNNING", False)
    assert c.at == "2026-03-01T09:00:00.000000Z" and c.old_at == "2026-03-01T08:59:00.000000Z"
    assert c.observed_at == "2026-03-01T09:00:01.000000Z"
    assert c.labels == {"tenant": "acme", "region": "eu-west-1", "environment": "prod"}
    assert c.doc_id == "aws~vm~i-0abc123"
    assert len(c.event_id) == 64


def test_decode_canonicalises_times():
    c = from_message(message_of("changed", newTransitionTime="2026-03-01T10:00:00+01:00"))
    assert c.at == "2026-03-01T09:00:00.000000Z"


def test_decode_accepts_any_minor_version_and_unknown_fields():
    c = from_message(message_of("late", version="1.7", addedInMinor={"x": 1}))
    assert c.late is True and c.version == "1.7"


def test_labels_only_when_present():
    msg = as_message(build("created"))
    msg["event"]["data"]["resource"]["metadata"] = {"tenant": "t1", "region": "", "owner": "bob"}
    c = from_message(PubSubMessage(orjson.dumps(msg["event"]), {}, "m"))
    assert c.labels == {"tenant": "t1"}


@pytest.mark.parametrize("data, reason", [
    (b"{not json", Reason.MALFORMED_JSON),
    (b"[1, 2]", Reason.NOT_A_CLOUDEVENT),
    (orjson.dumps({"id": "x", "type": "dcm.other", "data": {}}), Reason.NOT_A_CLOUDEVENT),
    (orjson.dumps({"id": "x", "type": "dcm.status.changed"}), Reason.SCHEMA_INVALID),
])
def test_decode_rejects_what_is_not_a_change_event(data, reason):
    with pytest.raises(Rejected) as info:
        from_message(PubSubMessage(data, {}, "m"))
    assert info.value.reason is reason


def test_decode_rejects_an_unknown_major_version():
    with pytest.raises(Rejected) as info:
        from_message(message_of("changed", version="2.0"))
    assert info.value.reason is Reason.UNKNOWN_SCHEMA and info.value.key == "aws/vm/i-0abc123"


def test_decode_rejects_invalid_data_with_the_path():
    with pytest.raises(Rejected) as info:
        from_message(message_of("changed", newTransitionTime="yesterday"))
    assert info.value.reason is Reason.SCHEMA_INVALID
    assert info.value.detail["path"] == "/data/newTransitionTime"


# ---- billing: the transition upsert records with a change (issue 40), and billing's tick ------------------
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def test_not_reported_lately_is_no_transition_for_billing_a_provider_reason_of_the_same_word_is():
    base = from_message(message_of("changed"))
    quiet = replace(base, new_status="UNKNOWN", reason="NotReported", old_status="RUNNING")
    assert recorded_transition(quiet, NOW) is None  # the platform's: usage goes on as last known (RUNNING)
    assert recorded_transition(replace(quiet, reason="NodeLost"), NOW)["status"] == "UNKNOWN"  # a provider's: observed
    assert recorded_transition(replace(quiet, new_status="STOPPED"), NOW)["status"] == "STOPPED"


def test_a_change_is_recorded_as_its_transition_with_its_old_side():
    changed, late = from_message(message_of("changed")), from_message(message_of("late"))
    doc, late_doc = recorded_transition(changed, NOW), recorded_transition(late, NOW)
    assert (doc["status"], doc["at"], doc["late"]) == ("RUNNING", "2026-03-01T09:00:00.000000Z", False)
    assert (late_doc["status"], late_doc["at"], late_doc["late"]) == ("STOPPED", "2026-03-01T08:59:30.000000Z", True)
    assert doc[OLD_SIDE] == implied_document(changed, doc["recordedAt"])[1] and OLD_SIDE not in late_doc
    assert doc["recordedAt"] == "2026-03-01T12:00:00.000000Z" and doc[RECORDED_US] == epoch_us(NOW)
    assert doc == {**transition_document(changed, doc["recordedAt"], epoch_us(NOW)), OLD_SIDE: doc[OLD_SIDE]}
    assert transitions_path(changed.doc_id) == "billing_resources/aws~vm~i-0abc123/transitions"


@pytest.mark.parametrize("kind", KINDS)
def test_the_producer_reads_the_change_as_every_consumer_does(kind):
    """Upsert records the transition from the change event it built (``from_change``): the view is the one a
    consumer of the changed topic reads (``from_message``), so the document is the one billing wrote."""
    event = build(kind)
    assert status_changed.from_change(event) == from_message(PubSubMessage(event.body, dict(event.attributes), "m"))


def test_new_outputs_alone_are_no_transition_for_billing_nor_a_stop_for_audit():
    outputs_only = from_message(message_of("outputs"))
    assert not outputs_only.transition
    assert recorded_transition(outputs_only, NOW) is None
    stopped = replace(outputs_only, old_status="STOPPED", new_status="STOPPED")
    assert not stopped.transition
    msg = message_of("outputs", oldStatus="STOPPED", newStatus="STOPPED")
    assert Audit(Forbidden())(msg) is Audited.IGNORED


def tick() -> PubSubMessage:
    return PubSubMessage(orjson.dumps({"tick": "sweep"}), {}, "t-1", topic="dcm-status-sweep")


def test_billing_reads_nothing_on_a_tick_when_it_keeps_no_snapshot(dead_letters):
    through_entry_point("billing", Billing(Forbidden(), usage_every=0), tick(), dead_letters)  # returns: acked
    assert dead_letters.messages == []


class Down:
    """A Firestore that answers nothing."""

    def __getattr__(self, name):
        raise gexc.ServiceUnavailable("down")


def test_billing_acks_a_tick_whose_keep_failed_the_next_tick_keeps_it(dead_letters, logged):
    through_entry_point("billing", Billing(Down(), usage_every=300), tick(), dead_letters)  # returns: acked
    assert dead_letters.messages == []
    assert any(r["message"] == "billing tick failed to keep the usage snapshot; the next tick does" for r in logged())


def test_the_transition_document_carries_what_readers_filter_on():
    """No parent document is written: the transition alone names its resource, and carries every field the
    report's collection-group query filters on (GROUP_FILTER_FIELDS)."""
    c = from_message(message_of("changed"))
    doc = transition_document(c, "now")
    assert doc["status"] == "RUNNING" and doc["at"] == c.at and doc["eventId"] == c.event_id
    assert doc["atUs"] == epoch_us(EPOCH) + 1772355600 * 1_000_000
    assert doc["labels"]["tenant"] == "acme" and doc["late"] is False
    assert {k: doc[k] for k in ("key", "provider", "resourceType")} == {
        "key": "aws/vm/i-0abc123", "provider": "aws", "resourceType": "vm"}
    for path in GROUP_FILTER_FIELDS:
        value: Any = doc
        for part in path.split("."):
            value = value[part]
        assert isinstance(value, str) and value, path


# ---- audit ------------------------------------------------------------------------------
class FakeDocs:
    def __init__(self, fail: Exception | None = None):
        self.docs: dict[str, dict] = {}
        self.fail = fail

    def collection(self, name):
        assert name in (audit.COLLECTION, audit.PROVIDER_COLLECTION)
        return self

    def document(self, doc_id):
        self.doc_id = doc_id
        return self

    def create(self, doc, timeout=None):
        if self.fail:
            raise self.fail
        if self.doc_id in self.docs:
            raise gexc.AlreadyExists("exists")
        self.docs[self.doc_id] = doc


def stopped_message() -> PubSubMessage:
    msg = as_message(build("changed"))
    data = msg["event"]["data"]
    data.update(oldStatus="RUNNING", newStatus="STOPPED")
    data["resource"]["status"] = "STOPPED"
    return PubSubMessage(orjson.dumps(msg["event"]), {**msg["attributes"], "newStatus": "STOPPED"}, "m-2")


def test_audit_records_a_stop_once():
    db = FakeDocs()
    msg = stopped_message()
    assert Audit(db)(msg) is Audited.RECORDED
    assert Audit(db)(msg) is Audited.DUPLICATE
    [(doc_id, doc)] = db.docs.items()
    assert doc_id == from_message(msg).event_id
    assert {k: doc[k] for k in ("key", "at", "oldStatus", "provider", "tenant", "late")} == {
        "key": "aws/vm/i-0abc123", "at": "2026-03-01T09:00:00.000000Z", "oldStatus": "RUNNING",
        "provider": "aws", "tenant": "acme", "late": False}


def test_audit_rechecks_the_filter_in_code():
    assert Audit(Forbidden())(message_of("changed")) is Audited.IGNORED  # RUNNING: the emulator delivers it


def test_audit_trusts_the_data_not_the_attributes():
    msg = message_of("changed")
    lying = PubSubMessage(msg.data, {**msg.attributes, "newStatus": "STOPPED"}, "m-3")
    assert Audit(Forbidden())(lying) is Audited.IGNORED


def test_audit_records_a_late_stop():
    db = FakeDocs()
    assert Audit(db)(message_of("late")) is Audited.RECORDED
    assert next(iter(db.docs.values()))["late"] is True


def test_audit_records_each_provider_event_once_from_its_own_topic(dead_letters):
    from tests.unit.test_provider_event_contract import SAMPLES

    db = FakeDocs()
    sample = orjson.loads((SAMPLES / "silent.json").read_bytes())
    msg = PubSubMessage(orjson.dumps(sample["event"]), sample["attributes"], "p-1", None, "dcm-status-providers")
    assert Audit(db)(msg) is Audited.RECORDED
    assert Audit(db)(msg) is Audited.DUPLICATE
    [(doc_id, doc)] = db.docs.items()
    assert doc_id == "aws~SILENT~2026-03-01T10:15:00.000000Z" and (doc["state"], doc["provider"]) == ("SILENT", "aws")
    # a change event on the providers' topic is not a provider event: dead-lettered, saying why
    wrong = PubSubMessage(message_of("changed").data, {}, "p-2", None, "dcm-status-providers")
    through_entry_point("audit", Audit(Forbidden()), wrong, dead_letters)
    assert dead_letters.messages[0].attributes["dcm-reason"] == "not_a_cloudevent"


def test_audit_transient_on_firestore_failure():
    with pytest.raises(Transient):
        Audit(FakeDocs(fail=gexc.ServiceUnavailable("down")))(stopped_message())


def test_audit_dead_letters_a_bad_message(dead_letters):
    through_entry_point("audit", Audit(Forbidden()), message_of("changed", version="9.0"), dead_letters)
    [sent] = dead_letters.messages
    assert sent.attributes["dcm-reason"] == "unknown_schema"
    assert sent.attributes["dcm-rejected-by"] == "audit"


# ---- the old side of a change ------------------------------------------------------------
def _update(status: str, at: str, event_id: str, tenant: str = "acme"):
    from tests.unit.test_change_event_contract import update
    return update(status, status.lower(), at, at, event_id, "", tenant=tenant)


def _emitted(upd, old_upd, late=False) -> ChangeEventView:
    from dcm_status_contracts import status_changed

    from shared.upsert.decide import resource_document
    old = resource_document(old_upd, "now") if old_upd else None
    ev = status_changed.build(upd, old, resource_document(upd, "now"), late=late)
    return from_message(PubSubMessage(ev.body, dict(ev.attributes), "m"))


def _stored(changes: list[ChangeEventView]) -> list[dict]:
    from shared.billing.store import implied_document
    docs = []
    for c in changes:
        docs.append({"id": c.event_id, **transition_document(c, "now")})
        implied = implied_document(c, "now")
        if implied:
            docs.append({"id": implied[0], **implied[1]})
    return docs


def test_old_side_recovers_a_same_status_report_that_upsert_did_not_announce():
    from shared.state.usage.intervals import per_day, usage
    from shared.billing.store import to_transition

    run10 = _update("RUNNING", "2026-03-01T10:00:00Z", "r10")
    run13 = _update("RUNNING", "2026-03-01T13:00:00Z", "r13")  # arrives 2nd: RUNNING -> RUNNING, no event
    stop1230 = _update("STOPPED", "2026-03-01T12:30:00Z", "s1230")  # arrives 3rd: stale -> late event
    del14 = _update("DELETED", "2026-03-01T14:00:00Z", "d14")  # arrives 4th: old = RUNNING since 13:00
    changes = [_emitted(run10, None), _emitted(stop1230, None, late=True), _emitted(del14, run13)]
    docs = _stored(changes)
    assert [d["id"].endswith("~old") for d in docs] == [False, False, False, True]
    assert docs[-1]["status"] == "RUNNING" and docs[-1]["at"] == "2026-03-01T13:00:00.000000Z"
    intervals = usage([to_transition(d) for d in docs], "vm", "2026-03-01T00:00:00Z", "2026-03-02T00:00:00Z",
                      datetime_now())
    assert per_day(intervals) == {"2026-03-01": int(3.5 * 3600e6)}
    # without the old side, the 13:00-14:00 run would be lost
    without = usage([to_transition(d) for d in docs[:-1]], "vm", "2026-03-01T00:00:00Z", "2026-03-02T00:00:00Z",
                    datetime_now())
    assert per_day(without) == {"2026-03-01": int(2.5 * 3600e6)}


def test_old_side_labels_undo_metadata_changes():
    moved = _emitted(_update("STOPPED", "2026-03-01T11:00:00Z", "s", tenant="new"),
                     _update("RUNNING", "2026-03-01T10:00:00Z", "r", tenant="old"))
    assert moved.labels["tenant"] == "new" and moved.old_labels["tenant"] == "old"
    from shared.billing.store import implied_document
    assert implied_document(moved, "now")[1]["labels"]["tenant"] == "old"


def test_no_old_side_for_created_and_late_events():
    from shared.billing.store import implied_document
    created = _emitted(_update("RUNNING", "2026-03-01T10:00:00Z", "r"), None)
    late = _emitted(_update("RUNNING", "2026-03-01T10:00:00Z", "r"), None, late=True)
    assert implied_document(created, "now") is None and implied_document(late, "now") is None


def datetime_now():
    from datetime import datetime, timezone
    return datetime(2026, 6, 1, tzinfo=timezone.utc)
