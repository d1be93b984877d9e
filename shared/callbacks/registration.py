"""A registered webhook callback (the Deltacloud tracker's design): what it is for, how it is signed,
and how it is shown. No I/O.

A registration (``Callback``) is one resource's (the tracker's ``PUT .../callback``) or a
filter's; its signing secret is shown once, at creation, and a rotation keeps the previous
one signing for a grace period.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import secrets
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Callable, Mapping

from dcm_status_contracts import timeutil
from dcm_status_contracts.errors import InvalidRequest, SecretUnavailable
from dcm_status_contracts.status_changed import labels_of, parse_label

from shared.callbacks.hooks import redact_hook, redact_urls

SECRET_PREFIX = "whsec_"
MAX_TOKEN_CHARS = 256
NONE = "none"  # hook=none deletes a resource's callback (the tracker's special token)
DEFAULT_RETRY_SECONDS = 3 * 24 * 3600  # give up after 3 days (the tracker's "a while")
MAX_RETRY_SECONDS = 7 * 24 * 3600  # no longer than the callback topics keep a message
DEFAULT_ROTATION_GRACE_SECONDS = 24 * 3600  # the old secret still signs this long after a rotation


def new_secret() -> str:
    """A signing secret (shown once, at creation): 32 random bytes, as Standard Webhooks writes them."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


# ---- the registration ---------------------------------------------------------------------
class Scope(enum.StrEnum):
    RESOURCE = "resource"  # one resource's changes (the tracker's PUT .../callback)
    FILTER = "filter"  # every change a filter matches (provider, type, new status, label)


@dataclass(frozen=True)
class Filter:
    """Which changes a filter callback is sent; an empty filter matches every change."""

    provider: str | None = None
    resource_type: str | None = None
    status: str | None = None  # the new status
    label: tuple[str, str] | None = None  # (tenant|region|environment, value) of the resource

    @classmethod
    def of(cls, doc: Mapping[str, Any] | None) -> "Filter":
        """From a request's or a stored ``filter`` object; InvalidRequest on anything else."""
        doc = doc or {}
        if not isinstance(doc, Mapping):
            raise InvalidRequest("filter: expected an object of provider, type, status, label", "filter")
        unknown = sorted(set(doc) - {"provider", "type", "status", "label"})
        if unknown:
            raise InvalidRequest(f"filter: unknown field {unknown[0]!r}; a filter has provider, type, status, "
                                 "label", "filter")
        values = {}
        for name in ("provider", "type", "status", "label"):
            value = doc.get(name)
            if value is not None and (not isinstance(value, str) or not 0 < len(value) <= 256):
                raise InvalidRequest(f"filter.{name}: expected 1 to 256 characters", "filter")
            values[name] = value
        label = parse_label(values["label"], "filter.label") if values["label"] else None
        return cls(values["provider"], values["type"], values["status"], label)

    def to_doc(self) -> dict[str, str]:
        doc = {"provider": self.provider, "type": self.resource_type, "status": self.status,
               "label": f"{self.label[0]}:{self.label[1]}" if self.label else None}
        return {k: v for k, v in doc.items() if v is not None}

    def matches(self, change: Mapping[str, Any]) -> bool:
        """Whether a change (an item of the change feed) is one this filter asks for."""
        if self.provider and change.get("provider") != self.provider:
            return False
        if self.resource_type and change.get("resourceType") != self.resource_type:
            return False
        if self.status and change.get("newStatus") != self.status:
            return False
        if self.label:
            resource = change.get("resource")
            return labels_of(resource if isinstance(resource, Mapping) else {}).get(self.label[0]) == self.label[1]
        return True


@dataclass(frozen=True)
class SigningSecret:
    """A signing secret. Stored sealed only (``sealed``: ``{"keyId", "box"}``, AES-GCM under a key
    Firestore readers do not hold: shared/runtime/secretbox.py); ``value``, in clear, lives in memory
    only: a new secret, or one opened with the keyring. A document written before encryption holds
    ``{"value"}``: it is read as it is, and sealed by the next write of the callback's secrets or by
    ``dcm-status callbacks rekey``."""

    value: str | None = None
    expires_at: str | None = None  # set when a rotation replaced it: it signs until then
    sealed: Mapping[str, str] | None = None

    def in_force(self, now: datetime) -> bool:
        return self.expires_at is None or timeutil.parse(self.expires_at) > now

    def to_doc(self) -> dict[str, Any]:
        if self.sealed is None:
            raise ValueError("a signing secret is stored sealed, never in clear: seal it first (Callback.sealed)")
        return {"keyId": self.sealed["keyId"], "box": self.sealed["box"], "expiresAt": self.expires_at}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> "SigningSecret":
        if "value" in doc:  # stored in clear, before encryption
            return cls(doc["value"], doc.get("expiresAt"))
        return cls(None, doc.get("expiresAt"), {"keyId": doc["keyId"], "box": doc["box"]})


