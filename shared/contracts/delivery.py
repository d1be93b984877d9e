"""The callback delivery: one (change, callback) pair, the unit of work of the callback topics,
both directions. No I/O.

``notify`` fans a change out into one delivery per matching callback (published to
``dcm-status-callbacks``); each is tried, retried and given up on its own, so one slow or
failing receiver never holds another back. The data is JSON::

    {"version": "1.0", "callbackId", "firstAttemptAt", "change": <an item of the change feed>}

Attributes repeat ``callbackId``, ``deliveryId``, ``key`` and ``provider`` (for logs, the
dead-letter triage and subscription filters). ``firstAttemptAt`` starts the callback's retry
period; a replay from the dead letters starts it again (``dcm-replayed-at``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping

import orjson

from . import deadletter as dl
from . import timeutil
from .errors import Reason, Rejected
from .model import PubSubMessage

VERSION = "1.0"
SUPPORTED_MAJOR = 1
CHANGE_FIELDS = ("id", "cursor", "committedAt", "key", "provider", "resourceType", "newStatus", "changes",
                 "resource")


@dataclass(frozen=True)
class Delivery:
    callback_id: str
    change: Mapping[str, Any]  # an item of the change feed (shared/contracts/change_feed.py)
    first_attempt_at: str

    @property
    def id(self) -> str:
        """The delivery's id, stable over retries and replays: the ``webhook-id`` a receiver dedupes by."""
        return f"{self.change['id']}.{self.callback_id}"

    def to_message(self) -> tuple[bytes, dict[str, str]]:
        data = orjson.dumps({"version": VERSION, "callbackId": self.callback_id,
                             "firstAttemptAt": self.first_attempt_at, "change": dict(self.change)})
        return data, {"callbackId": self.callback_id, "deliveryId": self.id, "key": str(self.change["key"]),
                      "provider": str(self.change["provider"])}

    def period_started(self, attributes: Mapping[str, str]) -> datetime:
        """When the retry period started: the first attempt, or the replay that sent it back."""
        started = timeutil.parse(self.first_attempt_at)
        replayed = attributes.get(dl.REPLAYED_AT)
        try:
            return max(started, timeutil.parse(replayed)) if replayed else started
        except ValueError:
            return started


def from_message(message: PubSubMessage) -> Delivery:
    """The delivery a message carries, or Rejected (``malformed_internal``): our own contract broken."""
    def broken(why: str) -> Rejected:
        return Rejected(Reason.MALFORMED_INTERNAL, f"callback delivery: {why}", {"contract": "delivery"},
                        key=message.attributes.get("key"))
    try:
        doc = orjson.loads(message.data)
    except orjson.JSONDecodeError as exc:
        raise broken(f"not JSON ({exc})") from exc
    if not isinstance(doc, dict) or str(doc.get("version", "")).split(".")[0] != str(SUPPORTED_MAJOR):
        raise broken(f"expected an object of version {SUPPORTED_MAJOR}.x")
    change = doc.get("change")
    if not isinstance(doc.get("callbackId"), str) or not isinstance(change, dict):
        raise broken("callbackId and change are required")
    missing = [f for f in CHANGE_FIELDS if f not in change]
    if missing:
        raise broken(f"the change lacks {', '.join(missing)}")
    try:
        first = timeutil.format(timeutil.parse(doc.get("firstAttemptAt")))
    except (ValueError, TypeError) as exc:
        raise broken(f"firstAttemptAt: {exc}") from exc
    return Delivery(doc["callbackId"], change, first)
