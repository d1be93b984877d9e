"""Issue 25, items 1 and 6: a provider proves nothing but its ingress topic.

Item 1: the dedup ledger is keyed by the provider the topic proves, so a provider that claims another's
source and id on its own topic cannot have the other's event answered ``duplicate``.
Item 6: a provider cannot set platform (``dcm-*``) attributes; replay markers count only on messages from
the replay topic, so a provider cannot choose (and overwrite) a dead-letter entry.
Through functions-framework's test clients (ingest, upsert, deadletter) on the Firestore emulator.
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
from tests.functional.conftest import PROJECT, SHAPES, client_for

AWS, AZURE = "dcm-status-ingress-aws", "dcm-status-ingress-azure"
SOURCE, EVENT_ID = "azure-provider", "azure-next-id"  # azure's January source form, and its next id




@pytest.fixture(scope="module")
def deadletter():
    return client_for("deadletter")


def through_ingest(ingest, publisher, topic: str, data: bytes, attributes: dict[str, str], message_id: str):
    """Post to ingest on ``topic``; what it forwarded to upsert (or dead-lettered) is taken off the fake."""
    assert SHAPES["push"](ingest, topic, data, attributes, message_id).status_code == 200
    forwarded, rejected = publisher.normalized(), publisher.on("dcm-status-deadletter")
    publisher.messages[:] = [m for m in publisher.messages if m not in forwarded and m not in rejected]
    return forwarded, rejected


def apply(upsert, forwarded, message_id: str) -> None:
    for out in forwarded:
        lane = out.topic.rsplit("/", 1)[-1]
        assert SHAPES["push"](upsert, lane, out.data, out.attributes, message_id).status_code == 200


def ledger(db, provider: str) -> dict | None:
    snap = db.collection("events").document(event_identity(provider, SOURCE, EVENT_ID)).get()
    return snap.to_dict() if snap.exists else None


# ---- item 1: the provider is part of every dedup key -------------------------------------------------
def test_another_providers_source_and_id_on_its_own_topic_erases_nothing(ingest, upsert, publisher, firestore):
    """aws publishes azure's next source+id first (upstream form: its topic names the provider); azure's
    real event after it is applied, not answered ``duplicate``."""
    forged = build_event("aws", "vm", "decoy", "RUNNING", "pre-empting", event_id=EVENT_ID, source=SOURCE,
                         form="current", time="2026-03-01T10:00:00Z")
    real = build_event("azure", "vm", "web-1", "STOPPED", "the real one", event_id=EVENT_ID,
                       time="2026-03-01T10:00:01Z")
    assert real["source"] == SOURCE
    for topic, event, n in ((AWS, forged, "m-aws"), (AZURE, real, "m-azure")):
        data, attrs = to_message(event)
        forwarded, rejected = through_ingest(ingest, publisher, topic, data, attrs, n)
        assert forwarded and not rejected
        apply(upsert, forwarded, f"n-{n}")

    assert firestore.collection("resources").document("azure~vm~web-1").get().to_dict()["status"] == "STOPPED"
    assert firestore.collection("resources").document("aws~vm~decoy").get().to_dict()["status"] == "RUNNING"
    assert ledger(firestore, "azure")["outcome"] == ledger(firestore, "aws")["outcome"] == "applied"
    assert ledger(firestore, "azure")["provider"] == "azure"
    assert not list(firestore.collection("duplicates").stream())
    changes = [orjson.loads(m.data)["data"]["resource"]["key"] for m in publisher.on("dcm-status-changed")]
    assert sorted(changes) == ["aws/vm/decoy", "azure/vm/web-1"]  # both announced, under distinct ids


def test_a_redelivery_is_still_one_update_and_its_duplicate_record_names_the_provider(ingest, upsert, publisher,
                                                                                         firestore):
    data, attrs = to_message(build_event("azure", "vm", "web-1", "RUNNING", event_id=EVENT_ID,
                                         time="2026-03-01T10:00:00Z"))
    for n in ("m-1", "m-2"):  # the provider published twice
        forwarded, _ = through_ingest(ingest, publisher, AZURE, data, attrs, n)
        apply(upsert, forwarded, f"n-{n}")
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
        ingest, upsert, publisher, firestore):
    """Applied by the version before (ledger under source+id), its change not yet published when it died:
    redelivered after the deploy, it is found under its legacy id, applied once, its change published."""
    data, attrs = to_message(build_event("azure", "vm", "web-1", "RUNNING", event_id=EVENT_ID,
                                         time="2026-03-01T10:00:00Z"))
    forwarded, _ = through_ingest(ingest, publisher, AZURE, data, attrs, "m-1")
    apply(upsert, forwarded, "n-1")
    [change] = publisher.on("dcm-status-changed")
    update = status_update.from_bytes(forwarded[0].data)
    record = firestore.collection("events").document(update.dedup_id).get().to_dict()["change"]
    firestore.collection("events").document(update.dedup_id).delete()  # as if the old version had written it
    legacy = _legacy_entry(firestore, update, record)
    publisher.messages.clear()

    apply(upsert, forwarded, "n-1-again")  # the redelivery after the deploy
    assert firestore.collection("resources").document("azure~vm~web-1").get().to_dict()["updates"] == 1
    assert not firestore.collection("events").document(update.dedup_id).get().exists
    [again] = publisher.on("dcm-status-changed")
    assert again.data == change.data  # the pending change, same id
    assert firestore.collection("events").document(legacy).get().to_dict()["changeAnnounced"] is True


def test_a_legacy_entry_of_another_resource_is_not_taken_for_this_event(ingest, upsert, publisher, firestore):
    """The legacy id (source+id) may be another provider's event: only an entry of this resource counts."""
    newer = build_event("aws", "vm", "decoy", "STOPPED", event_id="aws-2", time="2026-03-01T11:00:00Z")
    older = build_event("aws", "vm", "decoy", "RUNNING", event_id=EVENT_ID, source=SOURCE, form="current",
                        time="2026-03-01T10:00:00Z")
    stored = []
    for event, n in ((newer, "m-1"), (older, "m-2")):
        data, attrs = to_message(event)
        forwarded, _ = through_ingest(ingest, publisher, AWS, data, attrs, n)
        stored.append(forwarded)
    apply(upsert, stored[0], "n-1")
    azure_update = status_update.from_bytes(stored[1][0].data)
    _legacy_entry(firestore, status_update.StatusUpdate(**{**azure_update.__dict__, "key": type(azure_update.key)(
        "azure", "vm", "web-1")}), None)
    apply(upsert, stored[1], "n-2")  # aws's out-of-order event: stale, recorded, whatever azure's entry says
    assert ledger(firestore, "aws")["outcome"] == "stale"


