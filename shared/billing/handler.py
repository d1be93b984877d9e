"""The billing use case: record every status change as a transition of its resource.

Billing listens to the status-changed topic (the proposal's "Instance Stopped"
story: no new API from the core team). It stores transitions, not running
totals: the usage intervals are a pure function of the stored transition set
(``shared.state.usage.intervals``), computed when a report asks. That is what
makes billing correct under at-least-once delivery and out-of-order arrival:

- a redelivered change rewrites the same ``transitions/{changeEventId}``
  document, so it never counts twice;
- a late change (``late=true``: upsert refused it as stale for the current
  state, but it still happened at its time) is one more transition in the set
  and corrects the intervals it falls into on the next report;
- a resource still in a billable state is counted up to the report's end.

Ack/retry: Firestore failures raise ``Transient`` (Pub/Sub redelivers, then
dead-letters after max attempts); a message that can never be a valid change
event raises ``Rejected``: the entry point dead-letters it with its reason and
acks (``shared.runtime.entrypoint``).
"""

from __future__ import annotations

from dcm_status_contracts import status_changed
from dcm_status_contracts.model import CommonStatus, PubSubMessage
from dcm_status_contracts.status_changed import ChangeEventView

from shared.billing.store import BillingStore
from shared.runtime.clients import Runtime
from shared.runtime.logs import get_logger
from shared.state.documents import PlatformReason

log = get_logger("billing")


class Billing:
    def __init__(self, store: BillingStore):
        self.store = store

    @classmethod
    def build(cls, runtime: Runtime) -> "Billing":
        return cls(BillingStore(runtime.firestore))

    def __call__(self, message: PubSubMessage) -> ChangeEventView:
        return self.apply(status_changed.from_message(message))

    def apply(self, change: ChangeEventView) -> ChangeEventView:
        if change.new_status == CommonStatus.UNKNOWN and change.reason == PlatformReason.NOT_REPORTED:
            # The platform's "not reported lately" is no observed state: usage goes on as last known
            # until the provider reports again (then its report, at its own time, is the next transition).
            log.info("not reported lately: usage continues as last known", extra={
                "labels": {"provider": change.provider, "resourceType": change.resource_type},
                "key": change.key, "eventId": change.event_id, "lastKnown": change.old_status})
            return change
        if not change.transition:  # new output maps only (status-changed 1.3): usage is as it was
            return change
        self.store.record(change)
        log.info("transition recorded", extra={
            "labels": {"provider": change.provider, "resourceType": change.resource_type,
                       "late": str(change.late).lower()},
            "key": change.key, "eventId": change.event_id, "status": change.new_status,
            "previousStatus": change.old_status, "at": change.at})
        return change
