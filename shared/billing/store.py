"""Billing's own Firestore collections: the transition set of every resource.

- ``billing_resources/{provider~type~id}``: identity, ``tenants`` (every tenant
  label seen, for filtering), ``firstAtUs`` / ``lastAtUs`` (earliest / latest
  transition time, µs since the epoch);
- ``billing_resources/{..}/transitions/{changeEventId}``: one document per
  change event: status, at (= newTransitionTime, canonical), labels, late,
  and ``oldSide``: the old side of the change (oldStatus since
  oldTransitionTime, see ``implied_document``), which readers see as a
  transition of its own, ``{changeEventId}~old``. One document, not two:
  a Firestore write less per change (benchmarks/cost.py).

Every write is idempotent and commutative, so at-least-once delivery in any
order converges to the same documents: the transition is keyed by the change
event's id (a redelivery rewrites the same document) and the resource
document only takes ``merge`` writes of constant fields and the
ArrayUnion / Minimum / Maximum transforms. No transaction, no read before
write, no hot document: one small batch per change event.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterator

from dcm_status_contracts import timeutil
from dcm_status_contracts.status_changed import Change
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.billing.intervals import Transition, microseconds
from shared.runtime import firestore as fs

BILLING_RESOURCES = "billing_resources"
TRANSITIONS = "transitions"
IMPLIED_SUFFIX = "~old"  # id suffix of the transition implied by a change's old side
OLD_SIDE = "oldSide"  # the field of a transition document that holds it
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def epoch_us(dt: datetime) -> int:
    return microseconds(dt - EPOCH)


def transition_document(change: Change, now: str) -> dict[str, Any]:
    return {
        "status": change.new_status,
        "at": change.at,
        "atUs": epoch_us(timeutil.parse(change.at)),
        "observedAt": change.observed_at,
        "publishedAt": change.published_at,
        "eventId": change.event_id,
        "implied": False,
        "oldStatus": change.old_status,
        "late": change.late,
        "labels": dict(change.labels),
        "key": change.key,
        "provider": change.provider,
        "resourceType": change.resource_type,
        "recordedAt": now,
    }


def implied_document(change: Change, now: str) -> tuple[str, dict[str, Any]] | None:
    """The old side of a change, as a transition of its own: ``(doc id, document)``.

    A change ``old -> new`` also says "the resource was ``oldStatus`` from
    ``oldTransitionTime`` on" (what upsert held). Usually that repeats a
    transition billing already has; it matters when the old state was stored
    without a change event of its own: a report with the *same* status but a
    later transition time (RUNNING 10:00, RUNNING again 13:00 after a stop
    at 12:30 that arrived late) is not a status change for upsert. Late
    events carry no old side. Ties at the same instant go to real transitions
    (an implied one has the empty ``observedAt``, which sorts first).
    """
    if change.late or not change.old_status or not change.old_at:
        return None
    doc_id = change.event_id + IMPLIED_SUFFIX
    return doc_id, {
        "status": change.old_status,
        "at": change.old_at,
        "atUs": epoch_us(timeutil.parse(change.old_at)),
        "observedAt": "",
        "eventId": change.event_id,
        "implied": True,
        "oldStatus": None,
        "late": False,
        "labels": dict(change.old_labels or {}),
        "key": change.key,
        "provider": change.provider,
        "resourceType": change.resource_type,
        "recordedAt": now,
    }


def resource_update(change: Change, now: str) -> dict[str, Any]:
    times = [epoch_us(timeutil.parse(change.at))]
    if change.old_at and not change.late:
        times.append(epoch_us(timeutil.parse(change.old_at)))
    doc: dict[str, Any] = {
        "key": change.key,
        "provider": change.provider,
        "resourceType": change.resource_type,
        "resourceId": change.resource_id,
        "firstAtUs": firestore.Minimum(min(times)),
        "lastAtUs": firestore.Maximum(max(times)),
        "updatedAt": now,
    }
    if change.labels.get("tenant"):
        doc["tenants"] = firestore.ArrayUnion([change.labels["tenant"]])
    return doc


class BillingStore:
    def __init__(self, db: firestore.Client):
        self.db = db

    def resource_ref(self, doc_id: str):
        return self.db.collection(BILLING_RESOURCES).document(doc_id)

    def record(self, change: Change) -> None:
        """Store one change (idempotent); Transient when Firestore fails."""
        now = timeutil.now_str()
        ref = self.resource_ref(change.doc_id)
        batch = self.db.batch()
        doc = transition_document(change, now)
        implied = implied_document(change, now)
        if implied:
            doc[OLD_SIDE] = implied[1]
        batch.set(ref.collection(TRANSITIONS).document(change.event_id), doc)
        batch.set(ref, resource_update(change, now), merge=True)
        with fs.guard("Firestore batch"):
            batch.commit(timeout=fs.TIMEOUT)

    # ---- read side -------------------------------------------------------------
    def resources(self, provider: str | None = None, resource_type: str | None = None,
                  tenant: str | None = None) -> Iterator[dict[str, Any]]:
        """Billing resources (with their document ``id``), optionally filtered."""
        query: Any = self.db.collection(BILLING_RESOURCES)
        if provider:
            query = query.where(filter=FieldFilter("provider", "==", provider))
        if resource_type:
            query = query.where(filter=FieldFilter("resourceType", "==", resource_type))
        if tenant:
            query = query.where(filter=FieldFilter("tenants", "array_contains", tenant))
        for snap in query.stream(retry=fs.RETRY, timeout=30):
            yield {"id": snap.id, **snap.to_dict()}

    def transition_documents(self, doc_id: str) -> list[dict[str, Any]]:
        """The transitions of one resource, each with its ``id``: a change's old side as one of its own
        (``implied``, id ``{changeEventId}~old``)."""
        ref = self.resource_ref(doc_id).collection(TRANSITIONS)
        out = []
        for snap in ref.stream(retry=fs.RETRY, timeout=30):
            doc = {"id": snap.id, **snap.to_dict()}
            old = doc.pop(OLD_SIDE, None)
            out.append(doc)
            if old:
                out.append({"id": snap.id + IMPLIED_SUFFIX, **old})
        return out

    def transitions(self, doc_id: str) -> list[Transition]:
        return [to_transition(d) for d in self.transition_documents(doc_id)]

    def stored_changes(self) -> int:
        """Change events stored: an aggregation query."""
        return int(self.db.collection_group(TRANSITIONS).count().get()[0][0].value)


def to_transition(doc: dict[str, Any]) -> Transition:
    """A stored transition document (with its ``id``) as an interval-arithmetic Transition."""
    return Transition(timeutil.parse(doc["at"]), doc["status"], doc.get("id") or doc["eventId"],
                      doc.get("observedAt", ""), dict(doc.get("labels") or {}), doc.get("publishedAt") or "")
