"""One exception hierarchy, and the ack/retry contract it encodes.

- ``Rejected``: the message can never succeed as it is. The function acks it
  and the message is dead-lettered with the reason (code + human message +
  machine-readable detail).
- ``Transient``: a dependency (Firestore, Pub/Sub) failed; the function raises
  so that Pub/Sub redelivers. After ``max_delivery_attempts`` Pub/Sub itself
  moves the message to the dead-letter topic (``delivery_exhausted``).
"""

from __future__ import annotations

import enum
from typing import Any, Mapping


class Reason(str, enum.Enum):
    """Machine codes for everything that can end on the dead-letter topic."""

    MALFORMED_JSON = "malformed_json"
    NOT_A_CLOUDEVENT = "not_a_cloudevent"
    INVALID_IDENTITY = "invalid_identity"
    SCHEMA_INVALID = "schema_invalid"
    UNKNOWN_SCHEMA = "unknown_schema"
    UNKNOWN_RESOURCE_TYPE = "unknown_resource_type"
    PROVIDER_MISMATCH = "provider_mismatch"
    OVERSIZE = "oversize"
    DELIVERY_EXHAUSTED = "delivery_exhausted"
    MALFORMED_PUSH = "malformed_push"  # the push request is not a Pub/Sub delivery (no message, bad base64)
    MALFORMED_INTERNAL = "malformed_internal"  # a message between our own functions breaks its contract
    UNCLASSIFIED = "unclassified"  # a dead letter that says nothing of why it failed
    UNSTORABLE = "unstorable"  # Firestore refused the write: a limit no check caught before
    CALLBACK_EXHAUSTED = "callback_exhausted"  # a callback's receiver failed for its whole retry period
    CALLBACK_SECRET_UNAVAILABLE = "callback_secret_unavailable"  # no signing secret of the callback opens
    UNKNOWN_PROVIDER = "unknown_provider"  # a NATS subject whose server-written prefix names no provider of ours
    PUBSUB_REFUSED = "pubsub_refused"  # Pub/Sub answered a publish with a permanent error (InvalidArgument): no retry fixes it


class DcmError(Exception):
    """Base of every error this project raises on purpose."""


class Rejected(DcmError):
    """A message that can never be processed: dead-letter it and ack."""

    def __init__(self, reason: Reason, message: str, detail: Mapping[str, Any] | None = None,
                 key: str | None = None):
        super().__init__(f"{reason.value}: {message}")
        self.reason = reason
        self.message = message
        self.detail: dict[str, Any] = dict(detail or {})
        self.key = key  # the resource key, when it was known before the rejection


class Transient(DcmError):
    """A dependency failed; raise so that Pub/Sub redelivers the message."""


class KeysUnavailable(Transient):
    """Google's public signing keys could not be fetched: no token can be checked now (a push is redelivered,
    a change to the api answered 503), and none is taken unchecked."""


class SecretUnavailable(DcmError):
    """A stored signing secret the keyring cannot open: sealed with a key no longer in the ring, or altered."""


class ConfigError(DcmError):
    """The deployment is misconfigured (missing setting, unknown topic)."""


class Unauthorized(DcmError):
    """A token that fails a check: a push request's OIDC token, an api caller's ID token (production only)."""


class InvalidRequest(DcmError):
    """An API request that cannot be answered as asked: an HTTP 4xx problem (RFC 9457)."""

    status = 400
    title = "Bad request"

    def __init__(self, detail: str, parameter: str | None = None):
        super().__init__(detail)
        self.detail = detail
        self.parameter = parameter


class NotFound(InvalidRequest):
    status = 404
    title = "Not found"


class Gone(InvalidRequest):
    """A change-feed cursor older than the feed's retention: resynchronise from the resources."""

    status = 410
    title = "Cursor expired"


class Unauthenticated(InvalidRequest):
    """A request that would change something, from a caller the api cannot name."""

    status = 401
    title = "Unauthenticated"


class Forbidden(InvalidRequest):
    """A request the caller may not make: a cross-site one, or a change to another's callback."""

    status = 403
    title = "Forbidden"


class LimitReached(InvalidRequest):
    """A registration over a configured cap (callbacks per caller, in total)."""

    status = 409
    title = "Limit reached"


class Conflict(InvalidRequest):
    """A request that names more than one thing where one is meant (a DCM instance id several resources hold)."""

    status = 409
    title = "Conflict"


class TooManyRequests(InvalidRequest):
    """Over a cap on what is open at once (live streams): retry later."""

    status = 429
    title = "Too many requests"
