"""The dead-letter use case: classify and store everything that failed.

This function's own failures raise and are retried by its subscription, which
has no dead-letter policy of its own: it can never loop into itself.
"""

from __future__ import annotations

from shared import clients
from shared.config import settings
from shared.deadletter_store import DeadLetterStore
from shared.logs import get_logger
from shared.model import PubSubMessage
from shared.triage import classify

log = get_logger("deadletter")


def store() -> DeadLetterStore:
    return DeadLetterStore(clients.firestore_client(), settings().deadletter_ttl_days)


def handle(message: PubSubMessage) -> str:
    c = classify(message)
    result = store().record(message, c)
    log.warning("dead letter %s: %s", c.reason, c.message, extra={
        "labels": {"reason": c.reason, "provider": c.provider or "unknown", "stored": result},
        "fingerprint": c.fingerprint, "key": c.key, "replayOf": c.replay_of, "messageId": message.message_id})
    return result
