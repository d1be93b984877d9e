"""The dead-letter use case: classify and store everything that failed.

This function's own failures raise and are retried by its subscription, which
has no dead-letter policy of its own: it can never loop into itself.
"""

from __future__ import annotations

from shared.contracts.model import PubSubMessage
from shared.deadletter.store import DeadLetterStore, Recorded
from shared.deadletter.triage import classify
from shared.runtime.clients import Runtime
from shared.runtime.logs import get_logger

log = get_logger("deadletter")


class DeadLetter:
    def __init__(self, store: DeadLetterStore):
        self.store = store

    @classmethod
    def build(cls, runtime: Runtime) -> "DeadLetter":
        return cls(DeadLetterStore(runtime.firestore, runtime.settings.deadletter_ttl_days))

    def __call__(self, message: PubSubMessage) -> Recorded:
        c = classify(message)
        result = self.store.record(message, c)
        log.warning("dead letter %s: %s", c.reason, c.message, extra={
            "labels": {"reason": c.reason, "provider": c.provider or "unknown", "stored": result.value},
            "fingerprint": c.fingerprint, "key": c.key, "replayOf": c.replay_of, "messageId": message.message_id})
        return result
