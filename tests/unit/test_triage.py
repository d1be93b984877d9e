"""Dead-letter classification and fingerprints."""

import orjson
from dcm_status_contracts import deadletter as dl
from dcm_status_contracts.errors import Reason, Rejected
from dcm_status_contracts.model import PubSubMessage, event_identity

from shared.deadletter.replay import event_identity_of
from shared.deadletter.triage import classify


def msg(attrs, data=b"{}"):
    return PubSubMessage(data, attrs, "dlq-1", "2026-01-01T00:00:00Z", "dcm-status-deadletter")


def rejected(reason=Reason.SCHEMA_INVALID, detail=None, provider="aws"):
    original = PubSubMessage(b"{}", {"x": "1"}, "orig-1", "2026-01-01T00:00:00Z", f"dcm-status-ingress-{provider}")
    exc = Rejected(reason, "broken", detail or {"path": "/data/status", "rule": "type"}, key="aws/vm/1")
    return dl.rejection_attributes(original, exc, "ingest", provider, "2026-01-01T00:00:00.000000Z")


def test_rejections_keep_their_reason_and_detail():
    c = classify(msg(rejected()))
    assert (c.reason, c.provider, c.key, c.source_topic, c.original_message_id) == (
        "schema_invalid", "aws", "aws/vm/1", "dcm-status-ingress-aws", "orig-1")
    assert c.detail == {"path": "/data/status", "rule": "type"}


def test_fingerprint_groups_by_provider_reason_and_path():
    a = classify(msg(rejected())).fingerprint
    assert a == classify(msg(rejected())).fingerprint
    assert a != classify(msg(rejected(provider="azure"))).fingerprint
    assert a != classify(msg(rejected(detail={"path": "/data/message", "rule": "required"}))).fingerprint
    assert a != classify(msg(rejected(reason=Reason.UNKNOWN_SCHEMA))).fingerprint


def test_callbacks_given_up_group_by_callback_not_by_delivery():
    def exhausted(callback_id, delivery_id):
        return rejected(Reason.CALLBACK_EXHAUSTED, {"callback": callback_id, "hook": "https://h.example/cb",
                                                    "lastStatus": 503, "deliveryId": delivery_id})
    a = classify(msg(exhausted("f1", "c1.f1"))).fingerprint
    assert a == classify(msg(exhausted("f1", "c2.f1"))).fingerprint
    assert a != classify(msg(exhausted("f2", "c1.f2"))).fingerprint


def test_pubsub_dead_letters_are_delivery_exhausted():
    c = classify(msg({dl.PS_SUBSCRIPTION: "dcm-ingest-aws", dl.PS_SUBSCRIPTION_PROJECT: "p", dl.PS_DELIVERY_COUNT: "5"},
                     orjson.dumps({"specversion": "1.0", "id": "1", "source": "s",
                                   "type": "dcm.providers.aws.vm.i-1.status"})))
    assert c.reason == "delivery_exhausted" and c.delivery_count == 5 and c.key == "aws/vm/i-1"
    assert c.source_subscription == "projects/p/subscriptions/dcm-ingest-aws"


def test_unexplained_messages_and_unknown_codes_are_unclassified():
    assert classify(msg({})).reason == "unclassified"
    assert classify(msg({dl.REASON: "made_up"})).reason == "unclassified"


def test_clipped_detail_is_kept_as_text():
    attrs = {**rejected(), dl.DETAIL: '{"path": "/da...'}
    assert classify(msg(attrs)).detail == {"detail": '{"path": "/da...'}


def test_replay_identity_reads_structured_binary_and_normalised():
    assert event_identity_of(b'{"id": "1", "source": "s"}', {}, "aws") == event_identity("aws", "s", "1")
    assert event_identity_of(b"{}", {"ce-id": "1", "ce-source": "s"}, "aws") == event_identity("aws", "s", "1")
    normalised = b'{"event_id": "1", "event_source": "s", "provider": "azure"}'
    assert event_identity_of(normalised, {}, None) == event_identity("azure", "s", "1")
    assert event_identity_of(b"not json", {}, "aws") is None
    assert event_identity_of(b'{"id": "1", "source": "s"}', {}, None) is None  # whose it is, unknown
