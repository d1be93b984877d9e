"""What a receiver is sent (the Deltacloud tracker's body), and how it is signed. No I/O.

Body, as the tracker sends it, plus the change event's id, the resource's key, the change's
commit time and its change-feed cursor, so that a receiver can order what it gets (retries
can deliver an older change after a newer one: order by ``committedAt``, then ``cursor``)
and catch up from ``GET /v1/changes?after=CURSOR``::

    {"id", "token", "key", "cursor", "committedAt", "changes": [{"attribute", "old", "new"}], "resource"}

Headers per the Standard Webhooks specification (``webhook-id``, ``webhook-timestamp``,
``webhook-signature``: HMAC-SHA256 over ``id.timestamp.body``), made by the
``standardwebhooks`` library, so a receiver verifies with any Standard Webhooks library.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable, Mapping

import orjson
from dcm_status_contracts import timeutil
from standardwebhooks.webhooks import Webhook


def body(change: Mapping[str, Any], token: str | None) -> bytes:
    """What a receiver is sent for one change (``change``: an item of the change feed): with its feed
    cursor, so that a receiver that missed some can catch up from GET /v1/changes?after=CURSOR."""
    return orjson.dumps({"id": change["id"], "token": token, "key": change["key"], "cursor": change["cursor"],
                         "committedAt": change["committedAt"], "changes": change["changes"],
                         "resource": change["resource"]})


def signed_headers(secrets_in_force: Iterable[str], delivery_id: str, at: datetime,
                   payload: bytes) -> dict[str, str]:
    """The Standard Webhooks headers of one delivery (``at``: when it is sent). Every secret in force
    signs, space-separated: during a rotation the old and the new one both do, and a receiver holding
    either verifies (as the specification provides)."""
    signature = " ".join(Webhook(s).sign(delivery_id, at, payload.decode()) for s in secrets_in_force)
    return {"webhook-id": delivery_id, "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": signature, "content-type": "application/json"}


def ping(callback_id: str, token: str | None, at: datetime) -> tuple[str, bytes]:
    """The id and body of a test delivery (``callbacks test``): the callback's shape, no change."""
    ping_id = f"test-{callback_id}-{int(at.timestamp())}"
    return ping_id, orjson.dumps({"id": ping_id, "test": True, "token": token, "key": None, "cursor": None,
                                  "committedAt": timeutil.format(at), "changes": [], "resource": None})
