"""Structured JSON logs that Cloud Logging understands.

One JSON object per line on stdout with ``severity``, ``message``, ``time``
(RFC 3339, which Cloud Logging takes as the entry's timestamp) and
``logging.googleapis.com/labels``; any extra fields become jsonPayload fields.
"""

from __future__ import annotations

import logging
import sys
from datetime import datetime, timezone
from typing import Any

import orjson

_LABELS_KEY = "logging.googleapis.com/labels"
_RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class CloudLoggingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "severity": record.levelname if record.levelname != "WARN" else "WARNING",
            "message": record.getMessage(),
            "logger": record.name,
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
        }
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
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        root.propagate = False
    return root.getChild(name)
