"""``dcm-status publish --via nats``: publish one status event as an upstream DCM provider does, on NATS.

The dcm-project providers connect with their own NATS identity and publish the structured JSON CloudEvent
on ``dcm.{type}`` with JetStream (kubevirt, osac: ``js.Publish``, a PubAck back) or core NATS (acm-cluster,
k8s-storage); the Go SDK's binary mode puts the attributes in ``ce-*`` headers. This publishes with
JetStream, so the server's ack (the stream sequence) says the event is stored.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Mapping

from infra.nats_accounts import Identity

PUBLISH_TIMEOUT_SECONDS = 10.0


class Via(enum.StrEnum):
    """How ``dcm-status publish`` sends the event."""

    PUBSUB = "pubsub"  # on the provider's ingress topic
    NATS = "nats"  # on NATS, as the provider's NATS identity


def subject_of(resource_type: str) -> str:
    """The subject an upstream provider publishes a resource type's status on."""
    return f"dcm.{resource_type}"


async def _publish(url: str, identity: Identity, subject: str, data: bytes, headers: Mapping[str, str]) -> int:
    import nats

    nc = await nats.connect(url, user=identity.user, password=identity.password, connect_timeout=5,
                            max_reconnect_attempts=0, allow_reconnect=False)
    try:
        ack = await nc.jetstream().publish(subject, data, headers=dict(headers) or None,
                                           timeout=PUBLISH_TIMEOUT_SECONDS)
        return ack.seq
    finally:
        await nc.close()


def publish(url: str, identity: Identity, subject: str, data: bytes, headers: Mapping[str, str]) -> int:
    """Publish with JetStream as ``identity``; the stream sequence the server stored it under."""
    return asyncio.run(_publish(url, identity, subject, data, headers))
