"""The audit consumer: a log of every "instance stopped" change.

Proof of the extensibility claim: this consumer needed one entry in
``infra/topology.yaml`` (a function and a subscription on the changed topic
with ``filter: 'attributes.newStatus = "STOPPED"'``) and no change to any
provider or core function.

The filter is an optimisation, not a guarantee: the Pub/Sub emulator ignores
subscription filters, and a message could reach the function another way
(replay, manual push). So the condition is checked again here, on the event
data (authoritative), not on the attributes.

``audit_stopped/{changeEventId}`` is written with ``create``: a redelivery
finds the document and is a no-op, so the first record (and its
``recordedAt``) is kept. A late STOPPED (``late=true``) is recorded too: the
resource did stop at that time, upsert only refused it as the *current* state.
"""

from __future__ import annotations

from typing import Any

from google.api_core import exceptions as gexc

from shared import timeutil
from shared import clients
from shared.billing_events import Change, decode
from shared.errors import Transient
from shared.logs import get_logger
from shared.model import PubSubMessage
from shared.state_store import FIRESTORE_TIMEOUT, TRANSIENT_ERRORS

COLLECTION = "audit_stopped"
STATUS = "STOPPED"

log = get_logger("audit")


def record_of(change: Change, now: str) -> dict[str, Any]:
    return {
        "key": change.key,
        "at": change.at,
        "oldStatus": change.old_status,
        "provider": change.provider,
        "resourceType": change.resource_type,
        "resourceId": change.resource_id,
        "tenant": change.labels.get("tenant"),
        "late": change.late,
        "eventId": change.event_id,
        "recordedAt": now,
    }


def handle(message: PubSubMessage) -> str:
    """'recorded' | 'duplicate' | 'ignored'; Rejected (dead-lettered by the entry point) if not a change event."""
    change = decode(message)
    if change.new_status != STATUS:  # the emulator ignores the subscription filter
        log.info("change ignored: not %s", STATUS, extra={
            "labels": {"outcome": "ignored"}, "eventId": change.event_id, "key": change.key,
            "status": change.new_status})
        return "ignored"
    outcome = record(clients.firestore_client(), change)
    log.info("stop %s", outcome, extra={
        "labels": {"outcome": outcome, "provider": change.provider, "resourceType": change.resource_type},
        "eventId": change.event_id, "key": change.key, "at": change.at, "late": change.late})
    return outcome


def record(db, change: Change) -> str:
    ref = db.collection(COLLECTION).document(change.event_id)
    try:
        ref.create(record_of(change, timeutil.now_str()), timeout=FIRESTORE_TIMEOUT)
    except gexc.AlreadyExists:
        return "duplicate"
    except TRANSIENT_ERRORS as exc:
        raise Transient(f"Firestore create failed: {exc!r}") from exc
    return "recorded"
