"""The dead-letter message format: the original, intact, plus why it failed.

Whoever rejects a message publishes its original data and attributes to the
dead-letter topic with ``dcm-*`` attributes added, so that replay can send
exactly what the provider sent. Pub/Sub's own dead-lettering (after max
delivery attempts) adds ``CloudPubSubDeadLetterSource*`` attributes instead.
"""

from __future__ import annotations

from typing import Mapping

import orjson

from . import limits
from .errors import Rejected
from .model import PubSubMessage

PREFIX = "dcm-"
REASON = "dcm-reason"
MESSAGE = "dcm-message"
DETAIL = "dcm-detail"
PROVIDER = "dcm-provider"
KEY = "dcm-key"
SOURCE_TOPIC = "dcm-source-topic"
ORIGINAL_MESSAGE_ID = "dcm-original-message-id"
ORIGINAL_PUBLISH_TIME = "dcm-original-publish-time"
REJECTED_BY = "dcm-rejected-by"
REJECTED_AT = "dcm-rejected-at"
REPLAY_OF = "dcm-replay-of"  # set by replay, kept through every later rejection
REPLAYED_AT = "dcm-replayed-at"  # when replay sent it back (a callback's retry period starts again there)
ATTRIBUTES_DROPPED = "dcm-attributes-dropped"  # originals left out to stay within Pub/Sub's 100 attributes

# Pub/Sub's own dead-letter attributes
PS_DELIVERY_COUNT = "CloudPubSubDeadLetterSourceDeliveryCount"
PS_SUBSCRIPTION = "CloudPubSubDeadLetterSourceSubscription"
PS_SUBSCRIPTION_PROJECT = "CloudPubSubDeadLetterSourceSubscriptionProject"
PS_PUBLISH_TIME = "CloudPubSubDeadLetterSourceTopicPublishTime"


def original_attributes(attributes: Mapping[str, str]) -> dict[str, str]:
    """The attributes as the provider sent them (our annotations and Pub/Sub's removed)."""
    return {k: v for k, v in attributes.items()
            if (not k.startswith(PREFIX) or k in (REPLAY_OF, REPLAYED_AT)) and not k.startswith("CloudPubSubDeadLetter")}


def rejection_attributes(message: PubSubMessage, exc: Rejected, rejected_by: str,
                         provider: str | None, now: str) -> dict[str, str]:
    """The original attributes plus ``dcm-*`` attributes saying who rejected it, when and why.

    Pub/Sub holds at most 100 attributes: when the original's and ours would exceed that, the
    originals that do not fit are left out and counted (``dcm-attributes-dropped``); such an
    entry cannot be replayed intact, and says so.
    """
    ours = {
        REASON: exc.reason.value,
        MESSAGE: exc.message,  # every value is clipped to Pub/Sub's 1,024 bytes where it is published
        DETAIL: orjson.dumps(exc.detail, default=str).decode(),
        SOURCE_TOPIC: message.topic or "",
        ORIGINAL_MESSAGE_ID: message.message_id,
        ORIGINAL_PUBLISH_TIME: message.publish_time or "",
        REJECTED_BY: rejected_by,
        REJECTED_AT: now,
    }
    if provider:
        ours[PROVIDER] = provider
    if exc.key:
        ours[KEY] = exc.key
    originals = original_attributes(message.attributes)
    room = limits.PUBSUB_MAX_ATTRIBUTES - len(ours)
    if len(originals) > room:
        kept = dict(sorted(originals.items())[: room - 1])
        ours[ATTRIBUTES_DROPPED] = str(len(originals) - len(kept))
        originals = kept
    return {**originals, **ours}
