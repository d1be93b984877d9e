"""The dead-letter message format: the original, intact, plus why it failed.

Whoever rejects a message publishes its original data and attributes to the
dead-letter topic with ``dcm-*`` attributes added, so that replay can send
exactly what the provider sent. Pub/Sub's own dead-lettering (after max
delivery attempts) adds ``CloudPubSubDeadLetterSource*`` attributes instead.

Every ``dcm-*`` attribute (and Pub/Sub's dead-letter ones) is the platform's: a
provider proves nothing but its ingress topic, so what it sets under those names
is never read; replay markers (``REPLAY_MARKERS``) are trusted only on messages
from the replay topic (the ingress trust rules: ``dcm_status_contracts.ingress``).
"""

from __future__ import annotations

from typing import Mapping

import orjson

from . import limits
from .errors import Rejected
from .model import PubSubMessage

ATTRIBUTE_PREFIX = "dcm-"
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
REPLAY_ATTEMPT = "dcm-replay-attempt"  # which replay of its entry this is
REPLAY_TOPIC = "dcm-replay-topic"  # on the replay topic: the ingress topic (so the provider) the message is for
REPLAY_MARKERS = (REPLAY_OF, REPLAYED_AT, REPLAY_ATTEMPT, REPLAY_TOPIC)
ATTRIBUTES_DROPPED = "dcm-attributes-dropped"  # originals left out to stay within Pub/Sub's limits (count, key, value)

# Pub/Sub's own dead-letter attributes
PS_DELIVERY_COUNT = "CloudPubSubDeadLetterSourceDeliveryCount"
PS_SUBSCRIPTION = "CloudPubSubDeadLetterSourceSubscription"
PS_SUBSCRIPTION_PROJECT = "CloudPubSubDeadLetterSourceSubscriptionProject"
PS_PUBLISH_TIME = "CloudPubSubDeadLetterSourceTopicPublishTime"
PS_PREFIX = "CloudPubSubDeadLetter"


def original_attributes(attributes: Mapping[str, str]) -> dict[str, str]:
    """The attributes as the provider sent them (our annotations and Pub/Sub's removed; replay markers
    kept: triage decides from the message's origin whether they count)."""
    return {k: v for k, v in attributes.items()
            if (not k.startswith(ATTRIBUTE_PREFIX) or k in (REPLAY_OF, REPLAYED_AT, REPLAY_TOPIC))
            and not k.startswith(PS_PREFIX)}


def rejection_attributes(message: PubSubMessage, exc: Rejected, rejected_by: str,
                         provider: str | None, now: str) -> dict[str, str]:
    """The original attributes plus ``dcm-*`` attributes saying who rejected it, when and why.

    Pub/Sub holds at most 100 attributes, keys of 256 bytes and values of 1,024 bytes: an original it
    would refuse (a key or a value too long: a NATS header carries both) is left out, and when the
    originals and ours would exceed 100, the originals that do not fit are left out too; each is
    counted (``dcm-attributes-dropped``): such an entry cannot be replayed intact, and says so. Ours
    are clipped to Pub/Sub's value limit where they are published, so the dead letter always fits.
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
    every = original_attributes(message.attributes)
    refused = limits.attribute_breaches(every)
    originals = {k: v for k, v in every.items() if k not in refused}
    # one for the count of those left out, two for the trace context joining them at publish
    room = limits.PUBSUB_MAX_ATTRIBUTES - limits.TRACE_CONTEXT_ATTRIBUTES - len(ours) - 1
    if len(originals) > room:
        originals = dict(sorted(originals.items())[:room])
    if len(originals) < len(every):
        ours[ATTRIBUTES_DROPPED] = str(len(every) - len(originals))
    return {**originals, **ours}
