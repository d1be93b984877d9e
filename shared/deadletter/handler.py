"""The dead-letter use case: classify and store everything that failed.

Only a Firestore outage raises (``Transient``: its subscription retries, and has
no dead-letter policy of its own, so it can never loop into itself). A dead
letter triage cannot read is stored as ``unclassified`` with the error; one
Firestore refuses even then (``Rejected``, unstorable) is logged and acked by the
entry point (the archive subscription keeps every dead letter for its retention
period). Nothing here retries forever.
"""

from __future__ import annotations

from dcm_status_contracts import ingress
from dcm_status_contracts.model import PubSubMessage

from shared.deadletter.store import DeadLetterStore, Recorded
from shared.deadletter.triage import classify, unclassifiable
from shared.runtime.clients import Runtime
from shared.runtime.logs import get_logger

log = get_logger("deadletter")


class DeadLetter:
    def __init__(self, store: DeadLetterStore, origins: ingress.Origins = ingress.Origins()):
        self.store = store
        self.origins = origins

    @classmethod
    def build(cls, runtime: Runtime) -> "DeadLetter":
        return cls(DeadLetterStore(runtime.firestore, runtime.settings.deadletter_ttl_days),
                   runtime.settings.origins)

    def __call__(self, message: PubSubMessage) -> Recorded:
        try:
            c = classify(message, self.origins)
        except Exception as exc:  # noqa: BLE001 - a dead letter is never retried for a bug in triage
            log.exception("triage failed; stored as unclassified", extra={"messageId": message.message_id})
            c = unclassifiable(message, exc)
        result = self.store.record(message, c)
        log.warning("dead letter %s: %s", c.reason, c.message, extra={
            "labels": {"reason": c.reason, "provider": c.provider or "unknown", "stored": result.value},
            "fingerprint": c.fingerprint, "key": c.key, "replayOf": c.replay_of, "messageId": message.message_id})
        return result
