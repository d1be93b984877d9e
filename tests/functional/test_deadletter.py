"""deadletter through functions-framework's test client, on the Firestore emulator."""

from __future__ import annotations

import orjson
import pytest
from dcm_status_contracts import deadletter as dl

from shared.api.queries import groups
from shared.deadletter.store import DeadLetterStore
from tests import samples
from tests.functional.conftest import SHAPES, client_for

BAD = b'{"specversion": "1.0", "id": "x", "source": "s", "type": "dcm.providers.aws.vm.a.status", "data": {"status": 1}}'


@pytest.fixture(scope="module")
def deadletter():
    return client_for("deadletter")


def rejection(original_id: str, **extra: str) -> dict[str, str]:
    return {dl.REASON: "schema_invalid", dl.MESSAGE: "/data/status: 1 is not of type 'string'",
            dl.DETAIL: orjson.dumps({"path": "/data/status", "rule": "type"}).decode(),
            dl.PROVIDER: "aws", dl.KEY: "aws/vm/a", dl.SOURCE_TOPIC: "dcm-status-ingress-aws",
            dl.ORIGINAL_MESSAGE_ID: original_id, dl.REJECTED_BY: "ingest", "x-trace": "t", **extra}


def post(client, attributes, message_id, data=BAD):
    return SHAPES["push"](client, "dcm-status-deadletter", data, attributes, message_id)


def test_rejection_is_stored_classified_with_original_intact(deadletter, firestore):
    assert post(deadletter, rejection("orig-1"), "d-1").status_code == 200
    [entry] = DeadLetterStore(firestore).query()
    assert entry["reason"] == "schema_invalid" and entry["provider"] == "aws" and entry["key"] == "aws/vm/a"
    assert entry["detail"] == {"path": "/data/status", "rule": "type"}
    assert entry["data"] == BAD and entry["attributes"]["x-trace"] == "t"
    assert entry["occurrences"] == 1 and entry["state"] == "open" and entry["sourceTopic"] == "dcm-status-ingress-aws"


def test_redelivered_dead_letter_is_not_counted_twice(deadletter, firestore):
    post(deadletter, rejection("orig-1"), "d-1")
    post(deadletter, rejection("orig-1"), "d-1")  # Pub/Sub redelivery of the same dead letter
    post(deadletter, rejection("orig-1"), "d-2")  # ingest rejected the same original twice
    [entry] = DeadLetterStore(firestore).query()
    assert entry["occurrences"] == 2


def test_copies_of_one_bug_form_one_group(deadletter, firestore):
    for i in range(5):
        post(deadletter, rejection(f"orig-{i}"), f"d-{i}")
    post(deadletter, {**rejection("other"), dl.DETAIL: '{"path": "/data/message", "rule": "required"}'}, "d-x")
    table = groups(list(DeadLetterStore(firestore).query()))
    assert [g["entries"] for g in table] == [5, 1]


def test_pubsub_delivery_exhausted_is_classified_with_subscription_and_count(deadletter, firestore):
    attrs = {dl.PS_SUBSCRIPTION: "projects/p/subscriptions/dcm-upsert", dl.PS_DELIVERY_COUNT: "5",
             dl.PS_SUBSCRIPTION_PROJECT: "p", dl.PS_PUBLISH_TIME: "2026-01-01T00:00:00Z",
             "provider": "aws", "key": "aws/vm/b"}
    assert post(deadletter, attrs, "d-9", data=b'{"key": "aws/vm/b"}').status_code == 200
    [entry] = DeadLetterStore(firestore).query(reason="delivery_exhausted")
    assert entry["sourceSubscription"] == "projects/p/subscriptions/dcm-upsert"
    assert entry["deliveryCount"] == 5 and entry["provider"] == "aws" and entry["key"] == "aws/vm/b"
    assert "5 times" in entry["message"]


def test_message_without_reason_is_unclassified(deadletter, firestore):
    assert post(deadletter, {}, "d-u", data=b"???").status_code == 200
    [entry] = DeadLetterStore(firestore).query(reason="unclassified")
    assert entry["data"] == b"???"


