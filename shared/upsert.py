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

import orjson

from shared import clients
from shared.config import settings
from shared.logs import get_logger
from shared.model import PubSubMessage, StatusUpdate
from shared.publishing import publish
from shared.state_store import Outcome, StateStore

log = get_logger("upsert")


def store() -> StateStore:
    return StateStore(clients.firestore_client(), settings().ledger_ttl_days)


def handle(message: PubSubMessage) -> Outcome:
    update = StatusUpdate.from_dict(orjson.loads(message.data))
    return apply(update, store())


def apply(update: StatusUpdate, state: StateStore) -> Outcome:
    s = settings()
    started = time.perf_counter()
    outcome = state.apply(update)
    committed = time.perf_counter()
    if outcome.change is not None:
        publish(clients.publisher_client(), s.topic_path(s.topic_changed), outcome.change.body,
                outcome.change.attributes, ordering_key="")
        if outcome.kind == "duplicate":
            state.mark_change_announced(update)
    log.info("update %s", outcome.kind, extra={
        "transactionMs": round((committed - started) * 1000, 1),
        "announceMs": round((time.perf_counter() - committed) * 1000, 1),
        "labels": {"outcome": outcome.kind, "provider": update.key.provider,
                   "resourceType": update.key.resource_type},
        "key": str(update.key), "eventId": update.event_id, "status": update.status,
        "previousStatus": outcome.previous_status, "changePublished": outcome.change is not None})
    return outcome
