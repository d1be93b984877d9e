"""Webhook callbacks (the Deltacloud tracker's design): what a receiver is sent, how it is
signed, and which hooks may be called at all. No I/O: resolving a hook's host is the
caller's (shared/runtime), this module only judges the addresses it resolved to.

Body, as the tracker sends it, plus the change event's id and the resource's key and
change time so that a receiver can order what it gets::

    {"id", "token", "key", "committedAt", "changes": [{"attribute", "old", "new"}], "resource"}

Headers per the Standard Webhooks specification (``webhook-id``, ``webhook-timestamp``,
``webhook-signature``: HMAC-SHA256 over ``id.timestamp.body``), made by the
``standardwebhooks`` library, so a receiver verifies with any Standard Webhooks library.
"""

from __future__ import annotations

import base64
import ipaddress
import secrets
from datetime import datetime
from typing import Any, Iterable, Mapping
from urllib.parse import urlsplit

import orjson
from standardwebhooks.webhooks import Webhook

from shared.contracts.errors import InvalidRequest

SECRET_PREFIX = "whsec_"
MAX_HOOK_CHARS = 2048
MAX_TOKEN_CHARS = 256
# Names that reach a cloud's metadata server whatever they resolve to.
METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata.google.internal.", "metadata", "metadata."})


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
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


def blocked(address: str, local_mode: bool) -> str | None:
    """Why a hook may not be called at ``address`` (an IP it resolved to), or None when it may.

    Anything not globally routable is refused: loopback, private, link-local (the metadata server
    169.254.169.254 included), shared, multicast, reserved, unspecified, and their IPv6 forms (an
    IPv4-mapped address is judged as the IPv4 one). Local mode allows loopback, for tests.
    """
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"{address!r} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return None if local_mode else f"{ip} is a loopback address"
    if ip.is_link_local:
        return f"{ip} is link-local (the metadata server's range)"
    if ip.is_private or not ip.is_global:
        return f"{ip} is not a public address"
    if ip.is_multicast:
        return f"{ip} is a multicast address"
    return None


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
    """What a receiver is sent for one change (``change``: an item of the change feed)."""
    return orjson.dumps({"id": change["id"], "token": token, "key": change["key"],
                         "committedAt": change["committedAt"], "changes": change["changes"],
                         "resource": change["resource"]})


def signed_headers(secret: str, delivery_id: str, at: datetime, payload: bytes) -> dict[str, str]:
    """The Standard Webhooks headers of one delivery (``at``: when it is sent)."""
    signature = Webhook(secret).sign(delivery_id, at, payload.decode())
    return {"webhook-id": delivery_id, "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": signature, "content-type": "application/json"}


def signatures(secrets_in_force: Iterable[str], delivery_id: str, at: datetime, payload: bytes) -> str:
    """Every signature of one delivery, space-separated: during a rotation the old and the new
    secret both sign, and a receiver holding either verifies (as the specification provides)."""
    return " ".join(Webhook(s).sign(delivery_id, at, payload.decode()) for s in secrets_in_force)
