"""Push authentication: verify the OIDC token Pub/Sub attaches to each push.

In production every push request carries ``Authorization: Bearer <OIDC JWT>``
signed by Google for the invoker service account, with the function's URL as
audience. The local emulator stack cannot sign tokens, so ``DCM_LOCAL_MODE=1``
(set only by ``infra/stack.py`` and the tests) turns verification off.

Google's signing certificates are fetched once and kept for as long as their
Cache-Control max-age says, not on every push.
"""

from __future__ import annotations

import re
import threading
import time

import flask
import requests

from shared.contracts.errors import Unauthorized
from shared.runtime.logs import get_logger
from shared.runtime.settings import Settings

GOOGLE_ISSUERS = ("https://accounts.google.com", "accounts.google.com")
GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
DEFAULT_CERTS_MAX_AGE = 3600
log = get_logger("auth")


class _CertCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._certs: dict[str, str] = {}
        self._expires = 0.0

    def get(self) -> dict[str, str]:
        with self._lock:
            if time.monotonic() >= self._expires:
                resp = requests.get(GOOGLE_CERTS_URL, timeout=5)
                resp.raise_for_status()
                match = re.search(r"max-age=(\d+)", resp.headers.get("Cache-Control", ""))
                self._certs = resp.json()
                self._expires = time.monotonic() + (int(match.group(1)) if match else DEFAULT_CERTS_MAX_AGE)
            return self._certs


_CERTS = _CertCache()


def verify_token(token: str, audience: str | None, service_account: str | None) -> dict:
    """The token's claims if Google signed it for this audience and account; else Unauthorized."""
    from google.auth import jwt

    try:
        claims = jwt.decode(token, certs=_CERTS.get(), audience=audience)
    except ValueError as exc:
        raise Unauthorized(f"invalid OIDC token: {exc}") from exc
    if claims.get("iss") not in GOOGLE_ISSUERS:
        raise Unauthorized(f"unexpected issuer {claims.get('iss')!r}")
    if service_account and claims.get("email") != service_account:
        raise Unauthorized(f"token is for {claims.get('email')!r}, expected {service_account!r}")
    if service_account and not claims.get("email_verified", False):
        raise Unauthorized("token email is not verified")
    return claims


def verify_push_request(s: Settings) -> None:
    """Abort with 401/403 unless local mode is on or the push token is valid (503 if certs are unreachable)."""
    if s.local_mode:
        return
    header = flask.request.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        log.warning("push request without a bearer token", extra={"labels": {"auth": "missing"}})
        flask.abort(401)
    audience = s.push_audience or flask.request.url_root.rstrip("/")
    try:
        verify_token(header[len("Bearer "):], audience, s.push_service_account)
    except Unauthorized as exc:
        log.warning("push request rejected", extra={"labels": {"auth": "rejected"}, "error": str(exc)})
        flask.abort(403)
    except requests.RequestException as exc:  # Pub/Sub redelivers: nothing lost
        log.error("cannot fetch Google's signing certificates", extra={"labels": {"auth": "unavailable"},
                                                                        "error": str(exc)})
        flask.abort(503)