def test_replay_that_fails_again_comes_back_to_its_entry(deadletter, firestore):
    post(deadletter, rejection("orig-1"), "d-1")
    [entry] = DeadLetterStore(firestore).query()
    # a replay reaches ingest through the replay topic (issue 25 item 6): rejected there, it names it
    post(deadletter, rejection("orig-replayed", **{dl.REPLAY_OF: entry["id"], dl.SOURCE_TOPIC: "dcm-status-replay",
                                                   dl.REPLAY_TOPIC: "dcm-status-ingress-aws"}), "d-2")
    [again] = DeadLetterStore(firestore).query()
    assert again["id"] == entry["id"] and again["state"] == "replay_failed"
    assert again["lastFailure"]["reason"] == "schema_invalid"


def test_malformed_push_to_the_deadletter_function_is_acked_never_republished(deadletter, firestore, publisher):
    """It never publishes into its own topic, and retrying cannot help: logged, acked (the archive keeps it)."""
    body = {"message": {"data": "not base64!!", "messageId": "m-b"}, "subscription": "s"}
    resp = deadletter.post("/projects/dcm-test/topics/dcm-status-deadletter", json=body)
    assert resp.status_code == 200
    assert not publisher.messages
    assert list(DeadLetterStore(firestore).query()) == []


def test_a_dead_letter_triage_cannot_read_is_stored_unclassified_and_acked(deadletter, firestore, monkeypatch):
    """A bug in triage must not make the dead-letter function retry one message forever."""
    from shared.deadletter import handler

    def broken(message, *origins):
        raise RuntimeError("triage bug")
    monkeypatch.setattr(handler, "classify", broken)
    assert post(deadletter, rejection("orig-bug"), "d-bug").status_code == 200
    [entry] = DeadLetterStore(firestore).query(reason="unclassified")
    assert "triage bug" in entry["message"] and entry["data"] == BAD


def test_attribute_names_firestore_reserves_are_kept_as_json_and_replayable(deadletter, firestore):
    attributes = {**rejection("orig-reserved"), "__x__": "1", "": "empty"}
    assert post(deadletter, attributes, "d-reserved").status_code == 200
    from shared.deadletter.store import stored_attributes

    [entry] = [e for e in DeadLetterStore(firestore).query() if e["originalMessageId"] == "orig-reserved"]
    assert entry["attributes"] == {} and stored_attributes(entry)["__x__"] == "1"


def test_a_schema_rejection_names_its_first_violation_and_the_dead_letter_lists_them_all(deadletter, firestore):
    """Ingest stops at the first violation (its hot path); the dead-letter function, off that path, reads
    the original again and stores every violation of the schema ingest named."""
    from dcm_status_contracts.errors import Rejected
    from dcm_status_contracts.model import PubSubMessage

    from shared.ingest.normalize import normalize_message
    from shared.runtime import settings

    event = {"specversion": "1.0", "id": "two-bad", "source": "aws-prod", "type": "dcm.providers.aws.vm.i-2.status",
             "dataschema": "https://schemas.dcm.org/vm/status-v1.json",
             "data": {"status": 7, "message": "x", "lastTransitionTime": "not a time"}}
    data = orjson.dumps(event)
    with pytest.raises(Rejected) as info:
        normalize_message(PubSubMessage(data, {}, "m-1", topic="dcm-status-ingress-aws"), settings.from_env())
    assert "violations" not in info.value.detail and info.value.detail["path"].startswith("/data/")
    attrs = {**rejection("orig-2"), dl.DETAIL: orjson.dumps(info.value.detail).decode()}
    assert post(deadletter, attrs, "d-two", data=data).status_code == 200
    [entry] = DeadLetterStore(firestore).query()
    assert {(v["path"], v["rule"]) for v in entry["detail"]["violations"]} == {
        ("/data/status", "type"), ("/data/lastTransitionTime", "format")}