@dataclass(frozen=True)
class Callback:
    """A registered callback: where to POST, what for, and how it is signed (stored as
    ``callbacks/{id}``, its delivery stats beside it under ``stats``)."""

    id: str
    hook: str
    scope: Scope
    created_at: str
    secrets: tuple[SigningSecret, ...]
    token: str | None = None
    key: str | None = None  # the resource, for a RESOURCE callback
    filter: Filter = field(default_factory=Filter)
    retry_seconds: int = DEFAULT_RETRY_SECONDS
    disabled: str | None = None  # why it is not called any more (a 410 from the receiver), or None
    owner: str | None = None  # who registered it (the api's caller identity); None: registered before owners

    def matches(self, change: Mapping[str, Any]) -> bool:
        if self.scope is Scope.RESOURCE:
            return change.get("key") == self.key
        return self.filter.matches(change)

    def signing_secrets(self, now: datetime) -> list[str]:
        """The secrets that sign a delivery at ``now``: the current one, and during a rotation's grace
        the previous one too (those opened: ``opened``)."""
        return [s.value for s in self.secrets if s.in_force(now) and s.value is not None]

    def sealed(self, seal: Callable[[str, str], Mapping[str, str]]) -> "Callback":
        """This callback with each secret not yet sealed sealed for storage (``seal(clear, callback id)``:
        shared/runtime/secretbox.py); one already sealed stays as it is."""
        return replace(self, secrets=tuple(s if s.sealed is not None else replace(s, sealed=dict(seal(s.value, self.id)))
                                           for s in self.secrets))

    def opened(self, open_secret: Callable[[Mapping[str, str], str], str], now: datetime
               ) -> tuple["Callback", tuple[str, ...]]:
        """This callback with its secrets in force at ``now`` in clear (``open_secret(sealed, callback
        id)``), and why each that would not open did not (SecretUnavailable: a dropped key, an altered box)."""
        out, failed = [], []
        for s in self.secrets:
            if s.value is None and s.in_force(now):
                try:
                    s = replace(s, value=open_secret(s.sealed, self.id))
                except SecretUnavailable as exc:
                    failed.append(str(exc))
            out.append(s)
        return replace(self, secrets=tuple(out)), tuple(failed)

    def rotated(self, now: datetime, grace_seconds: int) -> tuple["Callback", str]:
        """This callback with a new secret (returned, to be shown once); the current one signs on
        for ``grace_seconds``, older ones are dropped."""
        new = new_secret()
        until = timeutil.format(now + timedelta(seconds=grace_seconds))
        kept = tuple(replace(s, expires_at=until) for s in self.secrets if s.expires_at is None and grace_seconds > 0)
        return replace(self, secrets=(SigningSecret(new), *kept)), new

    def to_doc(self) -> dict[str, Any]:
        return {"hook": self.hook, "scope": self.scope.value, "createdAt": self.created_at, "token": self.token,
                "key": self.key, "filter": self.filter.to_doc(), "retrySeconds": self.retry_seconds,
                "disabled": self.disabled, "owner": self.owner,
                "secrets": [s.to_doc() for s in self.secrets]}

    @classmethod
    def from_doc(cls, callback_id: str, doc: Mapping[str, Any]) -> "Callback":
        return cls(id=callback_id, hook=doc["hook"], scope=Scope(doc["scope"]), created_at=doc["createdAt"],
                   secrets=tuple(SigningSecret.from_doc(s) for s in doc.get("secrets", ())),
                   token=doc.get("token"), key=doc.get("key"), filter=Filter.of(doc.get("filter")),
                   retry_seconds=int(doc.get("retrySeconds", DEFAULT_RETRY_SECONDS)), disabled=doc.get("disabled"),
                   owner=doc.get("owner"))


def public(callback_id: str, doc: Mapping[str, Any], full: bool = True) -> dict[str, Any]:
    """A stored callback as the API and the CLI show it: never its secrets (shown once, at creation);
    when a rotation's grace is running, until when the previous secret signs. Not ``full`` (to anyone
    but its owner): no token, and the hook without its path, query or fragment (``redacted`` says so)."""
    cb = Callback.from_doc(callback_id, doc)
    previous = [s.expires_at for s in cb.secrets if s.expires_at]
    stats = {**EMPTY_STATS, **(doc.get("stats") or {})}
    if not full and isinstance(stats["lastError"], str):  # an error quotes the URL it failed on
        stats["lastError"] = redact_urls(stats["lastError"])
    return {"id": cb.id, "hook": cb.hook if full else redact_hook(cb.hook), "scope": cb.scope.value,
            "key": cb.key, "filter": cb.filter.to_doc() if cb.scope is Scope.FILTER else None,
            "token": cb.token if full else None, "owner": cb.owner, "redacted": not full,
            "retrySeconds": cb.retry_seconds, "createdAt": cb.created_at, "disabled": cb.disabled,
            "previousSecretValidUntil": max(previous) if previous else None, "stats": stats}


EMPTY_STATS: Mapping[str, Any] = {"delivered": 0, "failedAttempts": 0, "exhausted": 0, "consecutiveFailures": 0,
                                  "lastSuccessAt": None, "lastFailureAt": None, "lastStatus": None,
                                  "lastError": None}


def resource_callback_id(key: str) -> str:
    """A resource has one callback (a new PUT overwrites it): its id derives from the key."""
    return "r" + hashlib.sha256(key.encode()).hexdigest()[:16]


def new_callback_id() -> str:
    return "f" + secrets.token_hex(8)


def check_token(token: Any) -> str | None:
    if token is None or token == "":
        return None
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
        raise InvalidRequest(f"token: expected text of at most {MAX_TOKEN_CHARS} characters", "token")
    return token


def check_retry_seconds(value: Any) -> int:
    if value is None:
        return DEFAULT_RETRY_SECONDS
    if isinstance(value, float) and value.is_integer():  # JSON's 60.0 is the integer 60
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RETRY_SECONDS:
        raise InvalidRequest(f"retrySeconds: expected an integer from 1 to {MAX_RETRY_SECONDS} (7 days)",
                             "retrySeconds")
    return value
