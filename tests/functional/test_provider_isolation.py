"""Issue 25, items 1 and 6: a provider proves nothing but its ingress topic.

Item 1: the dedup ledger is keyed by the provider the topic proves, so a provider that claims another's
source and id on its own topic cannot have the other's event answered ``duplicate``.
Item 6: a provider cannot set platform (``dcm-*``) attributes; replay markers count only on messages from
the replay topic, so a provider cannot choose (and overwrite) a dead-letter entry.
Through the in-process pipeline (tests/pipeline.py: ingest, upsert, deadletter as the topology routes to them,
on the Firestore emulator), each step settled when the test says.
"""

from __future__ import annotations

import hashlib

import orjson
import pytest
from dcm_status_contracts import ingress
from dcm_status_contracts import deadletter as dl
from dcm_status_contracts import status_update
from dcm_status_contracts.model import PubSubMessage, event_identity, legacy_event_identity
from dcm_status_contracts.pubsub_binding import to_message
from dcm_status_contracts.status_report import build_event

from shared.deadletter.replay import Replayer
from shared.deadletter.store import DeadLetterStore
from shared.runtime import settings
from tests.functional.conftest import PROJECT
from tests.pipeline import Delivery

AWS, AZURE = "dcm-status-ingress-aws", "dcm-status-ingress-azure"
SOURCE, EVENT_ID = "azure-provider", "azure-next-id"  # azure's January source form, and its next id




@pytest.fixture
def publisher(pipeline):
    """The pipeline's Pub/Sub stand-in: what the functions published (``on``, ``normalized``, ``messages``)."""
    return pipeline.bus


def through_ingest(pipeline, topic: str, data: bytes, attributes: dict[str, str]):
    """Published on ``topic`` and delivered to ingest only; what it forwarded to upsert and what it dead-lettered,
    each taken off the queue (the test delivers them: ``apply``, ``deliver``)."""
    pipeline.publish(topic, data, **attributes)
    pipeline.settle(only=("ingest",))
    forwarded, rejected = pipeline.bus.take("upsert"), pipeline.bus.take("deadletter")
    return [d.message for d in forwarded], [d.message for d in rejected]


def deliver(pipeline, function: str, messages) -> None:
    """``messages`` (again) delivered to ``function`` on the subscriptions of their topics; every answer an ack."""
    subs = {s.topic: s for s in pipeline.topology.subscriptions if s.push == function}
    pipeline.bus.again([Delivery(subs[m.topic], m) for m in messages])
    assert all(d.answers[-1] == 200 for d in pipeline.settle(only=(function,)))


def apply(pipeline, forwarded) -> None:
    deliver(pipeline, "upsert", forwarded)


def ledger(db, provider: str) -> dict | None:
    snap = db.collection("events").document(event_identity(provider, SOURCE, EVENT_ID)).get()
    return snap.to_dict() if snap.exists else None


# ---- item 1: the provider is part of every dedup key -------------------------------------------------
def test_another_providers_source_and_id_on_its_own_topic_erases_nothing(pipeline, publisher, firestore):
    """aws publishes azure's next source+id first (upstream form: its topic names the provider); azure's
    real event after it is applied, not answered ``duplicate``."""
    forged = build_event("aws", "vm", "decoy", "RUNNING", "pre-empting", event_id=EVENT_ID, source=SOURCE,
                         form="current", time="2026-03-01T10:00:00Z")
    real = build_event("azure", "vm", "web-1", "STOPPED", "the real one", event_id=EVENT_ID,
                       time="2026-03-01T10:00:01Z")
    assert real["source"] == SOURCE
    for topic, event in ((AWS, forged), (AZURE, real)):
        data, attrs = to_message(event)
        forwarded, rejected = through_ingest(pipeline, topic, data, attrs)
        assert forwarded and not rejected
        apply(pipeline, forwarded)

    assert firestore.collection("resources").document("azure~vm~web-1").get().to_dict()["status"] == "STOPPED"
    assert firestore.collection("resources").document("aws~vm~decoy").get().to_dict()["status"] == "RUNNING"
    assert ledger(firestore, "azure")["outcome"] == ledger(firestore, "aws")["outcome"] == "applied"
    assert ledger(firestore, "azure")["provider"] == "azure"
    assert not list(firestore.collection("duplicates").stream())
    changes = [orjson.loads(m.data)["data"]["resource"]["key"] for m in publisher.on("dcm-status-changed")]
    assert sorted(changes) == ["aws/vm/decoy", "azure/vm/web-1"]  # both announced, under distinct ids