@pytest.mark.parametrize("sample", samples.load("invalid"), ids=lambda s: s.name)
def test_each_invalid_kind_is_dead_lettered_with_its_reason(pipeline, sample):
    """Published to the provider's ingress as a provider would, through ingest and the dead-letter topic to the
    stored entry: its reason, its original bytes (for replay), a message, the failing path. (Moved from
    tests/e2e/test_pipeline.py: nothing in it needs push delivery; issue 41.)"""
    provider = sample.provider if sample.provider in pipeline.topology.providers else "aws"
    message_id = pipeline.publish(f"ingress:{provider}", sample.data, **sample.attributes)
    pipeline.settle()
    entry = [e for e in DeadLetterStore(pipeline.db).query() if e["originalMessageId"] == message_id][0]
    assert entry["reason"] == sample.expect["reason"]
    assert entry["data"] == sample.data and entry["message"]
    if "path" in sample.expect:
        assert entry["detail"]["path"] == sample.expect["path"]


def test_poison_message_is_not_replayed_forever(pipeline):
    """Replayed with the CLI, a message that can never succeed fails again each time, and after three
    attempts the CLI refuses to replay it. (Moved from tests/e2e/test_deadletter.py: issue 41.)"""
    bad = orjson.dumps({"specversion": "1.0", "id": "poison-1", "source": "s",
                        "type": "dcm.providers.aws.vm.poison-1.status", "data": {"status": 1, "message": ""}})
    message_id = pipeline.publish("ingress:aws", bad)
    pipeline.settle()
    store = DeadLetterStore(pipeline.db)
    [entry] = [e for e in store.query() if e["originalMessageId"] == message_id]
    for attempt in (1, 2, 3):
        out = orjson.loads(pipeline.cli("dlq", "replay", entry["id"], "--json").stdout)
        assert out[0]["outcome"] == "published", out
        pipeline.settle()
        [again] = store.query(fingerprint=entry["fingerprint"])
        assert again["state"] == "replay_failed" and again["occurrences"] == attempt + 1, f"replay {attempt}"
    refused = orjson.loads(pipeline.cli("dlq", "replay", entry["id"], "--json").stdout)
    assert refused[0]["outcome"] == "skipped" and "poison" in refused[0]["detail"]
    [final] = store.query(fingerprint=entry["fingerprint"])
    assert final["attempts"] == 3 and final["lastFailure"]["reason"] == "schema_invalid"


def test_operator_cli_lists_groups_and_purges(pipeline):
    """`dlq list` groups what failed alike, `--flat` lists a group's entries, `stats` counts by reason, and
    `purge` asks first. (Moved from tests/e2e/test_deadletter.py: issue 41.)"""
    provider = "vmware"
    for i in range(4):
        pipeline.publish(f"ingress:{provider}", orjson.dumps({
            "specversion": "1.0", "id": f"g-{i}", "source": "s", "type": f"dcm.providers.{provider}.db.x{i}.status",
            "data": {"status": "UP", "message": ""}}))
    pipeline.settle()
    store = DeadLetterStore(pipeline.db)
    assert len(list(store.query(reason="unknown_resource_type", provider=provider))) >= 4
    groups = orjson.loads(pipeline.cli("dlq", "list", "--reason", "unknown_resource_type", "--provider", provider,
                                       "--json").stdout)
    assert len(groups) == 1 and groups[0]["entries"] >= 4
    flat = orjson.loads(pipeline.cli("dlq", "list", "--flat", "--group", groups[0]["fingerprint"], "--json").stdout)
    assert len(flat) == groups[0]["entries"] and all(e["reason"] == "unknown_resource_type" for e in flat)
    stats = orjson.loads(pipeline.cli("dlq", "stats", "--json").stdout)
    assert stats["byReason"]["unknown_resource_type"] >= 4
    refused = pipeline.cli("dlq", "purge", "--group", groups[0]["fingerprint"], input="n\n")
    assert refused.exit_code != 0 and list(store.query(fingerprint=groups[0]["fingerprint"]))
    assert pipeline.cli("dlq", "purge", "--group", groups[0]["fingerprint"], "--yes").exit_code == 0
    assert not list(store.query(fingerprint=groups[0]["fingerprint"]))
