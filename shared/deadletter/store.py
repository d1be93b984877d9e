"""Dead-letter entries in Firestore: ``deadletters/{entryId}``.

One entry per original message (the provider's publication, or the message
Pub/Sub gave up on), holding its bytes and attributes intact for replay, the
classification, first/last seen, occurrences and the replay record. A
redelivery of the same dead letter changes nothing; a replayed message that
fails again comes back to its own entry (``dcm-replay-of``) and is counted.
Groups (by fingerprint) are computed at read time, so there is no hot
counter document however many copies of one failure arrive.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any, Iterator, Mapping

import orjson
from dcm_status_contracts import limits, timeutil
from dcm_status_contracts.model import PubSubMessage
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.deadletter.triage import Classification
from shared.runtime import firestore as fs
from shared.state.documents import DEADLETTERS, EntryState

# A Firestore document holds at most 1 MiB: the original's bytes, and room for up to 100 attributes and the rest.
MAX_STORED_BYTES = limits.FIRESTORE_MAX_DOCUMENT_BYTES - 200_000
MAX_REMEMBERED_DELIVERIES = 50



class Recorded(enum.StrEnum):
    """What storing one dead-letter delivery did."""

    CREATED = "created"
    UPDATED = "updated"  # another copy of a known failure (or a failed replay) counted on its entry
    SEEN = "seen"  # a redelivery of a message already counted


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def _storable_map(value: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """``(map, None)`` when Firestore can hold ``value`` as a map; else ``({}, its JSON text)``.

    Attribute names are the provider's: ``__x__`` is a valid Pub/Sub attribute and no valid field name.
    """
    if limits.storable(value, max_depth=limits.FIRESTORE_MAX_DEPTH - 2) is None:
        return dict(value), None
    return {}, orjson.dumps(value, default=str).decode()


def stored_attributes(entry: Mapping[str, Any]) -> dict[str, str]:
    """The original message's attributes as an entry keeps them (a map, or JSON text when unstorable)."""
    if entry.get("attributesJson"):
        return orjson.loads(entry["attributesJson"])
    return dict(entry.get("attributes") or {})


def entry_id_for(c: Classification) -> str:
    if c.replay_of:
        return c.replay_of
    origin = c.source_topic or c.source_subscription or "-"
    return hashlib.sha256(f"{origin}\x00{c.original_message_id}".encode()).hexdigest()[:32]


class DeadLetterStore:
    def __init__(self, db: firestore.Client, ttl_days: int = 30):
        self.db = db
        self.ttl = timedelta(days=ttl_days)

    def ref(self, entry_id: str):
        return self.db.collection(DEADLETTERS).document(entry_id)

    def record(self, message: PubSubMessage, c: Classification) -> Recorded:
        """Store or update the entry (Transient when Firestore fails; Rejected when it never can)."""
        with fs.guard("Firestore write of dead letter"):
            return _record(self.db.transaction(max_attempts=5), self, message, c)

    def get(self, entry_id: str) -> dict[str, Any] | None:
        snap = self.ref(entry_id).get(**fs.read_options())
        return snap.to_dict() if snap.exists else None

    def starting_with(self, prefix: str, limit: int = 2) -> list[dict[str, Any]]:
        """Entries whose id starts with ``prefix`` (ids are lowercase hex), at most ``limit``."""
        collection = self.db.collection(DEADLETTERS)
        query = (collection.where(filter=FieldFilter("__name__", ">=", collection.document(prefix)))
                 .where(filter=FieldFilter("__name__", "<", collection.document(prefix + "g"))).limit(limit))
        return [snap.to_dict() for snap in query.stream(**fs.read_options())]

    def query(self, reason: str | None = None, provider: str | None = None, since: datetime | None = None,
              fingerprint: str | None = None) -> Iterator[dict[str, Any]]:
        q: Any = self.db.collection(DEADLETTERS)
        for field, value in (("reason", reason), ("provider", provider), ("fingerprint", fingerprint)):
            if value:
                q = q.where(filter=FieldFilter(field, "==", value))
        if since:
            q = q.where(filter=FieldFilter("lastSeen", ">=", timeutil.format(since)))
        for snap in q.stream(**fs.read_options()):
            yield snap.to_dict()

    def delete(self, entry_ids: list[str]) -> int:
        for start in range(0, len(entry_ids), 400):
            batch = self.db.batch()
            for entry_id in entry_ids[start:start + 400]:
                batch.delete(self.ref(entry_id))
            batch.commit()
        return len(entry_ids)


@firestore.transactional
def _record(tx: firestore.Transaction, store: DeadLetterStore, message: PubSubMessage,
            c: Classification) -> Recorded:
    ref = store.ref(entry_id_for(c))
    snap = ref.get(transaction=tx, retry=fs.RETRY, timeout=fs.TIMEOUT)
    now_dt = timeutil.now()
    now = timeutil.format(now_dt)
    if snap.exists:
        doc = snap.to_dict()
        deliveries = doc.get("deliveries", [])
        if message.message_id in deliveries:
            return Recorded.SEEN
        update: dict[str, Any] = {
            "lastSeen": now,
            "occurrences": doc.get("occurrences", 1) + 1,
            "deliveries": (deliveries + [message.message_id])[-MAX_REMEMBERED_DELIVERIES:],
            "expireAt": now_dt + store.ttl,
        }
        if c.replay_of:
            update["state"] = EntryState.REPLAY_FAILED.value
            detail, detail_json = _storable_map(c.detail)
            update["lastFailure"] = {"reason": c.reason, "message": c.message, "at": now,
                                     "detail": detail if detail_json is None else {"detail": detail_json}}
        tx.update(ref, update)
        return Recorded.UPDATED
    stored = message.data[:MAX_STORED_BYTES]
    attributes, attributes_json = _storable_map(message.attributes)
    detail, detail_json = _storable_map(c.detail)
    entry = {
        "id": ref.id,
        **{_camel(k): v for k, v in asdict(c).items() if k != "detail"},
        "detail": detail if detail_json is None else {"detail": detail_json},
        "data": stored,
        "dataTruncated": len(stored) < len(message.data),
        "size": len(message.data),
        "attributes": attributes,
        **({"attributesJson": attributes_json} if attributes_json else {}),
        "deadLetterMessageId": message.message_id,
        "deliveries": [message.message_id],
        "firstSeen": now,
        "lastSeen": now,
        "occurrences": 1,
        "attempts": 0,
        "replays": [],
        "state": (EntryState.REPLAY_FAILED if c.replay_of else EntryState.OPEN).value,
        "expireAt": now_dt + store.ttl,
    }
    tx.set(ref, entry)
    return Recorded.CREATED
