"""What a function instance needs from Google Cloud, built once and passed in.

Emulator hosts come from PUBSUB_EMULATOR_HOST / FIRESTORE_EMULATOR_HOST, which
the client libraries read themselves. Use cases never build clients: they get
them from the ``Runtime`` their entry point hands them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

import grpc
from google.cloud import firestore, pubsub_v1

from shared.runtime import settings as settings_module
from shared.runtime.settings import Settings


def publisher_client() -> pubsub_v1.PublisherClient:
    return pubsub_v1.PublisherClient(
        # One message per call: publish at once. Both settings count: with an ordering key the client
        # otherwise holds each message for max_latency (10 ms by default; measured 13 ms per publish on the
        # emulator, 1.8 ms without), whatever max_messages says.
        batch_settings=pubsub_v1.types.BatchSettings(max_messages=1, max_latency=0.0),
        publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True),
    )


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
    def publisher(self) -> Any:  # google.cloud.pubsub_v1.PublisherClient (or a fake)
        return self.make_publisher()

    @classmethod
    def from_env(cls) -> "Runtime":
        s = settings_module.from_env()
        return cls(s, lambda: FirestoreClient(project=s.project), publisher_client)

    @classmethod
    def of(cls, settings: Settings, firestore: Any = None, publisher: Any = None) -> "Runtime":
        """A runtime around clients that already exist (tests, tools)."""
        return cls(settings, lambda: firestore, lambda: publisher)
