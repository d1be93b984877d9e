"""Webhook callbacks (the Deltacloud tracker's design): what a receiver is sent, how it is
signed, and which hooks may be called at all. No I/O: resolving a hook's host is the
caller's (shared/runtime), this module only judges the addresses it resolved to.

Body, as the tracker sends it, plus the change event's id, the resource's key, the change's
commit time and its change-feed cursor, so that a receiver can order what it gets (retries
can deliver an older change after a newer one: order by ``committedAt``, then ``cursor``)
and catch up from ``GET /v1/changes?after=CURSOR``::

    {"id", "token", "key", "cursor", "committedAt", "changes": [{"attribute", "old", "new"}], "resource"}

A registration (``Callback``) is one resource's (the tracker's ``PUT .../callback``) or a
filter's; its signing secret is shown once, at creation, and a rotation keeps the previous
one signing for a grace period.

Headers per the Standard Webhooks specification (``webhook-id``, ``webhook-timestamp``,
``webhook-signature``: HMAC-SHA256 over ``id.timestamp.body``), made by the
``standardwebhooks`` library, so a receiver verifies with any Standard Webhooks library.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import ipaddress
import re
import secrets
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import urlsplit

import orjson
from standardwebhooks.webhooks import Webhook

from . import timeutil
from .errors import InvalidRequest, SecretUnavailable
from .status_changed import labels_of, parse_label

SECRET_PREFIX = "whsec_"
MAX_HOOK_CHARS = 2048
MAX_TOKEN_CHARS = 256
# Names that reach a cloud's metadata server whatever they resolve to.
METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata.google.internal.", "metadata", "metadata."})
NONE = "none"  # hook=none deletes a resource's callback (the tracker's special token)
DEFAULT_RETRY_SECONDS = 3 * 24 * 3600  # give up after 3 days (the tracker's "a while")
MAX_RETRY_SECONDS = 7 * 24 * 3600  # no longer than the callback topics keep a message
DEFAULT_ROTATION_GRACE_SECONDS = 24 * 3600  # the old secret still signs this long after a rotation


def new_secret() -> str:
    """A signing secret (shown once, at creation): 32 random bytes, as Standard Webhooks writes them."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def parse_hook(url: str, local_mode: bool) -> tuple[str, int]:
    """The host and port a hook URL calls, or InvalidRequest saying why it may not be called.

    https only (plain http only in local mode, which says so); no credentials in the URL.
    """
    if not url or len(url) > MAX_HOOK_CHARS:
        raise InvalidRequest(f"hook: expected an absolute URL of at most {MAX_HOOK_CHARS} characters", "hook")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidRequest(f"hook: not a URL ({exc})", "hook") from exc
    allowed = ("https", "http") if local_mode else ("https",)
    if parts.scheme not in allowed:
        raise InvalidRequest(f"hook: the scheme must be {' or '.join(allowed)}"
                             + ("" if local_mode else " (plain http is accepted by the local stack only)"), "hook")
    if not parts.hostname:
        raise InvalidRequest("hook: the URL has no host", "hook")
    if parts.username or parts.password:
        raise InvalidRequest("hook: no credentials in the URL; use the callback's token", "hook")
    if parts.hostname.lower() in METADATA_HOSTS:
        raise InvalidRequest(f"hook: {parts.hostname} is a metadata server", "hook")
    if ":" not in parts.hostname:  # a name, not an IPv6 literal: every label 1 to 63 characters
        try:
            parts.hostname.encode("idna")
        except UnicodeError as exc:
            raise InvalidRequest(f"hook: {parts.hostname[:100]!r} is not a valid host name", "hook") from exc
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


NAT64 = ipaddress.ip_network("64:ff9b::/96")  # the well-known NAT64 prefix (RFC 6052): an IPv4 address in its last 32 bits
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated IPv4-compatible addresses ::a.b.c.d (RFC 4291)
# Forms that are an IPv4 address, nothing more: judged as that address.
_PURE_FORMS = ("IPv4-mapped", "NAT64")


def embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[str, tuple[ipaddress.IPv4Address, ...]] | None:
    """The IPv4 address(es) an IPv6 address carries, and the form that carries them: IPv4-mapped
    (``::ffff:a.b.c.d``), NAT64 (``64:ff9b::a.b.c.d``), IPv4-compatible (``::a.b.c.d``), 6to4
    (``2002:AABB:CCDD::``) and Teredo (``2001:0::/32``: its server and its client); None for any other."""
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.ipv4_mapped is not None:
        return "IPv4-mapped", (ip.ipv4_mapped,)
    if ip in NAT64:
        return "NAT64", (low32,)
    if ip in IPV4_COMPATIBLE and int(ip) > 1:  # :: and ::1 are the unspecified and loopback addresses
        return "IPv4-compatible", (low32,)
    if ip.sixtofour is not None:
        return "6to4", (ip.sixtofour,)
    if ip.teredo is not None:
        return "Teredo", ip.teredo
    return None


