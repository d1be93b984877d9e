"""Fakes for unit and functional tests (the e2e tier uses the real emulators)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import orjson
from dcm_status_contracts import limits
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


def pubsub_refuses(data: bytes, attributes: dict[str, str], ordering_key: str) -> str | None:
    """Why production Pub/Sub would refuse this publish (its documented limits), or None."""
    if len(data) > 10 * 1024 * 1024:
        return "message data over 10 MB"
    if len(attributes) > limits.PUBSUB_MAX_ATTRIBUTES:
        return f"{len(attributes)} attributes, the limit is {limits.PUBSUB_MAX_ATTRIBUTES}"
    for key, value in attributes.items():
        if not key or len(key.encode()) > limits.PUBSUB_MAX_ATTRIBUTE_KEY_BYTES or key.startswith("goog"):
            return f"attribute key {key[:40]!r} not allowed"
        if len(str(value).encode()) > limits.PUBSUB_MAX_ATTRIBUTE_VALUE_BYTES:
            return f"attribute {key[:40]!r} over {limits.PUBSUB_MAX_ATTRIBUTE_VALUE_BYTES} bytes"
    if len(ordering_key.encode()) > limits.PUBSUB_MAX_ORDERING_KEY_BYTES:
        return "ordering key over 1,024 bytes"
    return None


@dataclass
class FakePublisher:
    """Records what would be published; can be told to fail."""

    messages: list[Published] = field(default_factory=list)
    fail: bool = False
    fail_next: int = 0  # the next n publishes fail (a dropped connection), then they succeed
    resumed: list[tuple[str, str]] = field(default_factory=list)

    def publish(self, topic: str, data: bytes, ordering_key: str = "", retry: Any = None, timeout: Any = None,
                **attributes: Any) -> Future:
        future: Future = Future()
        refused = pubsub_refuses(data, attributes, ordering_key)
        if refused:  # what production Pub/Sub answers (the emulator enforces none of it)
            future.set_exception(gexc.InvalidArgument(refused))
        elif self.fail or self.fail_next:
            self.fail_next = max(0, self.fail_next - 1)
            future.set_exception(gexc.ServiceUnavailable("pubsub down (fake)"))
        else:
            self.messages.append(Published(topic, data, dict(attributes), ordering_key))
            future.set_result(str(len(self.messages)))
        return future

    def resume_publish(self, topic: str, ordering_key: str) -> None:
        self.resumed.append((topic, ordering_key))

    def topic_path(self, project: str, topic: str) -> str:
        return f"projects/{project}/topics/{topic}"

    def events(self) -> list[dict[str, Any]]:
        """The structured-mode CloudEvents published, in order."""
        return [orjson.loads(m.data) for m in self.messages]

    def on(self, topic_suffix: str) -> list[Published]:
        return [m for m in self.messages if m.topic.endswith("/" + topic_suffix)]

    def normalized(self) -> list[Published]:
        """What was published to upsert, on every provider's lane (dcm-status-normalized-{provider})."""
        return [m for m in self.messages if m.topic.rsplit("/", 1)[-1].startswith("dcm-status-normalized-")]


def runtime_of(publisher: Any = None, firestore: Any = None, **env: str) -> Runtime:
    """A function's Runtime for tests: the topology's settings, project 'unit', local mode, ``env`` over them."""
    values = {**TOPOLOGY_ENV, "DCM_PROJECT": "unit", "DCM_LOCAL_MODE": "1", **env}
    return Runtime.of(settings.from_env(values), firestore, publisher)


class SpanRecorder:
    """The spans this process's functions end, kept in memory: shared/runtime/tracing.py configured with an
    in-memory exporter (sampling ``ratio``); ``spans()`` once they are all exported."""

    def __init__(self, ratio: float = 1.0, service: str = "test"):
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from shared.runtime import tracing

        self.exporter = InMemorySpanExporter()
        values = {**TOPOLOGY_ENV, "DCM_PROJECT": "unit", "DCM_TRACE_SAMPLE_RATIO": str(ratio)}
        self.provider = tracing.configure(service, settings.from_env(values), self.exporter)

    def spans(self, name: str | None = None) -> list[Any]:
        self.provider.force_flush()
        return [s for s in self.exporter.get_finished_spans() if name is None or s.name == name]
