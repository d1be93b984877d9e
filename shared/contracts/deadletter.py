"""The dead-letter message format: the original, intact, plus why it failed.

Whoever rejects a message publishes its original data and attributes to the
dead-letter topic with ``dcm-*`` attributes added, so that replay can send
exactly what the provider sent. Pub/Sub's own dead-lettering (after max
delivery attempts) adds ``CloudPubSubDeadLetterSource*`` attributes instead.

Every ``dcm-*`` attribute (and Pub/Sub's dead-letter ones) is the platform's: a
provider proves nothing but its ingress topic, so what it sets under those names
is never read (``provider_attributes``, applied by ingest). Replay markers
(``REPLAY_MARKERS``) are trusted only on messages from the replay topic, which
only the replay path publishes to (no provider identity may), or from a topic no
provider can publish to (``Origins``).
"""

from __future__ import annotations

from dataclasses import dataclass
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


def is_platform_attribute(name: str) -> bool:
    """Is ``name`` one the platform sets (``dcm-*``, any case; Pub/Sub's dead-letter attributes)?"""
    return name.lower().startswith(PREFIX) or name.startswith(PS_PREFIX)


def provider_attributes(attributes: Mapping[str, str]) -> dict[str, str]:
    """What a provider may say in attributes: all of them but the platform's, which it cannot prove."""
    return {k: v for k, v in attributes.items() if not is_platform_attribute(k)}


def provider_named_in(template: str, name: str | None) -> str | None:
    """The provider that fills ``{provider}`` in ``template`` to give ``name`` (a short topic or
    subscription name), or None when ``name`` is not one of the template's."""
    if not name:
        return None
    prefix, _, suffix = template.partition("{provider}")
    if name.startswith(prefix) and name.endswith(suffix) and len(name) > len(prefix) + len(suffix):
        return name[len(prefix): len(name) - len(suffix)]
    return None


def short_name(path: str) -> str:
    """``projects/P/topics/T`` -> ``T`` (``projects/P/subscriptions/S`` -> ``S``); a short name as it is."""
    return path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Origins:
    """Where a message may have come from, and what that proves (infra/topology.yaml's names; the
    defaults are the declaration's). A provider can publish to its ingress topics only, so only what
    arrives through them (an ingress topic, a subscription on one) is the provider's word."""

    ingress_topic_template: str = "dcm-status-ingress-{provider}"
    ingress_subscriptions: tuple[str, ...] = ("dcm-ingest-{provider}",)  # templates of subscriptions on one
    replay_topic: str = "dcm-status-replay"

    @classmethod
    def of(cls, settings: object) -> "Origins":
        """The origins a function's settings name (shared/runtime/settings.py)."""
        return cls(getattr(settings, "ingress_topic_template"), tuple(getattr(settings, "ingress_subscriptions")),
                   getattr(settings, "topic_replay"))

    def ingress_provider(self, topic: str | None) -> str | None:
        """The provider whose ingress topic this is (short name or path), or None."""
        return provider_named_in(self.ingress_topic_template, short_name(topic)) if topic else None

    def subscription_provider(self, subscription: str | None) -> str | None:
        """The provider whose ingress topic this subscription reads (short name or path), or None."""
        if not subscription:
            return None
        return next((p for t in self.ingress_subscriptions if (p := provider_named_in(t, short_name(subscription)))),
                    None)

    def is_replay(self, topic: str | None) -> bool:
        return bool(topic) and short_name(topic) == self.replay_topic

    def replay_target(self, attributes: Mapping[str, str]) -> str | None:
        """On a message from the replay topic: the ingress topic it is for, when it names one."""
        target = attributes.get(REPLAY_TOPIC)
        return target if self.ingress_provider(target) else None

    def provider_can_publish(self, topic: str | None = None, subscription: str | None = None) -> bool:
        """Could a provider have published the message that came through ``topic`` / ``subscription``?
        An origin not known (neither given) counts as a provider's."""
        if subscription:
            return self.subscription_provider(subscription) is not None
        if topic:
            return self.ingress_provider(topic) is not None
        return True


def original_attributes(attributes: Mapping[str, str]) -> dict[str, str]:
    """The attributes as the provider sent them (our annotations and Pub/Sub's removed; replay markers
    kept: triage decides from the message's origin whether they count)."""
    return {k: v for k, v in attributes.items()
            if (not k.startswith(PREFIX) or k in (REPLAY_OF, REPLAYED_AT, REPLAY_TOPIC)) and not k.startswith(PS_PREFIX)}


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
