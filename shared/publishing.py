"""Publish to Pub/Sub and wait for the server's ack, or raise Transient.

With message ordering on, a failed publish pauses its ordering key in the
client; we resume it before raising so the redelivered message can go out.
"""

from __future__ import annotations

from typing import Mapping

from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1

from shared.errors import Transient

PUBLISH_TIMEOUT_SECONDS = 30.0
MAX_ATTRIBUTE_VALUE_BYTES = 1024


def clip(value: str, limit: int = MAX_ATTRIBUTE_VALUE_BYTES) -> str:
    """A Pub/Sub attribute value fits in 1024 bytes: cut on a character boundary."""
    encoded = value.encode()
    if len(encoded) <= limit:
        return value
    return encoded[: limit - 3].decode(errors="ignore") + "..."


def publish(client: pubsub_v1.PublisherClient, topic_path: str, data: bytes,
            attributes: Mapping[str, str], ordering_key: str = "") -> str:
    """Publish one message; return its message id once the server has it."""
    try:
        future = client.publish(topic_path, data, ordering_key=ordering_key, **dict(attributes))
        return future.result(timeout=PUBLISH_TIMEOUT_SECONDS)
    except (gexc.GoogleAPIError, TimeoutError, pubsub_v1.publisher.exceptions.PublishError) as exc:
        if ordering_key:
            client.resume_publish(topic_path, ordering_key)
        raise Transient(f"publish to {topic_path} failed: {exc}") from exc
