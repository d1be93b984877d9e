"""Process-wide Google Cloud clients, created lazily once per instance.

Emulator hosts come from PUBSUB_EMULATOR_HOST / FIRESTORE_EMULATOR_HOST, which
the client libraries read themselves.
"""

from __future__ import annotations

import functools

from google.cloud import firestore, pubsub_v1

from shared.config import settings


@functools.lru_cache(maxsize=1)
def firestore_client() -> firestore.Client:
    return firestore.Client(project=settings().project)


@functools.lru_cache(maxsize=1)
def publisher_client() -> pubsub_v1.PublisherClient:
    return pubsub_v1.PublisherClient(
        # One message per call: publish at once (batching would add its latency to every event).
        batch_settings=pubsub_v1.types.BatchSettings(max_messages=1),
        publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True),
    )
