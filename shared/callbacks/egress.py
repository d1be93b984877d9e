"""Calling a receiver's hook, safely: resolve its host, refuse it unless every address is one we
may call and its port is allowed (hooks.py), then connect to that vetted
address itself, never to whatever the name resolves to a moment later (DNS rebinding), with the
hook's host name for TLS (SNI and certificate check) and the Host header. Redirects are not
followed: a 3xx is a failure.

What a call came to is a ``CallOutcome`` category; the error text kept beside it (for the callback's
stats and logs) never holds the hook's path or query, which often carry a credential.
"""

from __future__ import annotations

import enum
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping
from urllib.parse import urlsplit

import urllib3
from dcm_status_contracts.errors import InvalidRequest

from shared.callbacks import hooks

__all__ = ["CallOutcome", "HookResponse", "InvalidRequest", "Refused", "post", "resolve", "scrub", "vetted_address"]

Resolver = Callable[[str, int], list[str]]


class CallOutcome(enum.StrEnum):
    """What one call of a hook came to, as a category (never the receiver's error text or timing:
    ``POST /v1/callbacks/{id}/test`` answers this, so it is no port scanner)."""

    DELIVERED = "delivered"  # a 2xx
    REFUSED_BY_RECEIVER = "refused_by_receiver"  # an answer, not a 2xx (a redirect included: not followed)
    UNREACHABLE = "unreachable"  # no connection: the name does not resolve, refused, reset, no route
    TIMEOUT = "timeout"  # no answer within the hook timeout
    TLS_ERROR = "tls_error"  # the TLS handshake or the certificate check failed
    BLOCKED_ADDRESS = "blocked_address"  # the hook's address, port or scheme may not be called
    SECRET_UNAVAILABLE = "secret_unavailable"  # no signing secret of the callback opens (a dropped key): not sent


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (IPv4 and IPv6)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class HookResponse:
    """What one call of a hook came to."""

    status: int | None  # the HTTP status, None when no answer came
    error: str | None  # why it failed (None on a 2xx); never the hook's path or query
    address: str | None  # the address connected to
    seconds: float
    outcome: CallOutcome | None = None  # None: derived from status and error (a test's fake)

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def gone(self) -> bool:
        """410: the receiver says the callback is no more (the callback is disabled)."""
        return self.status == 410

    @property
    def category(self) -> CallOutcome:
        if self.outcome is not None:
            return self.outcome
        if self.ok:
            return CallOutcome.DELIVERED
        return CallOutcome.REFUSED_BY_RECEIVER if self.status is not None else CallOutcome.UNREACHABLE


class Refused(InvalidRequest):
    """A hook that may not be called, and the category: blocked, or a name that does not resolve."""

    def __init__(self, detail: str, outcome: CallOutcome):
        super().__init__(detail, "hook")
        self.outcome = outcome


def vetted_address(url: str, local_mode: bool, resolver: Resolver = resolve,
                   ports: Iterable[int] = ()) -> tuple[str, int, str]:
    """(host, port, address to connect to), or InvalidRequest (``Refused``) saying why the hook may not
    be called. ``ports``: ports allowed beside the scheme's (DCM_HOOK_PORTS)."""
    host, port = hooks.parse_hook(url, local_mode)
    addresses = resolver(host, port)
    try:
        hooks.check_addresses(host, addresses, local_mode)
        hooks.check_port(urlsplit(url).scheme, port, addresses, local_mode, ports)
    except InvalidRequest as exc:
        raise Refused(exc.detail, CallOutcome.BLOCKED_ADDRESS if addresses else CallOutcome.UNREACHABLE) from None
    return host, port, addresses[0]


def _failure(exc: Exception) -> CallOutcome:
    """The category of a failed call."""
    if isinstance(exc, urllib3.exceptions.NewConnectionError):  # a ConnectTimeoutError subclass, for history
        return CallOutcome.UNREACHABLE
    if isinstance(exc, urllib3.exceptions.TimeoutError):
        return CallOutcome.TIMEOUT
    if isinstance(exc, urllib3.exceptions.SSLError) or isinstance(getattr(exc, "__context__", None), ssl.SSLError):
        return CallOutcome.TLS_ERROR
    return CallOutcome.UNREACHABLE


def scrub(text: str, url: str) -> str:
    """``text`` without the hook's path and query (they often carry a credential)."""
    parts = urlsplit(url)
    for secret in sorted({url, parts.path + (f"?{parts.query}" if parts.query else ""), parts.query,
                          parts.path}, key=len, reverse=True):
        if secret and secret != "/":
            text = text.replace(secret, hooks.redact_hook(url) if secret == url else "/" + hooks.ELIDED)
    return text


def post(url: str, body: bytes, headers: Mapping[str, str], timeout: float, local_mode: bool,
         resolver: Resolver = resolve, ports: Iterable[int] = ()) -> HookResponse:
    """POST ``body`` to the hook ``url``; a refused hook, a timeout or a non-2xx is a failed HookResponse."""
    started = time.monotonic()
    try:
        host, port, address = vetted_address(url, local_mode, resolver, ports)
    except Refused as exc:
        return HookResponse(None, scrub(exc.detail, url), None, time.monotonic() - started, exc.outcome)
    except InvalidRequest as exc:
        return HookResponse(None, scrub(exc.detail, url), None, time.monotonic() - started,
                            CallOutcome.BLOCKED_ADDRESS)
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    t = urllib3.Timeout(connect=timeout, read=timeout)
    if parts.scheme == "https":
        pool: urllib3.HTTPConnectionPool = urllib3.HTTPSConnectionPool(
            address, port, timeout=t, retries=False, server_hostname=host, assert_hostname=host,
            cert_reqs="CERT_REQUIRED")
    else:
        pool = urllib3.HTTPConnectionPool(address, port, timeout=t, retries=False)
    host_header = host if port in (80, 443) else f"{host}:{port}"
    try:
        response = pool.urlopen("POST", target, body=body, headers={**headers, "host": host_header},
                                redirect=False, preload_content=True, assert_same_host=False)
    except urllib3.exceptions.HTTPError as exc:
        return HookResponse(None, scrub(f"{type(exc).__name__}: {exc}", url)[:500], address,
                            time.monotonic() - started, _failure(exc))
    finally:
        pool.close()
    ok = 200 <= response.status < 300
    return HookResponse(response.status, None if ok else f"HTTP {response.status}", address,
                        time.monotonic() - started, CallOutcome.DELIVERED if ok else CallOutcome.REFUSED_BY_RECEIVER)
