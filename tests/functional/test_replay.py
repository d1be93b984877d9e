"""Replay rules on the Firestore emulator, Pub/Sub faked: what is sent, what is refused."""

from __future__ import annotations

import pytest
from dcm_status_contracts import deadletter as dl
from dcm_status_contracts.model import PubSubMessage

from shared.deadletter.replay import MAX_REPLAYS, REPLAY_ATTEMPT, Replayer
from shared.deadletter.store import MAX_STORED_BYTES, DeadLetterStore
from shared.deadletter.triage import classify

TOPIC = "dcm-status-ingress-aws"


def rejected_message(message_id: str, data: bytes = b'{"broken": true}') -> PubSubMessage:
    attrs = {dl.REASON: "schema_invalid", dl.MESSAGE: "broken", dl.PROVIDER: "aws", dl.SOURCE_TOPIC: TOPIC,
             dl.ORIGINAL_MESSAGE_ID: message_id, dl.REJECTED_BY: "ingest", "x-trace": "t1"}
    return PubSubMessage(data, attrs, f"dlq-{message_id}", None, "dcm-status-deadletter")


@pytest.fixture
def store(firestore):
    return DeadLetterStore(firestore)


@pytest.fixture
def replayer(store, publisher):
    return Replayer(store, publisher, "dcm-test", lambda sub: "projects/dcm-test/topics/from-subscription")


def stored(store, message: PubSubMessage) -> str:
    store.record(message, classify(message))
    return next(iter(store.query()))["id"]


def test_replay_sends_the_original_bytes_and_attributes_to_its_topic(store, replayer, publisher):
    entry_id = stored(store, rejected_message("m1"))
    result = replayer.replay(entry_id)
    # a provider's ingress topic is reached through the replay topic (issue 25 item 6), naming it
    assert result.outcome == "published" and result.topic == "projects/dcm-test/topics/dcm-status-replay"
    [sent] = publisher.messages
    assert sent.data == b'{"broken": true}'
    replayed_at = sent.attributes[dl.REPLAYED_AT]  # a callback's retry period starts again there
    assert sent.attributes == {"x-trace": "t1", dl.REPLAY_OF: entry_id, REPLAY_ATTEMPT: "1",
                               dl.REPLAYED_AT: replayed_at, dl.REPLAY_TOPIC: TOPIC}  # no stale dcm-* reasons
    entry = store.get(entry_id)
    assert entry["attempts"] == 1 and entry["state"] == "replayed" and entry["replays"][0]["messageId"]


def test_replay_in_flight_is_not_sent_again_unless_forced(store, replayer, publisher):
    entry_id = stored(store, rejected_message("m1"))
    replayer.replay(entry_id)
    assert replayer.replay(entry_id).outcome == "skipped"
    assert replayer.replay(entry_id, force=True).outcome == "published"
    assert len(publisher.messages) == 2


def test_poison_limit(store, replayer):
    entry_id = stored(store, rejected_message("m1"))
    for _ in range(MAX_REPLAYS):
        assert replayer.replay(entry_id, force=True).outcome == "published"
        store.ref(entry_id).update({"state": "replay_failed"})
    refused = replayer.replay(entry_id)
    assert refused.outcome == "skipped" and "poison" in refused.detail


def test_unknown_entry_and_truncated_original_are_refused(store, replayer, publisher):
    assert replayer.replay("nope").outcome == "skipped"
    big = rejected_message("big", data=b"x" * (MAX_STORED_BYTES + 10))
    entry_id = stored(store, big)
    entry = store.get(entry_id)
    assert entry["dataTruncated"] and entry["size"] == MAX_STORED_BYTES + 10
    assert replayer.replay(entry_id).outcome == "skipped"
    assert not publisher.messages


def test_delivery_exhausted_replays_to_the_subscriptions_topic(store, replayer, publisher):
    message = PubSubMessage(b"{}", {dl.PS_SUBSCRIPTION: "dcm-upsert", dl.PS_SUBSCRIPTION_PROJECT: "dcm-test",
                                    dl.PS_DELIVERY_COUNT: "5"}, "dlq-x", None, "dcm-status-deadletter")
    entry_id = stored(store, message)
    assert replayer.replay(entry_id).topic == "projects/dcm-test/topics/from-subscription"


def test_entry_without_origin_is_refused(store, replayer):
    entry_id = stored(store, PubSubMessage(b"?", {}, "dlq-u", None, "dcm-status-deadletter"))
    result = replayer.replay(entry_id)
    assert result.outcome == "skipped" and "which topic" in result.detail
