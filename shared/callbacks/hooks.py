"""Which hooks may be called at all, and how a hook is shown to anyone but its owner. No I/O:
resolving a hook's host is egress.py's; this module only judges the URL and the addresses it resolved to.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Iterable
from urllib.parse import urlsplit

from dcm_status_contracts.errors import InvalidRequest

MAX_HOOK_CHARS = 2048
# Names that reach a cloud's metadata server whatever they resolve to.
METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata.google.internal.", "metadata", "metadata."})


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
    return parts.hostname, port or scheme_port(parts.scheme)


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


ELIDED = "\u2026"  # what stands for a hook's path and query where they are not shown (never a credential's mark)


def redact_hook(url: str) -> str:
    """A hook as shown to anyone but its owner: scheme, host and port only (a path or query often
    carries a credential), e.g. ``https://hooks.example.com/\u2026``."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return ELIDED
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{f':{port}' if port else ''}/{ELIDED}" if host else ELIDED


_URL = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*)://([^\s\"'<>]*)")
_URL_PATH = re.compile(r"(\burl: )/[^\s\"'<>)]*")  # urllib3's "Max retries exceeded with url: /path?query"


def redact_urls(text: str) -> str:
    """``text`` (a message that may quote a hook, e.g. "retries exhausted") with every URL cut to its
    scheme, host and port, and every quoted request path dropped."""
    text = _URL.sub(lambda m: redact_hook(m.group(0)), text)
    return _URL_PATH.sub(lambda m: m.group(1) + ELIDED, text)
