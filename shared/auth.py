"""Push authentication: verify the OIDC token Pub/Sub attaches to each push.

In production every push request carries ``Authorization: Bearer <OIDC JWT>``
signed by Google for the invoker service account, with the function's URL as
audience. The local emulator stack cannot sign tokens, so ``DCM_LOCAL_MODE=1``
(set only by ``infra/stack.py`` and the tests) turns verification off.
"""

from __future__ import annotations

import flask

from shared.config import settings
from shared.errors import Unauthorized
from shared.logs import get_logger

GOOGLE_ISSUERS = ("https://accounts.google.com", "accounts.google.com")
log = get_logger("auth")


def verify_token(token: str, audience: str | None, service_account: str | None) -> dict:
    from google.auth.transport import requests as google_requests
    from google.oauth2 import id_token

    try:
        claims = id_token.verify_oauth2_token(token, google_requests.Request(), audience=audience)
    except ValueError as exc:
        raise Unauthorized(f"invalid OIDC token: {exc}") from exc
    if claims.get("iss") not in GOOGLE_ISSUERS:
        raise Unauthorized(f"unexpected issuer {claims.get('iss')!r}")
    if service_account and claims.get("email") != service_account:
        raise Unauthorized(f"token is for {claims.get('email')!r}, expected {service_account!r}")
    if service_account and not claims.get("email_verified", False):
        raise Unauthorized("token email is not verified")
    return claims


def verify_push_request() -> None:
    """Abort with 401/403 unless local mode is on or the push token is valid."""
    s = settings()
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
