"""W3C trace context in Pub/Sub message attributes: one trace per status event, from the provider's publish to
every consumer (docs/tracing.md).

The context travels as the ``traceparent`` and ``tracestate`` attributes (the W3C header names, as the
CloudEvents distributed-tracing extension and any OpenTelemetry propagator spell them), never inside the
CloudEvent: it is transport, not part of the event, its identity or its checks. Each hop replaces them with
its own span's context when it publishes (``inject``), so a dead letter, a replay or a webhook delivery
continues the trace of the event it came from.

A provider's context is a claim like any other it makes: it is continued (its trace id joins the event's
spans), never trusted for anything else. A malformed one is no error: ``extract`` returns an empty context
and the next span starts a new trace. No I/O here; the OpenTelemetry API only (no SDK, no exporter).
"""

from __future__ import annotations

import random
from typing import Mapping

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
ATTRIBUTES = (TRACEPARENT, TRACESTATE)

_PROPAGATOR = TraceContextTextMapPropagator()


def inject(attributes: Mapping[str, str], context: otel_context.Context | None = None) -> dict[str, str]:
    """``attributes`` with the trace context of ``context`` (the current one by default) in place of any they
    carried; as they are when that context holds no valid span (tracing off: what came in goes on)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=context)
    if not carrier:
        return dict(attributes)
    return {**{k: v for k, v in attributes.items() if k.lower() not in ATTRIBUTES}, **carrier}


def extract(attributes: Mapping[str, str]) -> otel_context.Context:
    """The trace context ``attributes`` carry (names in any case, as NATS headers may spell them); an empty
    context when there is none or it is malformed (then the next span is a new trace's root)."""
    carrier = {k.lower(): v for k, v in attributes.items() if k.lower() in ATTRIBUTES}
    if TRACEPARENT not in carrier:
        return otel_context.Context()
    return _PROPAGATOR.extract(carrier, context=otel_context.Context())


def is_valid(context: otel_context.Context) -> bool:
    return trace.get_current_span(context).get_span_context().is_valid


def for_report() -> dict[str, str]:
    """The attributes a provider's report carries: the context of the provider's current span when it traces
    its own work (the event's trace then starts in it), else a new trace's root context (a span only the
    provider knows of; the platform's first span is its child)."""
    current = otel_context.get_current()
    if is_valid(current):
        return inject({}, current)
    root = trace.SpanContext(trace_id=random.getrandbits(128) or 1, span_id=random.getrandbits(64) or 1,
                             is_remote=False, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))
    return inject({}, trace.set_span_in_context(trace.NonRecordingSpan(root)))
