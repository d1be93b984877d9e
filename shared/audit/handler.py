"""The audit consumer: a log of every "instance stopped" change.

Proof of the extensibility claim: this consumer needed one entry in
``infra/topology.yaml`` (a function and a subscription on the changed topic
with ``filter: 'attributes.newStatus = "STOPPED"'``) and no change to any
provider or core function.

The filter is an optimisation, not a guarantee: the Pub/Sub emulator ignores
subscription filters, and a message could reach the function another way
(replay, manual push). So the condition is checked again here, on the event
data (authoritative), not on the attributes.

It also records every provider-level event (a provider silent as a whole, then reporting again:
shared/contracts/provider_event.py), from its own subscription on ``dcm-status-providers``, in
``audit_providers/{provider~state~since}``.

``audit_stopped/{changeEventId}`` is written with ``create``: a redelivery
finds the document and is a no-op, so the first record (and its
``recordedAt``) is kept. A late STOPPED (``late=true``) is recorded too: the
resource did stop at that time, upsert only refused it as the *current* state.
"""

from __future__ import annotations

import enum
from typing import Any

from dcm_status_contracts import provider_event, status_changed, timeutil
from dcm_status_contracts.model import PubSubMessage
from dcm_status_contracts.provider_event import ProviderTransition
from dcm_status_contracts.status_changed import ChangeEventView
from google.api_core import exceptions as gexc

from shared.runtime import firestore as fs
from shared.runtime.clients import Runtime
from shared.runtime.logs import get_logger

COLLECTION = "audit_stopped"
PROVIDER_COLLECTION = "audit_providers"
STATUS = "STOPPED"

log = get_logger("audit")


class Audited(enum.StrEnum):
    RECORDED = "recorded"
    DUPLICATE = "duplicate"  # a redelivery: the first record is kept
    IGNORED = "ignored"  # not a stop (the subscription filter is not enforced everywhere)


def record_of(change: ChangeEventView, now: str) -> dict[str, Any]:
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


class Audit:
    def __init__(self, db, providers_topic: str = "dcm-status-providers"):
        self.db = db
        self.providers_topic = providers_topic

    @classmethod
    def build(cls, runtime: Runtime) -> "Audit":
        return cls(runtime.firestore, runtime.settings.topic_providers)

    def __call__(self, message: PubSubMessage) -> Audited:
        """Rejected (dead-lettered by the entry point) if the message is not the event its topic carries."""
        if message.topic == self.providers_topic:
            return self.record_provider(provider_event.from_message(message))
        change = status_changed.from_message(message)
        if change.new_status != STATUS or not change.transition:  # the emulator ignores the subscription filter;
            log.info("change ignored: not %s", STATUS, extra={  # new outputs of a stopped resource are no stop
                "labels": {"outcome": Audited.IGNORED.value}, "eventId": change.event_id, "key": change.key,
                "status": change.new_status})
            return Audited.IGNORED
        outcome = self.record(change)
        log.info("stop %s", outcome.value, extra={
            "labels": {"outcome": outcome.value, "provider": change.provider, "resourceType": change.resource_type},
            "eventId": change.event_id, "key": change.key, "at": change.at, "late": change.late})
        return outcome

    def record(self, change: ChangeEventView) -> Audited:
        return self._create(self.db.collection(COLLECTION).document(change.event_id),
                            record_of(change, timeutil.now_str()))

    def record_provider(self, event: ProviderTransition) -> Audited:
        doc_id = "~".join((event.provider, event.state.value, event.since))
        outcome = self._create(self.db.collection(PROVIDER_COLLECTION).document(doc_id),
                               {**event.to_dict(), "eventId": event.event_id, "recordedAt": timeutil.now_str()})
        log.info("provider %s %s", event.state.value, outcome.value, extra={
            "labels": {"outcome": outcome.value, "provider": event.provider}, "eventId": event.event_id,
            "since": event.since})
        return outcome

    def _create(self, ref, record: dict[str, Any]) -> Audited:
        try:
            with fs.guard("Firestore create"):
                ref.create(record, timeout=fs.TIMEOUT)
        except gexc.AlreadyExists:
            return Audited.DUPLICATE
        return Audited.RECORDED
