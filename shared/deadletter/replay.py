"""Replay dead letters: send the original message, intact, to where it came from.

Replays go through the normal pipeline, so deduplication (CloudEvent
source+id) guarantees a replay never double-applies. Poison protection: an
entry is replayed at most ``MAX_REPLAYS`` times unless forced; an entry whose
replay is still in flight is not replayed again unless forced.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import orjson
from google.cloud import firestore

from shared.contracts import dead_letter as dl
from shared.contracts import timeutil
from shared.contracts.model import event_identity
from shared.contracts.state import EntryState
from shared.deadletter.store import DeadLetterStore, stored_attributes
from shared.runtime.publishing import publish

MAX_REPLAYS = 3
REPLAY_ATTEMPT = "dcm-replay-attempt"


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


def event_identity_of(data: bytes, attributes: Mapping[str, str]) -> str | None:
    """The dedup id of the event a dead letter carries, when it can be read."""
    if attributes.get("ce-id") and attributes.get("ce-source"):
        return event_identity(attributes["ce-source"], attributes["ce-id"])
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("id"), str) and isinstance(doc.get("source"), str):
        return event_identity(doc["source"], doc["id"])
    if isinstance(doc.get("event_id"), str) and isinstance(doc.get("event_source"), str):
        return event_identity(doc["event_source"], doc["event_id"])
    return None


class Replayer:
    def __init__(self, store: DeadLetterStore, publisher: Any, project: str,
                 topic_of_subscription: Callable[[str], str]):
        self.store = store
        self.publisher = publisher
        self.project = project
        self.topic_of_subscription = topic_of_subscription

    def target_topic(self, entry: Mapping[str, Any]) -> str:
        if entry.get("sourceTopic"):
            return f"projects/{self.project}/topics/{entry['sourceTopic']}"
        if entry.get("sourceSubscription"):
            return self.topic_of_subscription(entry["sourceSubscription"])
        raise Skip("the entry does not say which topic it came from")

    def replay(self, entry_id: str, force: bool = False) -> ReplayResult:
        try:
            entry, attempt = _claim(self.store.db.transaction(), self.store.ref(entry_id), force)
            topic = self.target_topic(entry)
        except Skip as exc:
            return ReplayResult(entry_id, ReplayOutcome.SKIPPED, str(exc))
        attributes = dl.original_attributes(stored_attributes(entry))
        attributes[dl.REPLAY_OF] = entry_id
        attributes[REPLAY_ATTEMPT] = str(attempt)
        attributes[dl.REPLAYED_AT] = timeutil.now_str()
        message_id = publish(self.publisher, topic, entry["data"], attributes)
        self.store.ref(entry_id).update({"replays": firestore.ArrayUnion([{
            "at": timeutil.now_str(), "attempt": attempt, "messageId": message_id, "topic": topic}])})
        return ReplayResult(entry_id, ReplayOutcome.PUBLISHED, f"attempt {attempt} to {topic}", message_id, topic)


@firestore.transactional
def _claim(tx: firestore.Transaction, ref: Any, force: bool) -> tuple[dict[str, Any], int]:
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
    tx.update(ref, {"attempts": attempts + 1, "state": EntryState.REPLAYED.value, "lastReplayAt": timeutil.now_str()})
    return entry, attempts + 1
