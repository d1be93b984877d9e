"""Replay dead letters: send the original message, intact, to where it came from.

Replays go through the normal pipeline, so deduplication (provider, CloudEvent
source+id) guarantees a replay never double-applies. Poison protection: an
entry is replayed at most ``MAX_REPLAYS`` times unless forced; an entry whose
replay is still in flight is not replayed again unless forced.

A message that came from a provider's ingress topic is not sent back there:
ingest believes no replay marker from a topic a provider can publish to. It goes
to the replay topic (only this path may publish there), naming the ingress topic
it is for (``dcm-replay-topic``); ingest takes it as from that topic, markers
kept. Everything else goes straight back to its (internal) topic.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import orjson
from dcm_status_contracts import deadletter as dl
from dcm_status_contracts import ingress, timeutil
from dcm_status_contracts.model import event_identity
from google.cloud import firestore

from shared.deadletter.store import DeadLetterStore, stored_attributes
from shared.runtime.publishing import publish
from shared.state.documents import EntryState

MAX_REPLAYS = 3
REPLAY_ATTEMPT = dl.REPLAY_ATTEMPT


class ReplayOutcome(enum.StrEnum):
    PUBLISHED = "published"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class ReplayResult:
    entry_id: str
    outcome: ReplayOutcome
    detail: str
    message_id: str | None = None
    topic: str | None = None


class Skip(Exception):
    pass


def event_identity_of(data: bytes, attributes: Mapping[str, str], provider: str | None) -> str | None:
    """The dedup id of the event a dead letter carries, when it can be read. ``provider``: the entry's
    (for a provider's event, the one its ingress topic proved); a normalised update names its own."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("event_id"), str) and isinstance(doc.get("event_source"), str):
        if not isinstance(doc.get("provider"), str):
            return None
        ref = doc["event_id"] if not isinstance(doc.get("part"), str) else f"{doc['event_id']}#{doc['part']}"
        return event_identity(doc["provider"], doc["event_source"], ref)
    if not provider:
        return None
    if attributes.get("ce-id") and attributes.get("ce-source"):
        return event_identity(provider, attributes["ce-source"], attributes["ce-id"])
    if isinstance(doc, dict) and isinstance(doc.get("id"), str) and isinstance(doc.get("source"), str):
        return event_identity(provider, doc["source"], doc["id"])
    return None


class Replayer:
    def __init__(self, store: DeadLetterStore, publisher: Any, project: str,
                 topic_of_subscription: Callable[[str], str], origins: ingress.Origins = ingress.Origins()):
        """``origins``: the topology's ingress and replay names (infra/topology.yaml; the defaults are its)."""
        self.store = store
        self.publisher = publisher
        self.project = project
        self.topic_of_subscription = topic_of_subscription
        self.origins = origins

    def target_topic(self, entry: Mapping[str, Any]) -> str:
        if entry.get("sourceTopic"):
            return f"projects/{self.project}/topics/{entry['sourceTopic']}"
        if entry.get("sourceSubscription"):
            return self.topic_of_subscription(entry["sourceSubscription"])
        raise Skip("the entry does not say which topic it came from")

    def route(self, entry: Mapping[str, Any], attributes: Mapping[str, str]) -> tuple[str, dict[str, str]]:
        """Where to publish the replay, and the ingress topic it is for (``dcm-replay-topic``) when it goes
        through the replay topic: a provider's message goes back to ingest only through it."""
        topic = self.target_topic(entry)
        if self.origins.topic_provider(topic):
            return (f"projects/{self.project}/topics/{self.origins.replay_topic}",
                    {dl.REPLAY_TOPIC: ingress.short_name(topic)})
        if self.origins.is_replay(topic):  # it failed on the replay topic: the ingress topic it was for
            target = self.origins.replay_target(attributes)
            if target is None:
                raise Skip(f"the entry came from {ingress.short_name(topic)} but names no ingress topic it was for")
            return topic, {dl.REPLAY_TOPIC: target}
        return topic, {}

    def replay(self, entry_id: str, force: bool = False) -> ReplayResult:
        try:
            attempt, (topic, routing, original, data) = _claim(self.store.db.transaction(), self.store.ref(entry_id),
                                                               force, self._prepare)
        except Skip as exc:
            return ReplayResult(entry_id, ReplayOutcome.SKIPPED, str(exc))
        attributes = {k: v for k, v in original.items() if k != dl.REPLAY_TOPIC}
        attributes.update(routing)
        attributes[dl.REPLAY_OF] = entry_id
        attributes[REPLAY_ATTEMPT] = str(attempt)
        attributes[dl.REPLAYED_AT] = timeutil.now_str()
        message_id = publish(self.publisher, topic, data, attributes)
        self.store.ref(entry_id).update({"replays": firestore.ArrayUnion([{
            "at": timeutil.now_str(), "attempt": attempt, "messageId": message_id, "topic": topic}])})
        via = f" for {routing[dl.REPLAY_TOPIC]}" if routing else ""
        return ReplayResult(entry_id, ReplayOutcome.PUBLISHED, f"attempt {attempt} to {topic}{via}", message_id, topic)

    def _prepare(self, entry: Mapping[str, Any]) -> tuple[str, dict[str, str], dict[str, str], bytes]:
        """Topic, routing attributes, original attributes and bytes of the replay (Skip, before the entry
        is claimed, when there is nowhere to send it)."""
        original = dl.original_attributes(stored_attributes(entry))
        return (*self.route(entry, original), original, entry["data"])


@firestore.transactional
def _claim(tx: firestore.Transaction, ref: Any, force: bool,
           prepare: Callable[[dict[str, Any]], Any]) -> tuple[int, Any]:
    """Claim the entry for one more replay (Skip when it may not be): the attempt number, and what
    ``prepare`` made of the entry (it may Skip too, before anything is written)."""
    snap = ref.get(transaction=tx)
    if not snap.exists:
        raise Skip("no such dead-letter entry")
    entry = snap.to_dict()
    attempts = entry.get("attempts", 0)
    if entry.get("dataTruncated"):
        raise Skip(f"the original ({entry.get('size')} bytes) was too large to keep whole")
    if dl.ATTRIBUTES_DROPPED in stored_attributes(entry):
        raise Skip("the original had more attributes than a dead letter can carry: it was not kept whole")
    if not force and entry.get("state") == EntryState.REPLAYED:
        raise Skip("already replayed; awaiting its outcome (use --force to send again)")
    if not force and attempts >= MAX_REPLAYS:
        raise Skip(f"poison: replayed {attempts} times already (use --force to try again)")
    prepared = prepare(entry)
    tx.update(ref, {"attempts": attempts + 1, "state": EntryState.REPLAYED.value, "lastReplayAt": timeutil.now_str()})
    return attempts + 1, prepared