def test_a_redelivery_is_still_one_update_and_its_duplicate_record_names_the_provider(pipeline, publisher,
                                                                                         firestore):
    data, attrs = to_message(build_event("azure", "vm", "web-1", "RUNNING", event_id=EVENT_ID,
                                         time="2026-03-01T10:00:00Z"))
    for _ in range(2):  # the provider published twice
        forwarded, _ = through_ingest(pipeline, AZURE, data, attrs)
        apply(pipeline, forwarded)
    assert firestore.collection("resources").document("azure~vm~web-1").get().to_dict()["updates"] == 1
    [dup] = [d.to_dict() for d in firestore.collection("duplicates").stream()]
    assert dup["dedupId"] == event_identity("azure", SOURCE, EVENT_ID) and dup["provider"] == "azure"


def _legacy_entry(db, update: status_update.StatusUpdate, pending: dict | None) -> str:
    """What an earlier version left: a ledger entry under source+id only (its change maybe unannounced)."""
    legacy = legacy_event_identity(update.event_source, update.event_id)
    db.collection("events").document(legacy).set({
        "key": str(update.key), "eventId": update.event_id, "source": update.event_source,
        "ingressMessageId": "m-before", "outcome": "applied", "status": update.status,
        "change": pending, "changeAnnounced": pending is None})
    return legacy


def test_a_redelivery_across_the_deploy_is_a_duplicate_and_its_pending_change_is_announced(
        pipeline, publisher, firestore):
    """Applied by the version before (ledger under source+id), its change not yet published when it died:
    redelivered after the deploy, it is found under its legacy id, applied once, its change published."""
    data, attrs = to_message(build_event("azure", "vm", "web-1", "RUNNING", event_id=EVENT_ID,
                                         time="2026-03-01T10:00:00Z"))
    forwarded, _ = through_ingest(pipeline, AZURE, data, attrs)
    apply(pipeline, forwarded)
    [change] = publisher.on("dcm-status-changed")
    update = status_update.from_bytes(forwarded[0].data)
    record = firestore.collection("events").document(update.dedup_id).get().to_dict()["change"]
    firestore.collection("events").document(update.dedup_id).delete()  # as if the old version had written it
    legacy = _legacy_entry(firestore, update, record)
    publisher.messages.clear()

    apply(pipeline, forwarded)  # the redelivery after the deploy
    assert firestore.collection("resources").document("azure~vm~web-1").get().to_dict()["updates"] == 1
    assert not firestore.collection("events").document(update.dedup_id).get().exists
    [again] = publisher.on("dcm-status-changed")
    assert again.data == change.data  # the pending change, same id
    assert firestore.collection("events").document(legacy).get().to_dict()["changeAnnounced"] is True


