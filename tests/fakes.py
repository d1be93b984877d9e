"""Fakes for unit and functional tests (the e2e tier uses the real emulators)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from google.api_core import exceptions as gexc

from infra.topology import load
from shared.runtime import settings
from shared.runtime.clients import Runtime

TOPOLOGY_ENV = load().env()


@dataclass
class Published:
    topic: str
    data: bytes
    attributes: dict[str, str]
    ordering_key: str


@dataclass
class FakePublisher:
    """Records what would be published; can be told to fail."""

    messages: list[Published] = field(default_factory=list)
    fail: bool = False
    resumed: list[tuple[str, str]] = field(default_factory=list)

    def publish(self, topic: str, data: bytes, ordering_key: str = "", **attributes: Any) -> Future:
        future: Future = Future()
        if self.fail:
            future.set_exception(gexc.ServiceUnavailable("pubsub down (fake)"))
        else:
            self.messages.append(Published(topic, data, dict(attributes), ordering_key))
            future.set_result(str(len(self.messages)))
        return future

    def resume_publish(self, topic: str, ordering_key: str) -> None:
        self.resumed.append((topic, ordering_key))

    def topic_path(self, project: str, topic: str) -> str:
        return f"projects/{project}/topics/{topic}"

    def on(self, topic_suffix: str) -> list[Published]:
        return [m for m in self.messages if m.topic.endswith("/" + topic_suffix)]


def runtime_of(publisher: Any = None, firestore: Any = None, **env: str) -> Runtime:
    """A function's Runtime for tests: the topology's settings, project 'unit', local mode, ``env`` over them."""
    values = {**TOPOLOGY_ENV, "DCM_PROJECT": "unit", "DCM_LOCAL_MODE": "1", **env}
    return Runtime.of(settings.from_env(values), firestore, publisher)
