"""Calling a receiver's hook, safely: resolve its host, refuse it unless every address is one we
may call (shared/contracts/callback.py), then connect to that vetted address itself, never to
whatever the name resolves to a moment later (DNS rebinding), with the hook's host name for TLS
(SNI and certificate check) and the Host header. Redirects are not followed: a 3xx is a failure.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Callable, Mapping
from urllib.parse import urlsplit

import urllib3

from shared.contracts import callback
from shared.contracts.errors import InvalidRequest

Resolver = Callable[[str, int], list[str]]


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (IPv4 and IPv6)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class HookResponse:
    """What one call of a hook came to."""

    status: int | None  # the HTTP status, None when no answer came
    error: str | None  # why it failed (None on a 2xx)
    address: str | None  # the address connected to
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def gone(self) -> bool:
        """410: the receiver says the callback is no more (the callback is disabled)."""
        return self.status == 410


def vetted_address(url: str, local_mode: bool, resolver: Resolver = resolve) -> tuple[str, int, str]:
    """(host, port, address to connect to), or InvalidRequest saying why the hook may not be called."""
    host, port = callback.parse_hook(url, local_mode)
    addresses = resolver(host, port)
    callback.check_addresses(host, addresses, local_mode)
    return host, port, addresses[0]


def post(url: str, body: bytes, headers: Mapping[str, str], timeout: float, local_mode: bool,
         resolver: Resolver = resolve) -> HookResponse:
    """POST ``body`` to the hook ``url``; a refused hook, a timeout or a non-2xx is a failed HookResponse."""
    started = time.monotonic()
    try:
        host, port, address = vetted_address(url, local_mode, resolver)
    except InvalidRequest as exc:
        return HookResponse(None, exc.detail, None, time.monotonic() - started)
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
        return HookResponse(None, f"{type(exc).__name__}: {exc}"[:500], address, time.monotonic() - started)
    finally:
        pool.close()
    error = None if 200 <= response.status < 300 else f"HTTP {response.status}"
    return HookResponse(response.status, error, address, time.monotonic() - started)
