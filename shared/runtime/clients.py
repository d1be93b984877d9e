"""What a function instance needs from Google Cloud, built once and passed in.

Emulator hosts come from PUBSUB_EMULATOR_HOST / FIRESTORE_EMULATOR_HOST, which
the client libraries read themselves. Use cases never build clients: they get
them from the ``Runtime`` their entry point hands them.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

import grpc
from google.api_core import gapic_v1
from google.cloud import firestore, pubsub_v1

from shared.runtime import settings as settings_module
from shared.runtime.publishing import PUBLISH_TIMEOUT_SECONDS
from shared.runtime.settings import Settings


class SyncPublisher:
    """Publishes in the caller's thread: one Publish call per message, the answer awaited, nothing batched.

    A function publishes a message, waits for Pub/Sub's ack, then answers its delivery. The library's
    ``PublisherClient`` is built for the opposite (many messages in flight, batched on threads of its own):
    for each message it started two threads (the batch's commit, and the ordered sequencers' commit timer),
    a future, and a lock round, about 8% of upsert's CPU in the profile of issue 32, and held a message
    with an ordering key for ``max_latency`` unless that was 0. This is the same RPC through the same
    library's generated client (its default retry, the emulator when ``PUBSUB_EMULATOR_HOST`` is set),
    with the interface ``shared/runtime/publishing.py`` and the tests' fakes use: ``publish`` returns a
    done future. An ordering key rides on the message as before; the client-side sequencing the library
    adds only orders several publishes of one key in flight at once, which a function never has.
    """

    def __init__(self, client: Any = None, timeout: float = PUBLISH_TIMEOUT_SECONDS):
        from google.pubsub_v1 import PublisherClient  # the generated client the library's wraps

        self._client = client or PublisherClient()
        self._timeout = timeout  # the whole call, its retries included

    def publish(self, topic: str, data: bytes, ordering_key: str = "", retry: Any = gapic_v1.method.DEFAULT,
                timeout: Any = None, **attributes: str) -> Future:
        """Publish one message now; a done future holding its message id (a failure raises here)."""
        message = pubsub_v1.types.PubsubMessage(data=data, ordering_key=ordering_key, attributes=attributes)
        response = self._client.publish(topic=topic, messages=[message], retry=retry,
                                        timeout=self._timeout if timeout is None else timeout)
        future: Future = Future()
        future.set_result(response.message_ids[0])
        return future

    def resume_publish(self, topic: str, ordering_key: str) -> None:
        """Nothing to resume: no key is ever paused here (the library pauses a key after a failed publish)."""


def publisher_client() -> SyncPublisher:
    return SyncPublisher()


# gRPC's reconnect back-off grows to 120 s while a server is unreachable: after a long outage a function
# instance would go on failing for up to two minutes once Firestore is back, and Pub/Sub spend the attempts
# of every update that arrives meanwhile. Reconnect within a second instead.
RECONNECT_OPTIONS = (("grpc.initial_reconnect_backoff_ms", 250), ("grpc.min_reconnect_backoff_ms", 250),
                     ("grpc.max_reconnect_backoff_ms", 1000))


class FirestoreClient(firestore.Client):
    """``firestore.Client`` whose emulator channel reconnects fast (``RECONNECT_OPTIONS``).

    The local stack's fault proxy cuts Firestore at the TCP level, the failure that grows gRPC's back-off.
    The library builds the emulator channel in ``_emulator_channel`` with fixed options; this is the same
    channel (insecure, the emulator's owner token, unlimited message size) plus the reconnect options
    (tests/e2e/test_reliability.py fails if the hook stops being used)."""

    def _emulator_channel(self, transport):  # noqa: D401 - overrides the library's hook
        options = [("Authorization", "Bearer owner"), ("grpc.max_send_message_length", -1),
                   ("grpc.max_receive_message_length", -1), *RECONNECT_OPTIONS]
        return grpc.insecure_channel(self._emulator_host, options=options)


@dataclass(frozen=True)
class Runtime:
    """Settings and clients of one function instance; a client is created when first used
    (ingest never opens Firestore), once."""

    settings: Settings
    make_firestore: Callable[[], Any]
    make_publisher: Callable[[], Any]

    @cached_property
    def firestore(self) -> Any:  # google.cloud.firestore.Client (or a test's emulator client)
        return self.make_firestore()

    @cached_property
    def publisher(self) -> Any:  # SyncPublisher (or a fake)
        return self.make_publisher()

    @classmethod
    def from_env(cls) -> "Runtime":
        s = settings_module.from_env()
        return cls(s, lambda: FirestoreClient(project=s.project), publisher_client)

    @classmethod
    def of(cls, settings: Settings, firestore: Any = None, publisher: Any = None) -> "Runtime":
        """A runtime around clients that already exist (tests, tools)."""
        return cls(settings, lambda: firestore, lambda: publisher)
