"""The change feed: every change event in commit order, from a cursor. No I/O.

An entry of the feed is a ledger entry that carries a change event
(shared/state/documents.py); its position is ``(committedAt, entry id)``.
``committedAt`` is the server's time of the write, which is *not* the moment
the write becomes visible: a write stamped ``t`` may show up after one stamped
``t' > t`` (measured on the emulator, and Firestore documents its request time
as no more than that). A cursor that jumped past ``t`` would skip it for good.
So the feed only serves entries that have *settled*: stamped at least
``settle`` seconds before the read. A write still invisible at read time ``R``
is stamped after ``R - settle`` (its stamp precedes its visibility by less
than ``settle``), hence after every entry served; a follower of the cursor
never misses an entry and never sees one twice.

A cursor is opaque to clients: ``base64url(JSON [committedAt, entry id])``.
``after(horizon)`` is "everything stamped up to ``horizon`` was served".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Mapping

import orjson

from . import timeutil, tokens
from .errors import Gone, InvalidRequest

# Sorts after every entry id (lowercase hex): a cursor at (t, END) is past every entry stamped t.
END = "~"
DEFAULT_SETTLE_SECONDS = 2.0
MAX_CURSOR_CHARS = 512


@dataclass(frozen=True, order=True)
class Cursor:
    committed_at: datetime
    entry_id: str

    def encode(self) -> str:
        return tokens.to_token([timeutil.format(self.committed_at), self.entry_id])

    @classmethod
    def decode(cls, text: str, parameter: str = "after") -> "Cursor":
        if len(text) > MAX_CURSOR_CHARS:
            raise InvalidRequest(f"{parameter}: not a cursor of this feed (too long)", parameter)
        try:
            committed_at, entry_id = tokens.from_token(text)
            if not isinstance(entry_id, str) or not isinstance(committed_at, str):
                raise ValueError("cursor fields")
            return cls(timeutil.parse(committed_at), entry_id)
        except (ValueError, TypeError) as exc:
            raise InvalidRequest(f"{parameter}: not a cursor of this feed", parameter) from exc

    @classmethod
    def after(cls, horizon: datetime) -> "Cursor":
        return cls(horizon, END)


def horizon(read_at: datetime, settle: float) -> datetime:
    """The newest stamp a read at ``read_at`` may serve."""
    return read_at - timedelta(seconds=settle)


def check_retained(cursor: Cursor, read_at: datetime, retention_days: int, parameter: str = "after") -> None:
    """Older than the retention, entries after the cursor may be gone (the ledger's TTL)."""
    if cursor.committed_at < read_at - timedelta(days=retention_days):
        raise Gone(f"cursor of {timeutil.format(cursor.committed_at)} is older than the feed's retention "
                   f"({retention_days} days): read the current state from /v1/resources, then follow the feed "
                   f"from /v1/changes?last=1", parameter)


def item(entry_id: str, committed_at: datetime, change: Mapping[str, Any]) -> dict[str, Any]:
    """One change as the feed serves it: the Deltacloud tracker's shape
    (``{changes: [{attribute, old, new}], resource}``), its id and its cursor.

    ``change`` is the stored change event (``ChangeEvent.to_record()``).
    """
    data = orjson.loads(change["body"])["data"]
    return {
        "id": change["id"],
        "cursor": Cursor(committed_at, entry_id).encode(),
        "committedAt": timeutil.format(committed_at),
        "key": data["key"],
        "provider": data["provider"],
        "resourceType": data["resourceType"],
        "resourceId": data["resourceId"],
        "oldStatus": data["oldStatus"],
        "newStatus": data["newStatus"],
        "late": data["late"],
        "changes": data["changes"],
        "resource": data["resource"],
    }