def _why_not(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, local_mode: bool) -> str | None:
    """Why ``ip`` itself (its embedded IPv4 aside) may not be called, or None."""
    if ip.is_loopback:
        return None if local_mode else f"{ip} is a loopback address"
    if ip.is_link_local:
        return f"{ip} is link-local (the metadata server's range)"
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        return f"{ip} is site-local (fec0::/10)"
    if ip.is_multicast:
        return f"{ip} is a multicast address"
    if ip.is_unspecified:
        return f"{ip} is not a public address (unspecified)"
    if ip.is_reserved:
        return f"{ip} is not a public address (reserved range)"
    if ip.is_private or not ip.is_global:
        return f"{ip} is not a public address"
    return None


def blocked(address: str, local_mode: bool) -> str | None:
    """Why a hook may not be called at ``address`` (an IP it resolved to), or None when it may.

    Anything not globally routable is refused: loopback, private, link-local (the metadata server
    169.254.169.254 included), site-local, shared, multicast, reserved, unspecified. An IPv6 address
    that carries an IPv4 one (``embedded_ipv4``: mapped, NAT64, compatible, 6to4, Teredo) is refused
    when that IPv4 address is; a mapped or NAT64 one is then judged as that IPv4 address, the others
    as themselves too (IPv4-compatible is a reserved range, Teredo a non-global one). Local mode
    allows loopback, for tests.
    """
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"{address!r} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        found = embedded_ipv4(ip)
        if found:
            form, carried = found
            for v4 in carried:
                why = _why_not(v4, local_mode)
                if why:
                    return f"{ip} is {form}, carrying {why}"
            if form in _PURE_FORMS:
                return None
            if form == "IPv4-compatible":
                return f"{ip} is IPv4-compatible (deprecated, RFC 4291): not a public address"
    return _why_not(ip, local_mode)


def is_loopback(address: str) -> bool:
    """Whether ``address`` is loopback (127/8, ::1, or an IPv4-mapped or NAT64 form of 127/8)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        found = embedded_ipv4(ip)
        if found and found[0] in _PURE_FORMS:
            ip = found[1][0]
    return ip.is_loopback


def scheme_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def check_port(scheme: str, port: int, addresses: Iterable[str], local_mode: bool,
               extra_ports: Iterable[int] = ()) -> None:
    """InvalidRequest unless a hook's port is its scheme's (443 for https, 80 for http where http is
    allowed) or one configured (``DCM_HOOK_PORTS``): a hook is no port scanner. The local stack allows
    any port on loopback, where its test receivers listen."""
    allowed = {scheme_port(scheme), *extra_ports}
    if port in allowed:
        return
    found = list(addresses)
    if local_mode and found and all(is_loopback(a) for a in found):
        return
    raise InvalidRequest(f"hook: port {port} is not allowed: {scheme} hooks call port "
                         f"{' or '.join(map(str, sorted(allowed)))} (more: DCM_HOOK_PORTS)", "hook")


def check_addresses(host: str, addresses: Iterable[str], local_mode: bool) -> None:
    """InvalidRequest unless every address ``host`` resolved to may be called (one bad one is enough)."""
    found = list(addresses)
    if not found:
        raise InvalidRequest(f"hook: {host} does not resolve", "hook")
    for address in found:
        why = blocked(address, local_mode)
        if why:
            raise InvalidRequest(f"hook: {host} resolves to {address}: {why}", "hook")


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


class Outcome(enum.StrEnum):
    """What one call of a hook came to, as a category (never the receiver's error text or timing:
    ``POST /v1/callbacks/{id}/test`` answers this, so it is no port scanner)."""

    DELIVERED = "delivered"  # a 2xx
    REFUSED_BY_RECEIVER = "refused_by_receiver"  # an answer, not a 2xx (a redirect included: not followed)
    UNREACHABLE = "unreachable"  # no connection: the name does not resolve, refused, reset, no route
    TIMEOUT = "timeout"  # no answer within the hook timeout
    TLS_ERROR = "tls_error"  # the TLS handshake or the certificate check failed
    BLOCKED_ADDRESS = "blocked_address"  # the hook's address, port or scheme may not be called
    SECRET_UNAVAILABLE = "secret_unavailable"  # no signing secret of the callback opens (a dropped key): not sent


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


REDACTED = "\u2026"  # what stands for a hook's path and query where they are not shown


def redact_hook(url: str) -> str:
    """A hook as shown to anyone but its owner: scheme, host and port only (a path or query often
    carries a credential), e.g. ``https://hooks.example.com/\u2026``."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return REDACTED
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{f':{port}' if port else ''}/{REDACTED}" if host else REDACTED


_URL = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*)://([^\s\"'<>]*)")
_URL_PATH = re.compile(r"(\burl: )/[^\s\"'<>)]*")  # urllib3's "Max retries exceeded with url: /path?query"


def redact_urls(text: str) -> str:
    """``text`` (a message that may quote a hook, e.g. "retries exhausted") with every URL cut to its
    scheme, host and port, and every quoted request path dropped."""
    text = _URL.sub(lambda m: redact_hook(m.group(0)), text)
    return _URL_PATH.sub(lambda m: m.group(1) + REDACTED, text)


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


def ping(callback_id: str, token: str | None, at: datetime) -> tuple[str, bytes]:
    """The id and body of a test delivery (``callbacks test``): the callback's shape, no change."""
    ping_id = f"test-{callback_id}-{int(at.timestamp())}"
    return ping_id, orjson.dumps({"id": ping_id, "test": True, "token": token, "key": None, "cursor": None,
                                  "committedAt": timeutil.format(at), "changes": [], "resource": None})
