"""Turn what functions-framework hands a CloudEvent function into a PubSubMessage.

A delivery that is not a Pub/Sub message (no ``message`` object, data not
base64) raises ``Rejected(malformed_push)``: retrying it can never help.

Pub/Sub push (the raw ``{message, subscription}`` body) and Eventarc deliveries
both arrive as a ``google.cloud.pubsub.topic.v1.messagePublished`` CloudEvent
whose source is ``//pubsub.googleapis.com/projects/P/topics/T`` (for raw push,
only when the push endpoint path carries ``/projects/P/topics/T``).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Mapping

import orjson
from dcm_status_contracts.errors import Reason, Rejected
from dcm_status_contracts.model import PubSubMessage

PUBSUB_EVENT_TYPE = "google.cloud.pubsub.topic.v1.messagePublished"
_SOURCE_PREFIX = "//pubsub.googleapis.com/"


def topic_from_source(source: str | None) -> str | None:
    """Short topic name from ``//pubsub.googleapis.com/projects/P/topics/T``."""
    if not source or not source.startswith(_SOURCE_PREFIX):
        return None
    parts = source[len(_SOURCE_PREFIX):].split("/")
    if len(parts) == 4 and parts[0] == "projects" and parts[2] == "topics" and parts[3]:
        return parts[3]
    return None


def is_pubsub_event(attributes: Mapping[str, Any]) -> bool:
    return attributes.get("type") == PUBSUB_EVENT_TYPE


def message_from_event(attributes: Mapping[str, Any], data: Any) -> PubSubMessage:
    """Decode a messagePublished CloudEvent (attributes + data) into a PubSubMessage."""
    message = data.get("message") if isinstance(data, Mapping) else None
    if not isinstance(message, Mapping):
        raise Rejected(Reason.MALFORMED_PUSH, "Pub/Sub delivery without a 'message' object")
    try:
        raw = base64.b64decode(message.get("data") or "", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise Rejected(Reason.MALFORMED_PUSH, f"Pub/Sub message data is not base64: {exc}") from exc
    attrs = message.get("attributes") or {}
    return PubSubMessage(
        data=raw,
        attributes={str(k): str(v) for k, v in attrs.items()},
        message_id=str(message.get("messageId") or message.get("message_id") or attributes.get("id") or ""),
        publish_time=message.get("publishTime") or message.get("publish_time") or attributes.get("time"),
        topic=topic_from_source(attributes.get("source")),
    )


def from_push_request(event: Any) -> PubSubMessage:
    """The Pub/Sub message a delivered CloudEvent carries.

    A CloudEvent delivered straight over HTTP (not through Pub/Sub) is turned into
    the structured-mode message it would have been, with no topic.
    """
    attributes = event.get_attributes()
    if is_pubsub_event(attributes):
        return message_from_event(attributes, event.data)
    doc = dict(attributes)
    if isinstance(event.data, (bytes, bytearray)):
        doc["data_base64"] = base64.b64encode(event.data).decode()
    else:
        doc["data"] = event.data
    return PubSubMessage(data=orjson.dumps(doc), attributes={}, message_id=str(attributes.get("id", "")),
                         publish_time=attributes.get("time"), topic=None)
