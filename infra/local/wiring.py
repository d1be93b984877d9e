"""How the local stack declares the topology's topics and subscriptions on the Pub/Sub emulator: the
production wiring (push subscriptions to each function with ``/projects/P/topics/T`` in the endpoint path,
dead-letter policies), and where the emulator has a delivery bug (ordering, back-off) the nearest thing that
works, with why (``emulator_delivery_attempts``).
"""

from __future__ import annotations

import contextlib
import math
import os
from typing import TYPE_CHECKING, Iterator

from google.api_core import exceptions as gexc

from infra.local.state import StackState
from infra.topology import SubscriptionSpec, Topology

if TYPE_CHECKING:  # Pub/Sub's client is loaded by the steps that use it
    from google.cloud import pubsub_v1

# How the local stack declares delivery on the Pub/Sub emulator, and why it differs from production.
#
# The emulator has two delivery bugs production Pub/Sub does not (measured 2026-11-22, emulator 0.8.20;
# docs/local-stack.md):
# 1. Dead-lettering from a subscription with message ordering enabled throws in OrderedMessageBacklog
#    and that subscription never pushes again, silently.
# 2. With a retry policy (exponential back-off), once more than one message is failing, every one of
#    them is pushed 2-3 times (at ~0 s, ~1 s, ~4 s) and then never again: neither redelivered nor
#    dead-lettered. A Firestore outage longer than a few seconds, or a function server that dies
#    mid-burst, strands every update in flight. Without a retry policy the emulator redelivers a failed
#    push after ~1 s, counts every attempt and dead-letters at max_delivery_attempts, for 300 failing
#    messages as for one (500s and refused connections alike).
# So, on the emulator only: ordering off (upsert orders by sequence, event time and publication, and its
# writes are conditional, so a resource ends right in any delivery order: tests/e2e), no retry policy,
# and enough ~1 s redeliveries to span the declared back-off schedule (1 s -> 10 s over 5 attempts is a
# 15 s window: 16 attempts). Production (Terraform) keeps the declaration as written.
EMULATOR_MESSAGE_ORDERING = False
EMULATOR_REDELIVERY_SECONDS = 1.0
PUBSUB_MAX_DELIVERY_ATTEMPTS = 100  # Pub/Sub's documented upper bound


def backoff_window(spec: SubscriptionSpec) -> float:
    """Seconds between a message's first and last delivery under the declared exponential back-off."""
    delay, total = float(spec.minimum_backoff), 0.0
    for _ in range(spec.max_delivery_attempts - 1):
        total += min(delay, spec.maximum_backoff)
        delay *= 2
    return total


def emulator_delivery_attempts(spec: SubscriptionSpec) -> int:
    """The attempts whose ~1 s redeliveries span the same window as the declared schedule (never fewer)."""
    spanning = 1 + math.ceil(backoff_window(spec) / EMULATOR_REDELIVERY_SECONDS)
    return min(PUBSUB_MAX_DELIVERY_ATTEMPTS, max(spec.max_delivery_attempts, spanning))


def push_timeout(topology: Topology) -> int:
    """Seconds the emulator waits for a push's answer before it fails it and delivers the message again:
    production's push request timeout, the subscription's ack deadline. The emulator has one for all (a
    JVM setting, infra/local/emulators.py): the longest push subscription's, so no push production would wait
    for is cut sooner."""
    return max((s.ack_deadline_seconds for s in topology.subscriptions if s.push), default=60)


@contextlib.contextmanager
def _admin(state: StackState) -> Iterator[tuple[pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient]]:
    """Clients of the stack's Pub/Sub emulator, to declare or remove topics and subscriptions."""
    from google.cloud import pubsub_v1

    os.environ["PUBSUB_EMULATOR_HOST"] = state.pubsub_host
    subscriber = pubsub_v1.SubscriberClient()
    try:
        yield pubsub_v1.PublisherClient(), subscriber
    finally:
        subscriber.close()


def push_endpoint(state: StackState, spec: SubscriptionSpec) -> str:
    """Where the emulator pushes ``spec``'s messages: the function's server, the topic in the path (as in
    production)."""
    port = state.functions[spec.push]["port"]
    return f"http://127.0.0.1:{port}/projects/{state.project}/topics/{spec.topic}"


def apply_topology(state: StackState, topo: Topology) -> Topology:
    """Create every topic and subscription the declaration ``topo`` names on the stack's emulator (idempotent)."""
    from google.protobuf import duration_pb2

    with _admin(state) as (publisher, subscriber):
        for t in topo.topics:
            with contextlib.suppress(gexc.AlreadyExists):
                publisher.create_topic(name=publisher.topic_path(state.project, t.name))
        for s in topo.subscriptions:
            request = {
                "name": subscriber.subscription_path(state.project, s.name),
                "topic": publisher.topic_path(state.project, s.topic),
                "ack_deadline_seconds": s.ack_deadline_seconds,
                "enable_message_ordering": s.enable_message_ordering and EMULATOR_MESSAGE_ORDERING,
                "message_retention_duration": duration_pb2.Duration(seconds=s.message_retention),
                # no retry_policy: the emulator strands back-off redeliveries (above)
            }
            if s.push:
                request["push_config"] = {"push_endpoint": push_endpoint(state, s)}
            if s.dead_letter_topic:
                request["dead_letter_policy"] = {"dead_letter_topic": publisher.topic_path(state.project,
                                                                                           s.dead_letter_topic),
                                                 "max_delivery_attempts": emulator_delivery_attempts(s)}
            if s.filter:
                request["filter"] = s.filter
            with contextlib.suppress(gexc.AlreadyExists):
                subscriber.create_subscription(request=request)
    return topo


def purge(state: StackState, topo: Topology) -> int:
    """Drop every subscription's backlog: delete the subscriptions and declare them again. What a
    function is handling at that moment still ends; returns how many subscriptions were purged."""
    with _admin(state) as (_, subscriber):
        for s in topo.subscriptions:
            with contextlib.suppress(gexc.NotFound):
                subscriber.delete_subscription(subscription=subscriber.subscription_path(state.project, s.name))
    apply_topology(state, topo)
    return len(topo.subscriptions)
