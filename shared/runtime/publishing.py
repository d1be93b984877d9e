"""Publish to Pub/Sub and wait for the server's ack, or raise Transient.

The functions' client is ``shared/runtime/clients.py``'s ``SyncPublisher`` (one Publish call in the
caller's thread). A client that pauses an ordering key after a failed publish (the library's batching
``PublisherClient``, with message ordering on) has it resumed before we raise, so the redelivered message
can go out.

Every message carries the trace context of the span current when it is published (``traceparent``,
``tracestate``: shared/contracts/trace_context.py), in place of any it had: the next hop continues the
publisher's span (docs/tracing.md).
"""

from __future__ import annotations

from typing import Mapping

from dcm_status_contracts import trace_context
from dcm_status_contracts.errors import Transient
from dcm_status_contracts.model import clip
from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1

PUBLISH_TIMEOUT_SECONDS = 30.0


def publish(client: pubsub_v1.PublisherClient, topic_path: str, data: bytes,
            attributes: Mapping[str, str], ordering_key: str = "") -> str:
    """Publish one message; return its message id once the server has it.

    Attribute values and the ordering key are clipped to Pub/Sub's byte limits here, once; the current
    span's trace context joins the attributes.
    """
    ordering_key = clip(ordering_key)
    attributes = {k: clip(v) for k, v in trace_context.inject(attributes).items()}
    try:
        future = client.publish(topic_path, data, ordering_key=ordering_key, **attributes)
        return future.result(timeout=PUBLISH_TIMEOUT_SECONDS)
    except (gexc.GoogleAPIError, TimeoutError, pubsub_v1.publisher.exceptions.PublishError) as exc:
        if ordering_key:
            client.resume_publish(topic_path, ordering_key)
        raise Transient(f"publish to {topic_path} failed: {exc}") from exc
