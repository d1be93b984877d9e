"""A resource's newest state as the functions read it from Firestore.

Its document, unless it is hot (``hot``: its updates coalesce, shared/upsert/store.py): then its
latest ledger entries may carry a newer state (``state``) the document has not been written with yet.
One indexed read (ledger: key ==, processedAt desc), only for a hot resource.
"""

from __future__ import annotations

from typing import Any, Mapping

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.state.model import LEDGER, SHARD, SHARD_SPACE, newest_state

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


def in_every_shard(query: Any) -> Any:
    """``query`` over every shard at once (``shard in SHARD_SPACE``): Firestore merges the shards' index
    ranges in the query's order, so its results and cursors are those of one unsharded index
    (shared/state/model.py says why the sequential fields are sharded)."""
    return query.where(filter=FieldFilter(SHARD, "in", list(SHARD_SPACE)))
