"""A resource's newest state as the functions read it from Firestore.

Its document, unless it is hot (``hot``: its updates coalesce, shared/upsert/decide.py): then its
latest ledger entries may carry a newer state (``state``) the document has not been written with yet.
One indexed read (ledger: key ==, processedAt desc), only for a hot resource.
"""

from __future__ import annotations

import heapq
from datetime import datetime
from itertools import islice
from typing import Any, Mapping, Sequence

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.state.documents import (
    COMMITTED_AT,
    LEDGER,
    MAX_IN,
    RESOURCE_SHARDS,
    RESOURCES,
    SHARD,
    SHARDS,
    STALE_SHARD,
    STALE_SHARDS,
    newest_state,
    shard_of,
    stale_shard_of,
)

# More than the updates of one resource ever decided at once. Hot deciders do not conflict (each writes its own
# ledger entry), so those that read before the newest state was committed leave entries with an older state,
# decided later (processedAt); a window no larger than their number can lose the newest state for good (each
# later decision carries the older one on). Production decides one at a time per resource (ordering key), the
# local stack at most two (pushes in flight per subscription), the functional race test six.
COALESCED_READ = 8


def coalesced_states(db: firestore.Client, key: str, **options: Any) -> list[dict[str, Any]]:
    """The states a hot resource's latest updates left on the ledger, processed last first."""
    query = (db.collection(LEDGER).where(filter=FieldFilter("key", "==", key))
             .order_by("processedAt", direction=firestore.Query.DESCENDING).limit(COALESCED_READ))
    return [d["state"] for d in (s.to_dict() for s in query.stream(**options)) if d.get("state")]


def newest(db: firestore.Client, doc: Mapping[str, Any] | None, **options: Any) -> Mapping[str, Any] | None:
    """The resource's newest state, given its document."""
    if not doc or not doc.get("hot"):
        return doc
    return newest_state(doc, coalesced_states(db, doc["key"], **options))


def shard_groups(query: Any, space: Sequence[int], shard_field: str = SHARD) -> list[Any]:
    """``query`` over every shard of ``space``: one query per MAX_IN shards (``shard_field in [...]``;
    Firestore merges those shards' index ranges in the query's order). Order, bound and limit each the
    same way, then ``merged`` (shared/state/documents.py says why the sequential fields are sharded)."""
    return [query.where(filter=FieldFilter(shard_field, "in", list(space[i:i + MAX_IN])))
            for i in range(0, len(space), MAX_IN)]


def merged(queries: Sequence[Any], field: str | None, descending: bool, limit: int, **options: Any) -> list[Any]:
    """The first ``limit`` snapshots of queries each ordered by (``field``, __name__), in that order: as
    one query over one index would give them (each query reads at most ``limit``)."""
    if len(queries) == 1:
        return list(queries[0].limit(limit).stream(**options))
    streams = [list(q.limit(limit).stream(**options)) for q in queries]
    key = (lambda s: (_order_of(s.get(field)), s.id)) if field else (lambda s: ((), s.id))
    return list(islice(heapq.merge(*streams, key=key, reverse=descending), limit))


def _order_of(value: Any) -> tuple[Any, ...]:
    """Firestore's order of values of mixed types: null, booleans, numbers, timestamps, strings."""
    if value is None:
        return (0,)
    for rank, kinds in ((1, bool), (2, (int, float)), (3, datetime), (4, str)):
        if isinstance(value, kinds):
            return (rank, value)
    return (9, repr(value))


def backfill_shards(db: firestore.Client, page: int = 500, stale_shards: int = STALE_SHARDS) -> dict[str, int]:
    """Give its shard fields to every document written before they existed (once, at the deploy that
    brings them: docs/scale.md): ``shard`` to every resource document and every ledger entry of the change
    feed (those with ``committedAt``), ``staleShard`` to every resource document. A document without one
    is in none of that field's indexes, so neither the sorted list nor the sweep nor the feed would find
    it. Idempotent (a document that has its fields is not written); returns how many documents of each
    collection it set."""
    fields = {RESOURCES: {SHARD: lambda key: shard_of(key, RESOURCE_SHARDS, RESOURCE_SHARDS),
                          STALE_SHARD: lambda key: stale_shard_of(key, stale_shards)},  # DCM_STALE_SHARDS
              LEDGER: {SHARD: lambda key: shard_of(key, SHARDS, SHARDS)}}
    return {collection: _backfill(db, collection, of, page) for collection, of in fields.items()}


def _backfill(db: firestore.Client, collection: str, fields: Mapping[str, Any], page: int) -> int:
    done, after = 0, None
    while True:
        query = db.collection(collection).order_by("__name__").limit(page)
        snaps = list((query.start_after(after) if after else query).stream())
        batch = db.batch()
        missing = []
        for snap in snaps:
            doc = snap.to_dict() or {}
            lacking = {name: of(doc["key"]) for name, of in fields.items() if name not in doc} \
                if _sharded(collection, doc) else {}
            if lacking:  # only those fields: the document's precondition is that it still exists
                batch.update(snap.reference, lacking)
                missing.append(snap)
        if missing:
            batch.commit()
        done += len(missing)
        if len(snaps) < page:
            return done
        after = snaps[-1]


def _sharded(collection: str, doc: Mapping[str, Any]) -> bool:
    """A document the sharded indexes must hold: a resource, or a change-feed entry."""
    return bool(doc.get("key")) and (collection != LEDGER or doc.get(COMMITTED_AT) is not None)