# ---- item 6: platform attributes are the platform's ---------------------------------------------------
def _entry_id(topic: str, message_id: str) -> str:
    """How the dead-letter store names the entry of a message (shared/deadletter/store.py)."""
    return hashlib.sha256(f"{topic}\x00{message_id}".encode()).hexdigest()[:32]


def test_a_provider_set_replay_marker_is_not_carried_into_the_update(ingest, publisher):
    data, attrs = to_message(build_event("aws", "vm", "i-1", "RUNNING"))
    forged = {dl.REPLAY_OF: "0" * 32, dl.REPLAYED_AT: "2026-01-01T00:00:00Z", dl.REPLAY_TOPIC: AZURE,
              dl.REASON: "oversize", "DCM-Replay-Of": "1" * 32}
    [out], _ = through_ingest(ingest, publisher, AWS, data, {**attrs, **forged}, "m-1")
    update = status_update.from_bytes(out.data)
    assert update.replay_of is None and update.key.provider == "aws"


def _victim(ingest, deadletter, publisher, firestore) -> dict:
    """azure's dead letter, waiting for an operator."""
    _, [dead] = through_ingest(ingest, publisher, AZURE, b"not json", {}, "m-azure")
    assert SHAPES["push"](deadletter, "dcm-status-deadletter", dead.data, dead.attributes, "d-azure").status_code == 200
    return DeadLetterStore(firestore).get(_entry_id(AZURE, "m-azure"))


