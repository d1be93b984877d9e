"""Structured JSON logs that Cloud Logging understands.

One JSON object per line on stdout with ``severity``, ``message``, ``time``
(RFC 3339, which Cloud Logging takes as the entry's timestamp) and
``logging.googleapis.com/labels``; any extra fields become jsonPayload fields.

While a span is current (shared/runtime/tracing.py), a line also carries ``logging.googleapis.com/trace``
(``projects/PROJECT/traces/TRACE_ID``), ``logging.googleapis.com/spanId`` and
``logging.googleapis.com/trace_sampled``: Cloud Logging shows an event's lines together and beside its
trace. And the span takes what the line says of the event (``SPAN_LABELS``, ``SPAN_FIELDS``: provider,
resource type, key, event id, outcome, reason), so a span names what its function's logs name.
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import datetime, timezone
from typing import Any

import orjson
from opentelemetry import trace

_LABELS_KEY = "logging.googleapis.com/labels"
TRACE_KEY = "logging.googleapis.com/trace"
SPAN_KEY = "logging.googleapis.com/spanId"
SAMPLED_KEY = "logging.googleapis.com/trace_sampled"
_RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
# what a log line says of its event -> the span attribute it becomes
SPAN_LABELS = {"provider": "dcm.provider", "resourceType": "dcm.resource_type", "outcome": "dcm.outcome",
               "reason": "dcm.reason", "callback": "dcm.callback"}
SPAN_FIELDS = {"key": "dcm.key", "eventId": "dcm.event_id"}


def _project() -> str:
    return os.environ.get("DCM_PROJECT") or os.environ.get("GOOGLE_CLOUD_PROJECT") or "unknown"


def trace_fields(span_context: trace.SpanContext, project: str) -> dict[str, Any]:
    """The fields Cloud Logging joins a log entry to its trace and span by."""
    return {TRACE_KEY: f"projects/{project}/traces/{span_context.trace_id:032x}",
            SPAN_KEY: f"{span_context.span_id:016x}", SAMPLED_KEY: span_context.trace_flags.sampled}


class SpanFields(logging.Filter):
    """Gives the current span what each record says of its event (its provider, key, outcome, reason...)."""

    def filter(self, record: logging.LogRecord) -> bool:
        span = trace.get_current_span()
        if span.is_recording():
            labels, fields = getattr(record, "labels", None) or {}, record.__dict__
            named = {name: str(labels[k]) for k, name in SPAN_LABELS.items() if labels.get(k)}
            named.update((name, str(fields[k])) for k, name in SPAN_FIELDS.items() if fields.get(k))
            if named:  # one call: each one takes the span's lock and checks every value (issue 32)
                span.set_attributes(named)
        return True


class CloudLoggingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "severity": record.levelname if record.levelname != "WARN" else "WARNING",
            "message": record.getMessage(),
            "logger": record.name,
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
        }
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid:  # the span of the request being handled (the record is formatted in its thread)
            entry.update(trace_fields(span_context, _project()))
        labels = getattr(record, "labels", None)
        if labels:
            entry[_LABELS_KEY] = {k: str(v) for k, v in labels.items()}
        for key, value in vars(record).items():
            if key not in _RESERVED and key != "labels":
                entry[key] = value
        if record.exc_info:
            entry["stack_trace"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def get_logger(name: str) -> logging.Logger:
    """A logger writing Cloud Logging JSON to stdout (configured once)."""
    root = logging.getLogger("dcm")
    if not root.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(CloudLoggingFormatter())
        handler.addFilter(SpanFields())
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        root.propagate = False
    return root.getChild(name)
