"""The ingest use case: validate and normalise, forward or dead-letter."""

from __future__ import annotations

import orjson

from shared import dead_letters
from shared.clients import publisher_client
from shared.config import settings
from shared.errors import Rejected
from shared.logs import get_logger
from shared.model import PubSubMessage
from shared.normalize import normalize_message
from shared.publishing import publish

log = get_logger("ingest")


def handle(message: PubSubMessage) -> None:
    s = settings()
    topic_provider = s.provider_of_topic(message.topic) if message.topic else None
    try:
        update = normalize_message(message, s)
    except Rejected as exc:
        attributes = dead_letters.rejection_attributes(message, exc, "ingest", topic_provider)
        publish(publisher_client(), s.topic_path(s.topic_deadletter), message.data, attributes)
        log.warning("event rejected: %s", exc.message, extra={
            "labels": {"reason": exc.reason.value, "provider": topic_provider or "unknown"},
            "messageId": message.message_id, "detail": exc.detail, "key": exc.key})
        return
    publish(publisher_client(), s.topic_path(s.topic_normalized), orjson.dumps(update.to_dict()),
            {"key": str(update.key)[:1000], "provider": update.key.provider,
             "resourceType": update.key.resource_type, "status": update.status},
            ordering_key=str(update.key))
    log.info("event accepted", extra={
        "labels": {"provider": update.key.provider, "resourceType": update.key.resource_type},
        "key": str(update.key), "status": update.status, "eventId": update.event_id})
