"""Upsert's cached view of the callbacks' summary (summary.py): may any enabled
webhook callback want this change? Its answer is the change event's ``notify`` attribute, which the
dcm-notify subscription filters on (infra/topology.yaml), so notify is not invoked for a change no
callback can match.

One read per ``ttl`` seconds per instance (``DCM_CALLBACK_VIEW_TTL``: 10 s in production, 0 on the
local stack); a callback registered less than ``ttl`` ago can thus miss a change (docs/callbacks.md,
"Registration lag"). Fail-open: a failed or slow read, a document that is no summary, or no summary
while callbacks exist answers "may match" (notify looks, as it did before the summary).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Mapping

import orjson
from google.cloud import firestore

from shared.callbacks import summary as callback_summary
from shared.callbacks.summary import CallbackSummary
from shared.runtime.logs import get_logger

log = get_logger("callback_view")

READ_TIMEOUT = 2.0  # seconds: a slow read answers "may match" rather than hold an update up


class CallbackView:
    """Whether any enabled callback may ask for a change, from the summary read at most once per ``ttl``
    seconds (``ttl`` 0: every time). Fail-open: a failed read, an unreadable document, or a summary absent
    while callbacks exist answers True."""

    def __init__(self, db: firestore.Client, ttl: float, clock: Callable[[], float] = time.monotonic):
        self.db = db
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._summary: CallbackSummary | None = None  # None: unknown (may match anything)
        self._read_at: float | None = None

    def summary(self) -> CallbackSummary | None:
        """The summary as cached (None: unknown). Read outside the lock: the threads of an instance never wait
        for one another's read (at expiry a few may read at once; with ``ttl`` 0 each reads its own)."""
        with self._lock:
            now = self.clock()
            if self._read_at is not None and self.ttl > 0 and now - self._read_at < self.ttl:
                return self._summary
        found = self._read()
        with self._lock:
            self._summary, self._read_at = found, now
        return found

    def _read(self) -> CallbackSummary | None:
        try:
            return callback_summary.read(self.db, READ_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - fail-open: any failure means "notify looks", never a lost delivery
            log.warning("callback summary unreadable: every change goes to notify", extra={
                "error": f"{type(exc).__name__}: {exc}"[:300]})
            return None

    def wanted(self, attributes: Mapping[str, str], body: bytes) -> bool:
        """Whether notify need look at a change event (its message attributes and JSON CloudEvent body)."""
        if attributes.get("late") == "true":
            return False  # notify sends no late change (the feed has it)
        summary = self.summary()
        if summary is None:
            return True
        if summary.empty:
            return False
        change: dict[str, Any] = {"key": attributes.get("key"), "provider": attributes.get("provider"),
                                  "resourceType": attributes.get("resourceType"),
                                  "newStatus": attributes.get("newStatus")}
        if summary.needs_resource:
            try:
                change["resource"] = orjson.loads(body)["data"]["resource"]
            except (ValueError, KeyError, TypeError):
                return True
        return summary.may_match(change)
