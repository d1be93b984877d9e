"""What a function instance needs from Google Cloud, built once and passed in.

Emulator hosts come from PUBSUB_EMULATOR_HOST / FIRESTORE_EMULATOR_HOST, which
the client libraries read themselves. Use cases never build clients: they get
them from the ``Runtime`` their entry point hands them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

from google.cloud import firestore, pubsub_v1

from shared.runtime import settings as settings_module
from shared.runtime.settings import Settings


def publisher_client() -> pubsub_v1.PublisherClient:
    return pubsub_v1.PublisherClient(
        # One message per call: publish at once (batching would add its latency to every event).
        batch_settings=pubsub_v1.types.BatchSettings(max_messages=1),
        publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True),
    )


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
        return cls(s, lambda: firestore.Client(project=s.project), publisher_client)

    @classmethod
    def of(cls, settings: Settings, firestore: Any = None, publisher: Any = None) -> "Runtime":
        """A runtime around clients that already exist (tests, tools)."""
        return cls(settings, lambda: firestore, lambda: publisher)