def test_a_rejected_provider_message_cannot_choose_its_dead_letter_entry(ingest, deadletter, publisher, firestore):
    victim = _victim(ingest, deadletter, publisher, firestore)
    assert victim["state"] == "open"
    forged = {dl.REPLAY_OF: victim["id"], dl.REPLAY_TOPIC: AZURE, dl.SOURCE_TOPIC: "dcm-status-replay"}
    _, [dead] = through_ingest(ingest, publisher, AWS, b"attacker text", forged, "m-aws")
    assert SHAPES["push"](deadletter, "dcm-status-deadletter", dead.data, dead.attributes, "d-aws").status_code == 200

    store = DeadLetterStore(firestore)
    after = store.get(victim["id"])
    assert after["state"] == "open" and after["occurrences"] == 1 and "lastFailure" not in after
    own = store.get(_entry_id(AWS, "m-aws"))  # the attacker's message got the entry its topic and id name
    assert own["provider"] == "aws" and own["data"] == b"attacker text" and own["replayOf"] is None


def test_a_message_pubsub_gave_up_on_cannot_choose_its_entry_nor_pass_for_a_rejection(deadletter, ingest,
                                                                                       publisher, firestore):
    """Dead-lettered by Pub/Sub from an ingress subscription, a message keeps the attributes its provider
    set: Pub/Sub's own attributes say what happened, the subscription whose it is."""
    victim = _victim(ingest, deadletter, publisher, firestore)
    forged = {dl.REASON: "schema_invalid", dl.SOURCE_TOPIC: "dcm-status-normalized-azure", dl.PROVIDER: "azure",
              dl.REPLAY_OF: victim["id"], dl.PS_SUBSCRIPTION: "dcm-ingest-aws", dl.PS_SUBSCRIPTION_PROJECT: PROJECT,
              dl.PS_DELIVERY_COUNT: "5"}
    assert SHAPES["push"](deadletter, "dcm-status-deadletter", b"{}", forged, "d-ps").status_code == 200
    store = DeadLetterStore(firestore)
    assert store.get(victim["id"])["state"] == "open"
    own = store.get(_entry_id(f"projects/{PROJECT}/subscriptions/dcm-ingest-aws", "d-ps"))
    assert own["reason"] == "delivery_exhausted" and own["provider"] == "aws" and own["sourceTopic"] is None


def test_a_real_replay_reaches_ingest_through_the_replay_topic_and_fails_back_to_its_entry(
        ingest, deadletter, publisher, firestore):
    victim = _victim(ingest, deadletter, publisher, firestore)
    replayer = Replayer(DeadLetterStore(firestore), publisher, PROJECT, lambda sub: "")
    result = replayer.replay(victim["id"])
    assert result.outcome == "published" and result.topic == f"projects/{PROJECT}/topics/dcm-status-replay"
    [sent] = publisher.on("dcm-status-replay")
    assert sent.attributes[dl.REPLAY_TOPIC] == AZURE and sent.attributes[dl.REPLAY_OF] == victim["id"]
    publisher.messages.clear()

    _, [dead] = through_ingest(ingest, publisher, "dcm-status-replay", sent.data, sent.attributes, "r-1")
    assert dead.attributes[dl.REPLAY_OF] == victim["id"]
    assert SHAPES["push"](deadletter, "dcm-status-deadletter", dead.data, dead.attributes, "d-r").status_code == 200
    again = DeadLetterStore(firestore).get(victim["id"])
    assert again["state"] == "replay_failed" and again["occurrences"] == 2 and again["provider"] == "azure"


def test_a_replayed_event_is_applied_as_its_providers_and_keeps_its_marker(ingest, publisher, firestore):
    # a source that names no provider: only the ingress topic the replay names can say whose it is
    data, attrs = to_message(build_event("azure", "vm", "web-1", "RUNNING", source=SOURCE, form="current"))
    replayed = {**attrs, dl.REPLAY_OF: "a" * 32, dl.REPLAY_TOPIC: AZURE, dl.REPLAYED_AT: "2026-03-01T10:00:00Z"}
    [out], _ = through_ingest(ingest, publisher, "dcm-status-replay", data, replayed, "r-1")
    update = status_update.from_bytes(out.data)
    assert update.replay_of == "a" * 32 and update.key.provider == "azure"
    assert out.topic.endswith("/dcm-status-normalized-azure")


def test_a_replay_naming_no_ingress_topic_is_refused(ingest, publisher):
    data, attrs = to_message(build_event("azure", "vm", "web-1", "RUNNING", form="current"))  # names azure
    for target in ({}, {dl.REPLAY_TOPIC: "dcm-status-normalized-azure"}):
        forwarded, [dead] = through_ingest(ingest, publisher, "dcm-status-replay", data, {**attrs, **target}, "r-1")
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
