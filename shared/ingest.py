"""The ingest use case: validate and normalise, then forward.

A Rejected raised here reaches the entry point, which dead-letters the
original message with the reason and acks it (shared/entrypoint.py).
"""

from __future__ import annotations

import orjson

from shared import clients
from shared.config import settings
from shared.logs import get_logger
from shared.model import PubSubMessage
from shared.normalize import normalize_message
from shared.publishing import publish

log = get_logger("ingest")


def handle(message: PubSubMessage) -> None:
    s = settings()
    update = normalize_message(message, s)
    publish(clients.publisher_client(), s.topic_path(s.topic_normalized), orjson.dumps(update.to_dict()),
            {"key": str(update.key)[:1000], "provider": update.key.provider,
             "resourceType": update.key.resource_type, "status": update.status},
            ordering_key=str(update.key))
    log.info("event accepted", extra={
        "labels": {"provider": update.key.provider, "resourceType": update.key.resource_type},
        "key": str(update.key), "status": update.status, "eventId": update.event_id})
