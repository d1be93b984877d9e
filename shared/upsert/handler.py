"""The upsert use case: apply a normalised update, then announce the change.

The change event is stored with the state (transactional outbox) and
published after the commit. If the function dies in between, the message is
not acked, Pub/Sub redelivers it, the ledger says "duplicate" and the stored
change event is published then (once: it is then marked announced). Change
events keep their id across these re-publications, so consumers deduplicate
them.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Callable, Mapping

from dcm_status_contracts import status_changed, status_update, timeutil
from dcm_status_contracts.model import PubSubMessage
from dcm_status_contracts.status_changed import ChangeEvent
from dcm_status_contracts.status_update import StatusUpdate

from shared.callbacks.view import CallbackView
from shared.runtime.clients import Runtime
from shared.runtime.logs import get_logger
from shared.runtime.publishing import publish
from shared.state.documents import Outcome
from shared.upsert.decision import Result
from shared.upsert.store import StateStore

log = get_logger("upsert")
Wanted = Callable[[Mapping[str, str], bytes], bool]  # (change event attributes, body) -> may a callback want it


def stored_after_publish_ms(published_at: str | None, stored_at: datetime) -> float | None:
    """Milliseconds from the provider's publish on its ingress topic to this commit (the log field
    ``storedAfterPublishMs``, the distribution of terraform/monitoring.tf); None when the publish time is not
    known (an update the sweep synthesised)."""
    try:
        published = timeutil.parse(published_at) if published_at else None
    except ValueError:  # ingest writes it canonical; a bad one costs the figure, never the update
        return None
    return round((stored_at - published).total_seconds() * 1000, 1) if published else None


class Upsert:
    def __init__(self, store: StateStore, publisher, changed_topic: str,
                 wanted: Wanted | None = None):
        self.store = store
        self.publisher = publisher
        self.changed_topic = changed_topic
        # may a webhook callback want this change? (the event's ``notify`` attribute; None: always "maybe")
        self.wanted = wanted

    @classmethod
    def build(cls, runtime: Runtime) -> "Upsert":
        s = runtime.settings
        return cls(StateStore(runtime.firestore, s.ledger_ttl_days, s.stale_after, s.flapping, s.output_redaction,
                              stale_shards=s.stale_shards),
                   runtime.publisher, s.topic_path(s.topic_changed),
                   CallbackView(runtime.firestore, s.callback_view_ttl_seconds).wanted)

    def __call__(self, message: PubSubMessage) -> Result:
        return self.apply(status_update.from_bytes(message.data))

    def announced(self, change: ChangeEvent) -> dict[str, str]:
        """The change event's attributes as published: with ``notify`` ("0": no webhook callback can match
        it, and the notify subscription filters it out; decided now, also for a re-publication)."""
        wanted = True if self.wanted is None else self.wanted(change.attributes, change.body)
        return {**change.attributes,
                status_changed.NOTIFY_ATTRIBUTE: status_changed.NOTIFY_YES if wanted else status_changed.NOTIFY_NO}

    def apply(self, update: StatusUpdate) -> Result:
        started = time.perf_counter()
        result = self.store.apply(update)
        committed, stored_at = time.perf_counter(), timeutil.now()
        if result.change is not None:
            publish(self.publisher, self.changed_topic, result.change.body, self.announced(result.change))
            if result.outcome is Outcome.DUPLICATE:
                self.store.mark_change_announced(update, result.ledger_id)
        log.info("update %s", result.outcome.value, extra={
            "transactionMs": round((committed - started) * 1000, 1),
            "storedAfterPublishMs": stored_after_publish_ms(update.published_at, stored_at),
            "announceMs": round((time.perf_counter() - committed) * 1000, 1),
            "labels": {"outcome": result.outcome.value, "provider": update.key.provider,
                       "resourceType": update.key.resource_type},
            "key": str(update.key), "eventId": update.event_id, "status": update.status,
            "previousStatus": result.previous_status, "changePublished": result.change is not None})
        return result
