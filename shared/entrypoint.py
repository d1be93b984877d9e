"""The one wrapper every function uses: decode -> handle -> ack or raise.

- return            -> HTTP 200 -> Pub/Sub acks;
- raise Rejected    -> the message can never succeed: the original goes to the
  dead-letter topic with its reason, then we ack;
- raise (any other) -> HTTP 500 -> Pub/Sub redelivers (Transient, or a bug:
  logged with its stack; after max delivery attempts Pub/Sub dead-letters the
  message as ``delivery_exhausted``, never lost).

A CloudEvent delivered straight over HTTP (not through Pub/Sub) is turned into
the structured-mode message it would have been, with no topic.
"""

from __future__ import annotations

import base64
import functools
from typing import Any, Callable

import orjson

from shared import auth, dead_letters
from shared.errors import Rejected, Transient
from shared.logs import get_logger
from shared.model import PubSubMessage
from shared.pubsub_push import is_pubsub_event, message_from_event

log = get_logger("entrypoint")


def to_message(event: Any) -> PubSubMessage:
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


def pubsub_function(name: str, dead_letter_rejections: bool = True
                    ) -> Callable[[Callable[[PubSubMessage], None]], Callable[[Any], None]]:
    """Wrap a handler of PubSubMessage as a CloudEvent function.

    ``dead_letter_rejections=False`` is for the dead-letter function itself:
    it must never publish into its own topic, so everything it cannot handle
    is raised and retried.
    """

    def wrap(handler: Callable[[PubSubMessage], None]) -> Callable[[Any], None]:
        @functools.wraps(handler)
        def entry(event: Any) -> None:
            auth.verify_push_request()
            try:
                message = to_message(event)
            except Rejected as exc:
                log.error("delivery is not a Pub/Sub message: %s", exc.message, extra={
                    "labels": {"function": name, "reason": exc.reason.value}, "detail": exc.detail})
                raise
            try:
                handler(message)
            except Rejected as exc:
                if not dead_letter_rejections:
                    log.error("cannot handle message: %s", exc.message, extra={
                        "labels": {"function": name, "reason": exc.reason.value}, "messageId": message.message_id})
                    raise
                dead_letters.publish_rejection(message, exc, rejected_by=name)
            except Transient as exc:
                log.warning("transient failure, Pub/Sub will redeliver", extra={
                    "labels": {"function": name}, "messageId": message.message_id, "error": str(exc)})
                raise
            except Exception:
                log.exception("unexpected failure, Pub/Sub will redeliver", extra={
                    "labels": {"function": name}, "messageId": message.message_id})
                raise
        return entry
    return wrap
