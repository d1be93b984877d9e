"""Read side: look resources up, list them, count outcomes."""

from __future__ import annotations

from typing import Any, Iterator

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.contracts.model import ResourceKey
from shared.runtime import firestore as fs
from shared.upsert.store import DUPLICATES, HISTORY, LEDGER, RESOURCES, Outcome


def get_resource(db: firestore.Client, key: ResourceKey) -> dict[str, Any] | None:
    snap = db.collection(RESOURCES).document(key.doc_id).get(**fs.read_options())
    return snap.to_dict() if snap.exists else None


def history(db: firestore.Client, key: ResourceKey, limit: int = 50) -> list[dict[str, Any]]:
    ref = db.collection(RESOURCES).document(key.doc_id).collection(HISTORY)
    docs = ref.order_by("observedAt", direction=firestore.Query.DESCENDING).limit(limit).stream(**fs.read_options())
    return [d.to_dict() for d in docs]


def list_resources(db: firestore.Client, provider: str | None = None, resource_type: str | None = None,
                   status: str | None = None, limit: int | None = None) -> Iterator[dict[str, Any]]:
    query: Any = db.collection(RESOURCES)
    for field, value in (("provider", provider), ("resourceType", resource_type), ("status", status)):
        if value:
            query = query.where(filter=FieldFilter(field, "==", value))
    if limit:
        query = query.limit(limit)
    for doc in query.stream(**fs.read_options()):
        yield doc.to_dict()


def count(query: Any) -> int:
    """A server-side count (an aggregation query: no documents are read)."""
    result = query.count().get(**fs.read_options())
    return int(result[0][0].value)


def outcome_counts(db: firestore.Client) -> dict[str, int]:
    """Updates per outcome over the ledger's retention window, and the resources held."""
    ledger = db.collection(LEDGER)
    return {
        Outcome.APPLIED.value: count(ledger.where(filter=FieldFilter("outcome", "==", Outcome.APPLIED.value))),
        Outcome.UNCHANGED.value: count(ledger.where(filter=FieldFilter("outcome", "==", Outcome.UNCHANGED.value))),
        Outcome.STALE.value: count(ledger.where(filter=FieldFilter("outcome", "==", Outcome.STALE.value))),
        Outcome.DUPLICATE.value: count(db.collection(DUPLICATES)),
        "resources": count(db.collection(RESOURCES)),
    }


def announced_changes(db: firestore.Client) -> int:
    """Ledger entries that carry a change event (what upsert announced in the retention window)."""
    return count(db.collection(LEDGER).where(filter=FieldFilter("change", "!=", None)))


def status_counts(db: firestore.Client) -> dict[str, dict[str, int]]:
    """{resourceType: {status: n}} over all resources."""
    table: dict[str, dict[str, int]] = {}
    for doc in db.collection(RESOURCES).select(["resourceType", "status"]).stream(**fs.read_options()):
        d = doc.to_dict()
        per_type = table.setdefault(d["resourceType"], {})
        per_type[d["status"]] = per_type.get(d["status"], 0) + 1
    return table
