"""The observed state in Firestore: one transaction per status update.

Collections:

- ``resources/{provider~type~id}``: the current observed state of a resource;
  ``resources/{..}/history/{dedupId}``: every update, applied or stale.
- ``events/{sha256(source, id)}``: the dedup ledger; ``expireAt`` carries the
  TTL policy (declared in Terraform). It also is the transactional outbox: the
  change event is written with the state and published after the commit; a
  redelivery of the same event publishes it again until it is marked sent.
- ``duplicates/{ingressMessageId}``: distinct duplicate deliveries, for stats.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Mapping

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry
from google.cloud import firestore

from shared import change_events, timeutil
from shared.change_events import ChangeEvent
from shared.errors import Transient
from shared.model import StatusUpdate

RESOURCES = "resources"
HISTORY = "history"
LEDGER = "events"
DUPLICATES = "duplicates"

# Fail fast on an unreachable Firestore: the function raises and Pub/Sub redelivers.
READ_RETRY = gretry.Retry(initial=0.1, maximum=1.0, multiplier=2.0, timeout=8.0)
READ_TIMEOUT = 5.0
TRANSIENT_ERRORS = (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.InternalServerError,
                    gexc.Aborted, gexc.TooManyRequests, gexc.RetryError, gexc.Unknown,
                    gexc.ResourceExhausted, gexc.GatewayTimeout, TimeoutError, ConnectionError)



@dataclass(frozen=True)
class Outcome:
    kind: str  # "applied" | "stale" | "duplicate"
    previous_status: str | None
    status: str | None
    change: ChangeEvent | None  # to publish (new, or still pending from an earlier delivery)


def resource_document(update: StatusUpdate, now: str) -> dict[str, Any]:
    """The stored (and announced) view of a resource after this update."""
    return {
        "key": str(update.key),
        "provider": update.key.provider,
        "resourceType": update.key.resource_type,
        "resourceId": update.key.resource_id,
        "status": update.status,
        "rawStatus": update.raw_status,
        "statusRecognized": update.status_recognized,
        "message": update.message,
        "reason": update.reason,
        "lastTransitionTime": update.last_transition_time,
        "observedAt": update.observed_at,
        "metadata": dict(update.metadata),
        "resourceSpecific": dict(update.resource_specific),
        "eventId": update.event_id,
        "eventSource": update.event_source,
        "dataschema": update.dataschema,
        "updatedAt": now,
    }


def _order(doc: Mapping[str, Any]) -> tuple[str, str, str]:
    return (doc["observedAt"], doc["eventSource"], doc["eventId"])


class StateStore:
    def __init__(self, db: firestore.Client, ledger_ttl_days: int = 7):
        self.db = db
        self.ttl = timedelta(days=ledger_ttl_days)

    def resource_ref(self, doc_id: str):
        return self.db.collection(RESOURCES).document(doc_id)

    def apply(self, update: StatusUpdate) -> Outcome:
        """Dedup, staleness check, upsert, history and outbox in one transaction."""
        try:
            return _apply_in(self.db.transaction(max_attempts=5), self, update)
        except TRANSIENT_ERRORS as exc:
            raise Transient(f"Firestore transaction failed: {exc!r}") from exc

    def mark_change_sent(self, update: StatusUpdate) -> None:
        try:
            self.db.collection(LEDGER).document(update.dedup_id).update(
                {"changePending": False, "changeSentAt": timeutil.now_str()}, timeout=READ_TIMEOUT)
        except TRANSIENT_ERRORS as exc:
            raise Transient(f"Firestore update failed: {exc!r}") from exc


@firestore.transactional
def _apply_in(tx: firestore.Transaction, store: StateStore, update: StatusUpdate) -> Outcome:
    db = store.db
    ledger_ref = db.collection(LEDGER).document(update.dedup_id)
    resource_ref = store.resource_ref(update.key.doc_id)
    # Both reads in one round trip (snapshots come back in any order).
    snaps = {snap.reference.path: snap
             for snap in tx.get_all([ledger_ref, resource_ref], retry=READ_RETRY, timeout=READ_TIMEOUT)}
    ledger, current_snap = snaps[ledger_ref.path], snaps[resource_ref.path]
    now_dt = timeutil.now()
    now = timeutil.format(now_dt)
    expire_at = now_dt + store.ttl

    if ledger.exists:
        seen = ledger.to_dict()
        if seen.get("ingressMessageId") != update.ingress_message_id:
            tx.set(db.collection(DUPLICATES).document(update.ingress_message_id or update.dedup_id), {
                "dedupId": update.dedup_id, "key": str(update.key), "eventId": update.event_id,
                "at": now, "expireAt": expire_at})
        pending = seen.get("change") if seen.get("changePending") else None
        return Outcome("duplicate", None, seen.get("status"),
                       ChangeEvent.from_record(pending) if pending else None)

    current = current_snap.to_dict() if current_snap.exists else None
    new_doc = resource_document(update, now)
    history = {
        "status": update.status, "rawStatus": update.raw_status, "message": update.message,
        "reason": update.reason, "observedAt": update.observed_at,
        "lastTransitionTime": update.last_transition_time, "eventId": update.event_id,
        "eventSource": update.event_source, "recordedAt": now,
        "previousStatus": current.get("status") if current else None,
    }
    ledger_doc = {
        "key": str(update.key), "eventId": update.event_id, "source": update.event_source,
        "ingressMessageId": update.ingress_message_id, "processedAt": now, "expireAt": expire_at,
        "status": update.status, "replayOf": update.replay_of,
    }

    if current is not None and update.order <= _order(current):
        # Older than what we hold (or, once the ledger entry expired, the very same event).
        if update.order == _order(current):
            return Outcome("duplicate", None, current["status"], None)
        late = change_events.build(update, None, new_doc, late=True)
        tx.set(resource_ref.collection(HISTORY).document(update.dedup_id), {**history, "outcome": "stale"})
        tx.set(ledger_ref, {**ledger_doc, "outcome": "stale", "change": late.to_record(), "changePending": True})
        return Outcome("stale", current["status"], update.status, late)

    same_status = current is not None and current.get("status") == update.status
    if same_status and not update.transition_reported:
        # A report of the same status without a transition time is no transition: keep the stored one.
        new_doc["lastTransitionTime"] = current["lastTransitionTime"]
    change = None
    if not same_status or new_doc["lastTransitionTime"] != current.get("lastTransitionTime"):
        # A real change: a new status, or the same status re-entered at a reported time (a restart).
        change = change_events.build(update, current, new_doc, late=False)
    new_doc["createdAt"] = current.get("createdAt", now) if current else now
    new_doc["updates"] = (current.get("updates", 0) if current else 0) + 1
    tx.set(resource_ref, new_doc)
    tx.set(resource_ref.collection(HISTORY).document(update.dedup_id), {**history, "outcome": "applied"})
    tx.set(ledger_ref, {**ledger_doc, "outcome": "applied",
                        "change": change.to_record() if change else None, "changePending": change is not None})
    return Outcome("applied", current.get("status") if current else None, update.status, change)
