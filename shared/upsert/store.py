"""The observed state in Firestore: one atomic commit per status update.

Collections:

- ``resources/{provider~type~id}``: the current observed state of a resource;
  ``resources/{..}/history/{dedupId}``: every update, applied or stale.
- ``events/{sha256(source, id)}``: the dedup ledger; ``expireAt`` carries the
  TTL policy (declared in Terraform). It also is the transactional outbox: the
  change event is written with the state and published after the commit. The
  first delivery does not spend a write on saying so: only a redelivery (the
  function may have died before publishing) publishes it again, same id, and
  then marks it ``changeAnnounced`` so later copies do not.
- ``duplicates/{ingressTopic~ingressMessageId}``: distinct duplicate
  publications (not redeliveries of one message), for stats.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Mapping

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.contracts import status_changed, timeutil
from shared.contracts.errors import Transient
from shared.contracts.status_changed import ChangeEvent
from shared.contracts.status_update import StatusUpdate
from shared.runtime import firestore as fs

RESOURCES = "resources"
HISTORY = "history"
LEDGER = "events"
DUPLICATES = "duplicates"

MAX_ATTEMPTS = 5
CONFLICTS = (gexc.AlreadyExists, gexc.FailedPrecondition, gexc.Conflict)


class Outcome(enum.StrEnum):
    """What became of one status update (stored in the ledger as ``outcome``)."""

    APPLIED = "applied"  # the resource now shows it
    STALE = "stale"  # older than what the resource shows: kept in history, announced as late
    DUPLICATE = "duplicate"  # this event (source + id) was processed before


class WriteOp(enum.Enum):
    CREATE = "create"  # must not exist
    UPDATE = "update"  # must be unchanged since read
    SET = "set"


@dataclass(frozen=True)
class _Write:
    op: WriteOp
    ref: Any
    data: dict[str, Any]
    update_time: Any = None


@dataclass(frozen=True)
class Result:
    outcome: Outcome
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

    def apply(self, update: StatusUpdate) -> Result:
        """Dedup, staleness check, upsert, history and outbox, committed atomically.

        Optimistic concurrency: read ledger entry and resource in one round trip,
        decide, commit one batch whose preconditions (ledger entry must not exist,
        resource unchanged since read) make it fail whole if anyone else wrote
        first; then read again and decide again. Half the emulator cost of a
        transaction (BeginTransaction + locks), with the same guarantees.
        """
        ledger_ref = self.db.collection(LEDGER).document(update.dedup_id)
        resource_ref = self.resource_ref(update.key.doc_id)
        for _ in range(MAX_ATTEMPTS):
            with fs.transient("Firestore write"):
                try:
                    snaps = {snap.reference.path: snap for snap in self.db.get_all(
                        [ledger_ref, resource_ref], retry=fs.RETRY, timeout=fs.TIMEOUT)}
                    result, writes = _decide(self, update, snaps[ledger_ref.path], snaps[resource_ref.path])
                    if writes:
                        self._commit(writes)
                    return result
                except CONFLICTS:
                    continue  # another delivery of this event, or another update of this resource, won
        raise Transient(f"{MAX_ATTEMPTS} conflicting writes in a row on {update.key}; Pub/Sub will redeliver")

    def _commit(self, writes: list[_Write]) -> None:
        batch = self.db.batch()
        for w in writes:
            if w.op is WriteOp.CREATE:
                batch.create(w.ref, w.data)
            elif w.op is WriteOp.UPDATE:
                batch.update(w.ref, w.data, option=self.db.write_option(last_update_time=w.update_time))
            else:
                batch.set(w.ref, w.data)
        batch.commit(retry=fs.RETRY, timeout=fs.TIMEOUT)

    def mark_change_announced(self, update: StatusUpdate) -> None:
        with fs.transient("Firestore update"):
            self.db.collection(LEDGER).document(update.dedup_id).update(
                {"changeAnnounced": True, "changeAnnouncedAt": timeutil.now_str()}, timeout=fs.TIMEOUT)


def _decide(store: StateStore, update: StatusUpdate, ledger: Any, current_snap: Any) -> tuple[Result, list[_Write]]:
    """What to write for this update, given what is stored: a pure decision, no I/O."""
    db = store.db
    ledger_ref, resource_ref = ledger.reference, current_snap.reference
    history_ref = resource_ref.collection(HISTORY).document(update.dedup_id)
    now_dt = timeutil.now()
    now = timeutil.format(now_dt)
    expire_at = now_dt + store.ttl

    writes: list[_Write] = []
    if ledger.exists:
        seen = ledger.to_dict()
        if seen.get("ingressMessageId") != update.ingress_message_id:
            duplicate_id = f"{update.ingress_topic}~{update.ingress_message_id}"  # message ids are per topic
            writes.append(_Write(WriteOp.SET, db.collection(DUPLICATES).document(duplicate_id), {
                "dedupId": update.dedup_id, "key": str(update.key), "eventId": update.event_id,
                "at": now, "expireAt": expire_at}))
        pending = seen.get("change") if not seen.get("changeAnnounced", True) else None
        return Result(Outcome.DUPLICATE, None, seen.get("status"),
                       ChangeEvent.from_record(pending) if pending else None), writes

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
            return Result(Outcome.DUPLICATE, None, current["status"], None), []
        late = status_changed.build(update, None, new_doc, late=True)
        return Result(Outcome.STALE, current["status"], update.status, late), [
            _Write(WriteOp.CREATE, ledger_ref, {**ledger_doc, "outcome": Outcome.STALE.value,
                                                "change": late.to_record(), "changeAnnounced": False}),
            _Write(WriteOp.SET, history_ref, {**history, "outcome": Outcome.STALE.value}),
        ]

    same_status = current is not None and current.get("status") == update.status
    if same_status and not update.transition_reported:
        # A report of the same status without a transition time is no transition: keep the stored one.
        new_doc["lastTransitionTime"] = current["lastTransitionTime"]
    change = None
    if not same_status or new_doc["lastTransitionTime"] != current.get("lastTransitionTime"):
        # A real change: a new status, or the same status re-entered at a reported time (a restart).
        change = status_changed.build(update, current, new_doc, late=False)
    new_doc["createdAt"] = current.get("createdAt", now) if current else now
    new_doc["updates"] = (current.get("updates", 0) if current else 0) + 1
    resource_write = (_Write(WriteOp.UPDATE, resource_ref, new_doc, current_snap.update_time) if current
                      else _Write(WriteOp.CREATE, resource_ref, new_doc))
    return Result(Outcome.APPLIED, current.get("status") if current else None, update.status, change), [
        _Write(WriteOp.CREATE, ledger_ref, {**ledger_doc, "outcome": Outcome.APPLIED.value,
                                            "change": change.to_record() if change else None,
                                            "changeAnnounced": change is None}),
        resource_write,
        _Write(WriteOp.SET, history_ref, {**history, "outcome": Outcome.APPLIED.value}),
    ]