def test_a_legacy_entry_of_another_resource_is_not_taken_for_this_event(pipeline, publisher, firestore):
    """The legacy id (source+id) may be another provider's event: only an entry of this resource counts."""
    newer = build_event("aws", "vm", "decoy", "STOPPED", event_id="aws-2", time="2026-03-01T11:00:00Z")
    older = build_event("aws", "vm", "decoy", "RUNNING", event_id=EVENT_ID, source=SOURCE, form="current",
                        time="2026-03-01T10:00:00Z")
    stored = []
    for event in (newer, older):
        data, attrs = to_message(event)
        forwarded, _ = through_ingest(pipeline, AWS, data, attrs)
        stored.append(forwarded)
    apply(pipeline, stored[0])
    azure_update = status_update.from_bytes(stored[1][0].data)
    _legacy_entry(firestore, status_update.StatusUpdate(**{**azure_update.__dict__, "key": type(azure_update.key)(
        "azure", "vm", "web-1")}), None)
    apply(pipeline, stored[1])  # aws's out-of-order event: stale, recorded, whatever azure's entry says
    assert ledger(firestore, "aws")["outcome"] == "stale"


# ---- item 6: platform attributes are the platform's ---------------------------------------------------
def _entry_id(topic: str, message_id: str) -> str:
    """How the dead-letter store names the entry of a message (shared/deadletter/store.py)."""
    return hashlib.sha256(f"{topic}\x00{message_id}".encode()).hexdigest()[:32]


def test_a_provider_set_replay_marker_is_not_carried_into_the_update(pipeline, publisher):
    data, attrs = to_message(build_event("aws", "vm", "i-1", "RUNNING"))
    forged = {dl.REPLAY_OF: "0" * 32, dl.REPLAYED_AT: "2026-01-01T00:00:00Z", dl.REPLAY_TOPIC: AZURE,
              dl.REASON: "oversize", "DCM-Replay-Of": "1" * 32}
    [out], _ = through_ingest(pipeline, AWS, data, {**attrs, **forged})
    update = status_update.from_bytes(out.data)
    assert update.replay_of is None and update.key.provider == "aws"


def _victim(pipeline, firestore) -> dict:
    """azure's dead letter, waiting for an operator."""
    _, [dead] = through_ingest(pipeline, AZURE, b"not json", {})
    deliver(pipeline, "deadletter", [dead])
    return DeadLetterStore(firestore).get(_entry_id(AZURE, dead.attributes[dl.ORIGINAL_MESSAGE_ID]))


def test_a_rejected_provider_message_cannot_choose_its_dead_letter_entry(pipeline, publisher, firestore):
    victim = _victim(pipeline, firestore)
    assert victim["state"] == "open"
    forged = {dl.REPLAY_OF: victim["id"], dl.REPLAY_TOPIC: AZURE, dl.SOURCE_TOPIC: "dcm-status-replay"}
    _, [dead] = through_ingest(pipeline, AWS, b"attacker text", forged)
    deliver(pipeline, "deadletter", [dead])

    store = DeadLetterStore(firestore)
    after = store.get(victim["id"])
    assert after["state"] == "open" and after["occurrences"] == 1 and "lastFailure" not in after
    own = store.get(_entry_id(AWS, dead.attributes[dl.ORIGINAL_MESSAGE_ID]))  # the attacker's message got the entry its topic and id name
    assert own["provider"] == "aws" and own["data"] == b"attacker text" and own["replayOf"] is None


def test_a_message_pubsub_gave_up_on_cannot_choose_its_entry_nor_pass_for_a_rejection(pipeline, publisher,
                                                                                       firestore):
    """Dead-lettered by Pub/Sub from an ingress subscription, a message keeps the attributes its provider
    set: Pub/Sub's own attributes say what happened, the subscription whose it is."""
    victim = _victim(pipeline, firestore)
    forged = {dl.REASON: "schema_invalid", dl.SOURCE_TOPIC: "dcm-status-normalized-azure", dl.PROVIDER: "azure",
              dl.REPLAY_OF: victim["id"], dl.PS_SUBSCRIPTION: "dcm-ingest-aws", dl.PS_SUBSCRIPTION_PROJECT: PROJECT,
              dl.PS_DELIVERY_COUNT: "5"}
    message_id = pipeline.publish("dcm-status-deadletter", b"{}", **forged)
    pipeline.settle()
    store = DeadLetterStore(firestore)
    assert store.get(victim["id"])["state"] == "open"
    own = store.get(_entry_id(f"projects/{PROJECT}/subscriptions/dcm-ingest-aws", message_id))
    assert own["reason"] == "delivery_exhausted" and own["provider"] == "aws" and own["sourceTopic"] is None


