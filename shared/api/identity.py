"""Who is calling the api, and whether a request may change anything.

The caller: in production the api is private behind Cloud Run IAM, which lets a request in only
with a Google-signed ID token it has verified (``gcloud run services proxy`` attaches the
admin's): the caller is that token's ``email``. Behind IAP (``DCM_API_IAP``) it is the
``X-Goog-Authenticated-User-Email`` IAP sets (``accounts.google.com:`` stripped). Locally
(``DCM_LOCAL_MODE``) every caller is ``local``. Admins (``DCM_API_ADMINS``) may change any callback.

Cross-site request forgery: a mutating request (POST, PUT, PATCH, DELETE) must carry the header
``DCM-Request: 1``, which a cross-site HTML form cannot send and a cross-site script can send only
after a CORS preflight the api never grants; and a request whose ``Origin`` is present and is not
the api's own is refused (403). No I/O.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import urlsplit

import orjson
from dcm_status_contracts.errors import Forbidden, Unauthenticated

LOCAL = "local"
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CSRF_HEADER = "DCM-Request"
IAP_HEADER = "X-Goog-Authenticated-User-Email"
IAP_PREFIX = "accounts.google.com:"
MAX_IDENTITY_CHARS = 320


@dataclass(frozen=True)
class Caller:
    """Who sent a request: an identity (None: nobody the api can name) and whether an admin."""

    identity: str | None
    admin: bool = False

    def owns(self, owner: str | None) -> bool:
        return self.identity is not None and owner == self.identity

    def may_change(self, owner: str | None) -> bool:
        """The callback's owner or an admin (a callback with no recorded owner: admins only)."""
        return self.admin or self.owns(owner)


def _bearer_email(authorization: str | None) -> str | None:
    """The ``email`` claim of the request's bearer ID token (Cloud Run IAM verified its signature,
    audience and expiry before the request reached the api), or None."""
    if not authorization or not authorization.lower().startswith("bearer "):
        return None
    parts = authorization[7:].strip().split(".")
    if len(parts) != 3:
        return None
    try:
        claims = orjson.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return None
    email = claims.get("email") if isinstance(claims, dict) else None
    return email if isinstance(email, str) and 0 < len(email) <= MAX_IDENTITY_CHARS else None


def _iap_email(value: str | None) -> str | None:
    if not value:
        return None
    email = value[len(IAP_PREFIX):] if value.startswith(IAP_PREFIX) else value
    return email if 0 < len(email) <= MAX_IDENTITY_CHARS else None


def caller_of(headers: Mapping[str, str], local_mode: bool, iap: bool, admins: tuple[str, ...]) -> Caller:
    """The caller of a request, from what the platform in front of the api verified."""
    if local_mode:
        identity: str | None = LOCAL
    elif iap:
        identity = _iap_email(headers.get(IAP_HEADER))
    else:
        identity = _bearer_email(headers.get("Authorization"))
    return Caller(identity, identity is not None and identity in admins)


def check_mutation(method: str, headers: Mapping[str, str], host: str) -> None:
    """Forbidden unless a request that may change something is one a cross-site page cannot make."""
    if method not in MUTATING:
        return
    origin = headers.get("Origin")
    forwarded = headers.get("X-Forwarded-Host")  # a proxy's (a cross-site page cannot set it either)
    if origin is not None and not same_origin(origin, host) and not (forwarded and same_origin(origin, forwarded)):
        raise Forbidden(f"Origin {origin[:100]!r} is not this api's ({host[:100]}): cross-site requests may not "
                        "change anything", "Origin")
    if not headers.get(CSRF_HEADER):
        raise Forbidden(f"a request that changes something must carry the header {CSRF_HEADER}: 1 (a web page "
                        "of another site cannot send it)", CSRF_HEADER)


def same_origin(origin: str, host: str) -> bool:
    """Whether an ``Origin`` header names the api itself (its host and port, as the request's Host says)."""
    parts = urlsplit(origin.strip())
    return parts.scheme in ("http", "https") and bool(parts.netloc) and parts.netloc.lower() == host.lower()


def require_identity(caller: Caller) -> str:
    if caller.identity is None:
        raise Unauthenticated("no caller identity: changing a callback needs a Google ID token (Cloud Run IAM) or "
                              "IAP in front of the api", "Authorization")
    return caller.identity
