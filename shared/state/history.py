"""History written before issue 32, folded into the ledger (once, after the deploy that brings it).

Before, an applied or stale update wrote a history entry ``resources/{key}/history/{dedupId}`` beside its
ledger entry ``events/{dedupId}`` (which expired with the TTL). Now the ledger entry carries the history
fields and no ``expireAt`` (shared/state/documents.py), and the history API and ``?at=`` read the ledger by key.
``fold_history`` moves every old history entry there:

- its ledger entry still exists: the history fields (and the resource's ``shard``, which /v1/stats counts
  history entries by) are added and ``expireAt`` deleted (kept as history);
- it expired: a ledger entry is created with the history fields, the resource's key, and the entry's event
  identity (no change event, no change-feed fields: the feed never served it again, and a late redelivery of
  that event is found as a duplicate).

A ledger entry that has ``recordedAt`` already is history: left alone, so a rerun (after an interruption, or a
second run) folds nothing twice. The old entries stay where they are (nothing reads them once folded); delete
the subcollections when the API has been checked.
"""

from __future__ import annotations

from typing import Any, Mapping

from dcm_status_contracts.model import ResourceKey
from google.cloud import firestore

from shared.state.documents import HISTORY, HISTORY_FIELDS, LEDGER, SHARD, SHARDS, shard_of

FOLDED = "recordedAt"  # a ledger entry with it is history already


def fold_history(db: firestore.Client, page: int = 250, shards: int = SHARDS) -> dict[str, int]:
    """Fold every history entry of the old subcollections into its ledger entry; idempotent. Returns how
    many ledger entries it ``updated`` (existing), ``created`` (expired ones) and ``kept`` (history already).
    ``shards``: the upsert's (its ``shards``), for an entry without a change (a change entry has its shard)."""
    done = {"updated": 0, "created": 0, "kept": 0}
    after = None
    while True:
        query = db.collection_group(HISTORY).order_by("__name__").limit(page)
        read = list((query.start_after(after) if after else query).stream())
        snaps = [s for s in read if _is_old_history(s.reference)]
        refs = [db.collection(LEDGER).document(s.id) for s in snaps]
        ledger = {s.id: s for s in db.get_all(refs)} if refs else {}
        batch, writes = db.batch(), 0
        for snap in snaps:
            entry, existing = snap.to_dict() or {}, ledger.get(snap.id)
            stored = existing.to_dict() if existing is not None and existing.exists else None
            if stored is not None and FOLDED in stored:
                done["kept"] += 1
                continue
            ref = db.collection(LEDGER).document(snap.id)
            key = ResourceKey.from_doc_id(snap.reference.parent.parent.id)
            if stored is not None:  # update's precondition: it still exists (the TTL may delete it meanwhile)
                batch.update(ref, {**{f: entry[f] for f in HISTORY_FIELDS if f in entry},
                                   SHARD: stored.get(SHARD, shard_of(str(key), shards, SHARDS)),
                                   "expireAt": firestore.DELETE_FIELD})
                done["updated"] += 1
            else:
                batch.create(ref, created_entry(key, entry))
                done["created"] += 1
            writes += 1
        if writes:
            batch.commit()
        if len(read) < page:
            return done
        after = read[-1]


def _is_old_history(ref: Any) -> bool:
    """A ``resources/{key}/history/{id}`` entry (the collection group may hold another parent's ``history``)."""
    parent = ref.parent.parent
    return parent is not None and parent.parent.id == "resources" and parent.parent.parent is None


def created_entry(key: ResourceKey, entry: Mapping[str, Any]) -> dict[str, Any]:
    """The ledger entry of an old history entry whose own ledger entry expired."""
    return {"key": str(key), "provider": key.provider, "eventId": entry.get("eventId"),
            "source": entry.get("eventSource"), "processedAt": entry.get("recordedAt"),
            "status": entry.get("status"), "outcome": entry.get("outcome"),
            **{f: entry[f] for f in HISTORY_FIELDS if f in entry}}