def test_a_real_replay_reaches_ingest_through_the_replay_topic_and_fails_back_to_its_entry(
        pipeline, publisher, firestore):
    victim = _victim(pipeline, firestore)
    replayer = Replayer(DeadLetterStore(firestore), publisher, PROJECT, lambda sub: "")
    result = replayer.replay(victim["id"])
    assert result.outcome == "published" and result.topic == f"projects/{PROJECT}/topics/dcm-status-replay"
    [sent] = publisher.on("dcm-status-replay")
    assert sent.attributes[dl.REPLAY_TOPIC] == AZURE and sent.attributes[dl.REPLAY_OF] == victim["id"]
    publisher.messages.clear()

    pipeline.settle(only=("ingest",))  # the replay, on the replay topic's subscription
    [dead] = [d.message for d in pipeline.bus.take("deadletter")]
    assert dead.attributes[dl.REPLAY_OF] == victim["id"]
    deliver(pipeline, "deadletter", [dead])
    again = DeadLetterStore(firestore).get(victim["id"])
    assert again["state"] == "replay_failed" and again["occurrences"] == 2 and again["provider"] == "azure"


def test_a_replayed_event_is_applied_as_its_providers_and_keeps_its_marker(pipeline, publisher, firestore):
    # a source that names no provider: only the ingress topic the replay names can say whose it is
    data, attrs = to_message(build_event("azure", "vm", "web-1", "RUNNING", source=SOURCE, form="current"))
    replayed = {**attrs, dl.REPLAY_OF: "a" * 32, dl.REPLAY_TOPIC: AZURE, dl.REPLAYED_AT: "2026-03-01T10:00:00Z"}
    [out], _ = through_ingest(pipeline, "dcm-status-replay", data, replayed)
    update = status_update.from_bytes(out.data)
    assert update.replay_of == "a" * 32 and update.key.provider == "azure"
    assert out.topic == "dcm-status-normalized-azure"


def test_a_replay_naming_no_ingress_topic_is_refused(pipeline, publisher):
    data, attrs = to_message(build_event("azure", "vm", "web-1", "RUNNING", form="current"))  # names azure
    for target in ({}, {dl.REPLAY_TOPIC: "dcm-status-normalized-azure"}):
        forwarded, [dead] = through_ingest(pipeline, "dcm-status-replay", data, {**attrs, **target})
        assert not forwarded and dead.attributes[dl.REASON] == "malformed_internal"


def test_the_replay_lane_is_no_providers_ingress_in_the_declared_topology():
    from infra.topology import load

    topo = load()
    origins = settings.from_env({**topo.env(), "DCM_PROJECT": "p"}).origins
    [replay] = [s for s in topo.subscriptions if s.topic_key == "replay"]
    assert replay.push == "ingest" and origins.subscription_provider(replay.name) is None
    assert not origins.provider_can_publish(topic=replay.topic) and origins.is_replay(replay.topic)
    ingress = [s for s in topo.subscriptions if s.topic_key == "ingress"]
    assert ingress and all(origins.subscription_provider(s.name) == s.provider for s in ingress)
    assert all(origins.topic_provider(t.name) == t.provider for t in topo.topics if t.key == "ingress")


def test_platform_attribute_names():
    assert all(ingress.is_platform_attribute(n) for n in (dl.REPLAY_OF, dl.REASON, "DCM-X", dl.PS_SUBSCRIPTION))
    assert not any(ingress.is_platform_attribute(n) for n in ("ce-id", "content-type", "x-trace", "key"))
    message = PubSubMessage(b"", {"x": "1", dl.REPLAY_OF: "e"}, "m", None, AWS)
    assert ingress.provider_attributes(message.attributes) == {"x": "1"}
