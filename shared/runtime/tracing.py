"""One trace per status event across every function: OpenTelemetry spans, W3C context in message attributes.

Each function continues the trace its message carries (``consuming``: one span per delivery, named after
the function, a child of the publisher's span) and every message it publishes carries its span's context
(``shared/runtime/publishing.py`` injects it). The spans carry the provider, resource key, outcome and
reason the function's log lines name (``shared/runtime/logs.py`` copies them), and every log line written
while a span is current carries its trace and span ids, as Cloud Logging groups them.

Where spans go (``Settings.trace_exporter``): Cloud Trace in production, JSON lines under the state
directory locally (``dcm-status trace EVENT_ID`` reads them), or nowhere. Export is batched on a
background thread (``BatchSpanProcessor``): no per-message flush, a few microseconds per span on the
request path. ``Settings.trace_sample_ratio`` is the share of new traces recorded (1 locally).

Sampling never trusts a provider: at the edge (a message on a provider's ingress topic, the NATS ingress)
the decision is the platform's own, whatever sampled flag or trace id the provider sent; past the edge,
every hop follows its parent (our own functions' decision), so a trace is recorded whole or not at all.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import orjson
from dcm_status_contracts import trace_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import SpanKind

from shared.runtime.settings import Settings, TraceExporter

TRACER_NAME = "dcm-status"
EDGE = "dcm.edge"  # a span's attribute: its parent context is a provider's claim (sampling decides afresh)
PUBLISHED_AT = "dcm.published_at"  # when the message a span handles was published (RFC 3339): the hop's wait
SPAN_FILE_SUFFIX = ".spans.jsonl"

# OpenTelemetry warns (one unstructured stderr line) for each malformed tracestate it parses: a provider could
# write a log line per message. A malformed context is simply none (docs/security.md); its errors still show.
logging.getLogger("opentelemetry.trace").setLevel(logging.ERROR)

_lock = threading.Lock()
_provider: TracerProvider | None = None
_tracer: trace.Tracer | None = None  # the provider's, made once (getting it costs more than a span)


class EdgeSampler(Sampler):
    """``ratio`` of new traces and of traces entering at the edge (decided here, never by a provider's flag
    or trace id); every other span as its parent was."""

    def __init__(self, ratio: float):
        self.ratio = ratio

    def should_sample(self, parent_context: Any, trace_id: int, name: str, kind: Any = None,
                      attributes: Mapping[str, Any] | None = None, links: Sequence[Any] | None = None,
                      trace_state: Any = None) -> SamplingResult:
        parent = trace.get_current_span(parent_context).get_span_context()
        if not parent.is_valid or (attributes or {}).get(EDGE):
            sampled = self.ratio >= 1.0 or random.random() < self.ratio
        else:
            sampled = parent.trace_flags.sampled
        return SamplingResult(Decision.RECORD_AND_SAMPLE if sampled else Decision.DROP,
                              attributes if sampled else None, parent.trace_state if parent.is_valid else None)

    def get_description(self) -> str:
        return f"EdgeSampler{{{self.ratio}}}"


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """One finished span as a line of the local span file (what ``dcm-status trace`` reads)."""
    ctx, parent = span.get_span_context(), span.parent
    return {"traceId": f"{ctx.trace_id:032x}", "spanId": f"{ctx.span_id:016x}",
            "parentSpanId": f"{parent.span_id:016x}" if parent else None, "name": span.name,
            "service": span.resource.attributes.get("service.name"), "kind": span.kind.name,
            "start": span.start_time, "end": span.end_time, "status": span.status.status_code.name,
            "attributes": dict(span.attributes or {})}


class FileSpanExporter(SpanExporter):
    """Spans as JSON lines appended to a file of this process's own (no collector, no shared writes)."""

    def __init__(self, directory: Path, service: str):
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{service}-{os.getpid()}{SPAN_FILE_SUFFIX}"

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = b"".join(orjson.dumps(span_record(s), default=str) + b"\n" for s in spans)
        with self.path.open("ab") as out:
            out.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def exporter_for(service: str, settings: Settings) -> SpanExporter | None:
    if settings.trace_exporter is TraceExporter.FILE:
        return FileSpanExporter(Path(settings.trace_dir or "."), service)
    if settings.trace_exporter is TraceExporter.CLOUD_TRACE:
        from opentelemetry.exporter.cloud_trace import CloudTraceSpanExporter  # heavy: only where it is used

        return CloudTraceSpanExporter(project_id=settings.project)
    return None


def configure(service: str, settings: Settings, exporter: SpanExporter | None = None) -> TracerProvider:
    """This process's spans: named for ``service``, sampled at ``settings.trace_sample_ratio``, exported in
    batches to ``exporter`` (by default the one the settings name). Again: replaces the previous one."""
    global _provider, _tracer
    provider = TracerProvider(sampler=EdgeSampler(settings.trace_sample_ratio),
                              resource=Resource.create({"service.name": service}))
    chosen = exporter or exporter_for(service, settings)
    if chosen is not None:
        provider.add_span_processor(BatchSpanProcessor(chosen))
    with _lock:
        previous, _provider, _tracer = _provider, provider, provider.get_tracer(TRACER_NAME)
    if previous is not None:
        previous.shutdown()
    return provider


def tracer() -> trace.Tracer:
    """The configured tracer; unconfigured, the API's no-op one (context still flows through)."""
    return _tracer if _tracer is not None else trace.get_tracer(TRACER_NAME)


@contextlib.contextmanager
def continuing(name: str, carrier: Mapping[str, str], *, edge: bool,
               attributes: Mapping[str, Any] | None = None) -> Iterator[trace.Span]:
    """A consumer span named ``name``, current for the block, continuing the context ``carrier`` holds
    (message attributes or NATS headers); a new trace when it holds none or a malformed one. ``edge``: the
    carrier is a provider's (sampling decides afresh). An exception leaves it marked as an error."""
    span_attributes = {EDGE: edge, **(attributes or {})}
    with tracer().start_as_current_span(name, context=trace_context.extract(carrier), kind=SpanKind.CONSUMER,
                                        attributes=span_attributes, record_exception=False) as span:
        yield span


@contextlib.contextmanager
def child(name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[trace.Span]:
    """A client span under the current one (a webhook call), current for the block."""
    with tracer().start_as_current_span(name, kind=SpanKind.CLIENT, attributes=attributes or {},
                                        record_exception=False) as span:
        yield span


def message_attributes(message_id: str, topic: str | None, published_at: str | None) -> dict[str, str]:
    """The span attributes of one delivered Pub/Sub message."""
    found = {"messaging.system": "gcp_pubsub", "messaging.operation": "process", "messaging.message.id": message_id}
    if topic:
        found["messaging.destination.name"] = topic
    if published_at:
        found[PUBLISHED_AT] = published_at
    return found
