"""The ingress trust rules: what a message's origin proves, and which provider a topic belongs to.

A provider can publish to its own ingress topics only (``infra/topology.yaml``), so the topic a message
arrived on is the one thing it proves: the topic says who the provider is (``Origins.topic_provider``,
the one function that says so). What a provider sets under the platform's attribute names (``dcm-*``,
Pub/Sub's dead-letter ones) is never read (``provider_attributes``, applied by ingest). Replay markers
are trusted only on messages from the replay topic, which only the replay path publishes to (no provider
identity may), or from a topic no provider can publish to (``Origins.provider_can_publish``).

A function asks once per delivery (``Origins.arrival``, in shared/runtime/entrypoint.py) and passes the
``Arrival`` on: to tracing (is it the edge?), to the dead-letter annotation (whose message?) and to ingest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .deadletter import ATTRIBUTE_PREFIX, PS_PREFIX, REPLAY_TOPIC

# The names infra/topology.yaml declares; the deployers set them (a test holds the two together).
INGRESS_TOPIC_TEMPLATE = "dcm-status-ingress-{provider}"  # a provider's ingress topic
INGRESS_SUBSCRIPTION_TEMPLATE = "dcm-ingest-{provider}"  # ingest's subscription on it
REPLAY_TOPIC_NAME = "dcm-status-replay"  # where the replay path publishes dead letters again


def is_platform_attribute(name: str) -> bool:
    """Is ``name`` one the platform sets (``dcm-*``, any case; Pub/Sub's dead-letter attributes)?"""
    return name.lower().startswith(ATTRIBUTE_PREFIX) or name.startswith(PS_PREFIX)


def provider_attributes(attributes: Mapping[str, str]) -> dict[str, str]:
    """What a provider may say in attributes: all of them but the platform's, which it cannot prove."""
    return {k: v for k, v in attributes.items() if not is_platform_attribute(k)}


def short_name(path: str) -> str:
    """``projects/P/topics/T`` -> ``T`` (``projects/P/subscriptions/S`` -> ``S``); a short name as it is."""
    return path.rsplit("/", 1)[-1]


def _filling(template: str, name: str) -> str | None:
    """What fills ``{provider}`` in ``template`` to give ``name`` (a short name), or None when it is none of its."""
    prefix, _, suffix = template.partition("{provider}")
    if name.startswith(prefix) and name.endswith(suffix) and len(name) > len(prefix) + len(suffix):
        return name[len(prefix): len(name) - len(suffix)]
    return None


@dataclass(frozen=True)
class Arrival:
    """What the topic a message arrived on proves (``Origins.arrival``): the provider whose ingress topic it
    is (None: no provider's), or that it is the replay topic."""

    topic: str | None
    provider: str | None = None
    replayed: bool = False

    @property
    def edge(self) -> bool:
        """Did it come from outside the platform (a provider's topic, the replay of a provider's message, or
        no topic at all: a CloudEvent posted straight)?"""
        return self.topic is None or self.replayed or self.provider is not None


@dataclass(frozen=True)
class Origins:
    """Where a message may have come from, and what that proves (infra/topology.yaml's names; the
    defaults are the declaration's). A provider can publish to its ingress topics only, so only what
    arrives through them (an ingress topic, a subscription on one) is the provider's word."""

    ingress_topic_template: str = INGRESS_TOPIC_TEMPLATE
    ingress_subscriptions: tuple[str, ...] = (INGRESS_SUBSCRIPTION_TEMPLATE,)  # templates of subscriptions on one
    replay_topic: str = REPLAY_TOPIC_NAME

    def topic_provider(self, topic: str | None) -> str | None:
        """The provider whose ingress topic this is (short name or path), or None."""
        return _filling(self.ingress_topic_template, short_name(topic)) if topic else None

    def subscription_provider(self, subscription: str | None) -> str | None:
        """The provider whose ingress topic this subscription reads (short name or path), or None."""
        if not subscription:
            return None
        return next((p for t in self.ingress_subscriptions if (p := _filling(t, short_name(subscription)))), None)

    def is_replay(self, topic: str | None) -> bool:
        return bool(topic) and short_name(topic) == self.replay_topic

    def arrival(self, topic: str | None) -> Arrival:
        """What ``topic`` proves: asked once per delivery, the answer passed on."""
        return Arrival(topic, self.topic_provider(topic), self.is_replay(topic))

    def replay_arrival(self, attributes: Mapping[str, str]) -> Arrival | None:
        """On a message from the replay topic: its arrival on the ingress topic it is for, when it names one."""
        arrival = self.arrival(attributes.get(REPLAY_TOPIC))
        return arrival if arrival.provider else None

    def replay_target(self, attributes: Mapping[str, str]) -> str | None:
        """On a message from the replay topic: the ingress topic it is for, when it names one."""
        arrival = self.replay_arrival(attributes)
        return arrival.topic if arrival else None

    def provider_can_publish(self, topic: str | None = None, subscription: str | None = None) -> bool:
        """Could a provider have published the message that came through ``topic`` / ``subscription``?
        An origin not known (neither given) counts as a provider's."""
        if subscription:
            return self.subscription_provider(subscription) is not None
        if topic:
            return self.topic_provider(topic) is not None
        return True
