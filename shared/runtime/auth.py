"""Push authentication: verify the OIDC token Pub/Sub attaches to each push.

In production every push request carries ``Authorization: Bearer <OIDC JWT>``
signed by Google for the push invoker service account, with the function's URL
as audience. Both are settings (``DCM_PUSH_AUDIENCE``, ``DCM_PUSH_SERVICE_ACCOUNT``,
set by ``terraform/functions.tf`` on every pushed function), never guessed: a
pushed function missing either refuses to start (``PushAuth.of``, called by
``shared/runtime/entrypoint.py`` when the function is created), and a request
that somehow reaches one is refused. The local emulator stack cannot sign
tokens, so ``DCM_LOCAL_MODE=1`` (exactly; set only by ``infra/local/stack.py`` and the
tests, refused on Cloud Run without the emulators: ``settings.py``) turns
verification off.

Google's signing certificates are fetched once and kept for as long as their
Cache-Control max-age says, not on every push (``KeyCache``; the api's check of its
callers, shared/api/callers.py, uses the same caches).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import Callable

import flask
import requests
from dcm_status_contracts.errors import ConfigError, KeysUnavailable, Transient, Unauthorized

from shared.runtime.logs import get_logger
from shared.runtime.settings import Settings

GOOGLE_ISSUERS = ("https://accounts.google.com", "accounts.google.com")
GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
IAP_KEYS_URL = "https://www.gstatic.com/iap/verify/public_key"
DEFAULT_CERTS_MAX_AGE = 3600
KEYS_RETRY_SECONDS = 5.0  # after a failed fetch of the keys, the next try
AUDIENCE = "DCM_PUSH_AUDIENCE"
SERVICE_ACCOUNT = "DCM_PUSH_SERVICE_ACCOUNT"
log = get_logger("auth")


@dataclass(frozen=True)
class PushAuth:
    """What a pushed function accepts: a token Google signed for ``audience`` as ``service_account``;
    or, in local mode only, any request."""

    audience: str | None
    service_account: str | None
    local: bool = False

    @classmethod
    def of(cls, s: Settings) -> "PushAuth":
        """The check these settings ask for; ConfigError if a setting it needs is missing or malformed."""
        if s.local_mode:
            return cls(None, None, local=True)
        missing = [name for name, value in ((AUDIENCE, s.push_audience), (SERVICE_ACCOUNT, s.push_service_account))
                   if not value]
        if missing:
            raise ConfigError(f"set {' and '.join(missing)}: a pushed function checks every push token against "
                              "them (terraform/functions.tf sets both); DCM_LOCAL_MODE=1 is for the local "
                              "emulator stack only")
        if not s.push_audience.startswith("https://"):
            raise ConfigError(f"{AUDIENCE} must be the function's https URL, got {s.push_audience!r}")
        if "@" not in s.push_service_account:
            raise ConfigError(f"{SERVICE_ACCOUNT} must be the push invoker's email, got {s.push_service_account!r}")
        return cls(s.push_audience, s.push_service_account)


def fetch_keys(url: str) -> tuple[dict[str, str], float]:
    """Google's public signing keys at ``url`` (key id -> PEM certificate or public key) and how many seconds
    they may be kept (their Cache-Control max-age)."""
    resp = requests.get(url, timeout=5)
    resp.raise_for_status()
    keys = resp.json()
    if not isinstance(keys, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in keys.items()):
        raise ValueError(f"{url} did not answer a JSON object of key ids and PEM keys")
    match = re.search(r"max-age=(\d+)", resp.headers.get("Cache-Control", ""))
    return keys, float(match.group(1)) if match else DEFAULT_CERTS_MAX_AGE


class KeyCache:
    """Google's public signing keys at one URL, fetched once and kept for as long as their max-age says (not on
    every request). A fetch that fails keeps the keys held a little longer (``retry_seconds``); with none
    held, ``get`` raises KeysUnavailable at once and the fetch is tried again only ``retry_seconds`` later, so an
    outage of Google's key endpoint is not a 5 s wait on every request."""

    def __init__(self, url: str, fetch: Callable[[str], tuple[dict[str, str], float]] = fetch_keys,
                 clock: Callable[[], float] = time.monotonic, retry_seconds: float = KEYS_RETRY_SECONDS):
        self.url, self._fetch, self._clock, self._retry = url, fetch, clock, retry_seconds
        self._lock = threading.Lock()
        self._keys: dict[str, str] = {}
        self._expires = 0.0

    def get(self) -> dict[str, str]:
        with self._lock:
            if self._clock() >= self._expires:
                try:
                    self._keys, max_age = self._fetch(self.url)
                    self._expires = self._clock() + max_age
                except (requests.RequestException, ValueError) as exc:
                    self._expires = self._clock() + self._retry
                    log.error("cannot fetch Google's signing keys", extra={
                        "labels": {"auth": "keys_unavailable"}, "url": self.url, "error": type(exc).__name__,
                        "keysHeld": len(self._keys)})
                    if not self._keys:
                        raise KeysUnavailable(f"Google's signing keys ({self.url}) could not be fetched") from exc
            if not self._keys:
                raise KeysUnavailable(f"Google's signing keys ({self.url}) could not be fetched; retrying soon")
            return self._keys


GOOGLE_KEYS = _CERTS = KeyCache(GOOGLE_CERTS_URL)  # Google's ID token certificates: push tokens, the api's callers
IAP_KEYS = KeyCache(IAP_KEYS_URL)  # IAP's ES256 keys: the api's callers behind IAP


def verify_token(token: str, audience: str, service_account: str) -> dict:
    """The token's claims if Google signed it for this audience and account; else Unauthorized.

    Both are required: without an audience any Google-signed token would do, without an account any
    Google identity's.
    """
    from google.auth import jwt

    if not audience or not service_account:
        raise Unauthorized("no audience or invoker account to check the token against")
    try:
        claims = jwt.decode(token, certs=_CERTS.get(), audience=audience)
    except ValueError as exc:
        raise Unauthorized(f"invalid OIDC token: {exc}") from exc
    if claims.get("iss") not in GOOGLE_ISSUERS:
        raise Unauthorized(f"unexpected issuer {claims.get('iss')!r}")
    if claims.get("email") != service_account:
        raise Unauthorized(f"token is for {claims.get('email')!r}, expected {service_account!r}")
    if not claims.get("email_verified", False):
        raise Unauthorized("token email is not verified")
    return claims


def verify_push_request(s: Settings) -> None:
    """Abort with 401/403 unless local mode is on or the push token is valid (503 if certs are unreachable,
    500 if the settings cannot check it: Pub/Sub redelivers, nothing is accepted unchecked)."""
    try:
        check = PushAuth.of(s)
    except ConfigError as exc:
        log.error("push request refused: %s", exc, extra={"labels": {"auth": "misconfigured"}})
        flask.abort(500)
    if check.local:
        return
    header = flask.request.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        log.warning("push request without a bearer token", extra={"labels": {"auth": "missing"}})
        flask.abort(401)
    try:
        verify_token(header[len("Bearer "):], check.audience or "", check.service_account or "")
    except Unauthorized as exc:
        log.warning("push request rejected", extra={"labels": {"auth": "rejected"}, "error": str(exc)})
        flask.abort(403)
    except (requests.RequestException, Transient) as exc:  # Pub/Sub redelivers: nothing lost
        log.error("cannot fetch Google's signing certificates", extra={"labels": {"auth": "unavailable"},
                                                                        "error": str(exc)})
        flask.abort(503)
