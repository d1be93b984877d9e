"""Who is calling the api, and whether a request may change anything.

The caller: the api verifies it itself (docs/security.md item 14). Cloud Run's IAM check admits a request
with a Google-signed ID token, but it reads only ``X-Serverless-Authorization`` when a request carries both
it and ``Authorization``, and passes the other to the api as the caller wrote it; nor does Cloud Run tell the
api whom it admitted. So the caller is the ``email`` of a Google ID token the api checked: Google's signature
(RS256, Google's certificates), issuer ``accounts.google.com``, not expired, ``email_verified``, for one of the
audiences the deployment sets (``DCM_API_AUDIENCE``: the api's URL, and whichever ``gcloud`` issues its
admins' tokens for). It is read from ``X-Serverless-Authorization`` when that header is present (then never
from ``Authorization``: the header Cloud Run checked is the one that names the caller), else from
``Authorization``. Behind IAP (``DCM_API_IAP``) it is the ``email`` of IAP's signed
``X-Goog-IAP-JWT-Assertion`` (ES256, IAP's keys, issuer ``https://cloud.google.com/iap``, audience
``DCM_API_IAP_AUDIENCE``), never the plain ``X-Goog-Authenticated-User-Email``. A token that fails any check
names nobody: a change is then a 401, a read is answered as to anyone. Locally (``DCM_LOCAL_MODE``) every
caller is ``local``. Admins (``DCM_API_ADMINS``) may change any callback.

What a token must be is a ``TokenRule``; the keys it is checked with come from the rule's ``keys`` (Google's,
fetched and cached by shared/runtime/auth.py ``KeyCache``; a test's own): no I/O here. The checks of the
signature, expiry and audience are google-auth's (``google.auth.jwt.decode``).

Cross-site request forgery: a mutating request (POST, PUT, PATCH, DELETE) must carry the header
``DCM-Request: 1``, which a cross-site HTML form cannot send and a cross-site script can send only
after a CORS preflight the api never grants; and a request whose ``Origin`` is present and is not
the api's own is refused (403).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

from dcm_status_contracts.errors import ConfigError, Forbidden, KeysUnavailable, Unauthenticated, Unauthorized
from google.auth import exceptions as google_exceptions
from google.auth import jwt

from shared.runtime.auth import GOOGLE_ISSUERS
from shared.runtime.logs import get_logger

log = get_logger("api")

LOCAL = "local"
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CSRF_HEADER = "DCM-Request"
SERVERLESS_HEADER = "X-Serverless-Authorization"  # the header Cloud Run's IAM check reads first
AUTHORIZATION = "Authorization"
IAP_HEADER = "X-Goog-IAP-JWT-Assertion"  # IAP's signed statement of the caller
IAP_PREFIX = "accounts.google.com:"
IAP_ISSUERS = ("https://cloud.google.com/iap",)
MAX_IDENTITY_CHARS = 320
MAX_TOKEN_CHARS = 8192  # a Google ID token is about 1,000 characters, IAP's assertion about 700
CLOCK_SKEW_SECONDS = 10  # between Google's clock and this instance's, for iat and exp


class Verdict(enum.Enum):
    """What the api made of the token a request carried."""

    VERIFIED = "verified"  # a token that passed every check names the caller
    ABSENT = "absent"  # no token where the rule reads one
    REFUSED = "refused"  # a token that failed a check (or could not be read): it names nobody
    UNCHECKED = "unchecked"  # Google's keys could not be fetched: nobody, for now (a change: 503, retry)
    LOCAL = "local"  # the local stack: every caller is ``local``


@dataclass(frozen=True)
class Caller:
    """Who sent a request: an identity (None: nobody the api can name), whether an admin, and why."""

    identity: str | None
    admin: bool = False
    verdict: Verdict = Verdict.VERIFIED

    def owns(self, owner: str | None) -> bool:
        return self.identity is not None and owner == self.identity

    def may_change(self, owner: str | None) -> bool:
        """The callback's owner or an admin (a callback with no recorded owner: admins only)."""
        return self.admin or self.owns(owner)


class Source(enum.Enum):
    """Where a caller's token is read."""

    BEARER = "bearer"  # X-Serverless-Authorization if present, else Authorization: "Bearer <Google ID token>"
    IAP = "iap"  # X-Goog-IAP-JWT-Assertion: "<IAP's JWT>"


@dataclass(frozen=True)
class TokenRule:
    """What a token must be to name its caller: read from ``source``, signed with ``algorithm`` by one of the
    keys ``keys()`` returns (key id -> PEM certificate or public key), issued by one of ``issuers`` for one of
    ``audiences``; with ``email_verified`` true when ``verified_email``."""

    source: Source
    audiences: tuple[str, ...]
    keys: Callable[[], Mapping[str, str]]
    algorithm: str = "RS256"
    issuers: tuple[str, ...] = GOOGLE_ISSUERS
    verified_email: bool = True

    @classmethod
    def google(cls, audiences: tuple[str, ...], keys: Callable[[], Mapping[str, str]]) -> "TokenRule":
        return cls(Source.BEARER, audiences, keys)

    @classmethod
    def iap(cls, audience: str, keys: Callable[[], Mapping[str, str]]) -> "TokenRule":
        return cls(Source.IAP, (audience,), keys, algorithm="ES256", issuers=IAP_ISSUERS, verified_email=False)


def rule_for(local_mode: bool, iap: bool, audiences: tuple[str, ...], iap_audience: str | None,
             google_keys: Callable[[], Mapping[str, str]],
             iap_keys: Callable[[], Mapping[str, str]]) -> TokenRule | None:
    """The rule these settings ask for (None in local mode); ConfigError if a setting it needs is missing or
    malformed: the api then refuses to start, as a pushed function without its audience does."""
    if local_mode:
        return None
    if iap:
        if not iap_audience or not iap_audience.startswith("/projects/"):
            raise ConfigError("DCM_API_IAP=1 needs DCM_API_IAP_AUDIENCE, the audience of IAP's signed header "
                              f"(/projects/NUMBER/global/backendServices/ID or /projects/NUMBER/apps/PROJECT), got "
                              f"{(iap_audience or '')[:100]!r}")
        return TokenRule.iap(iap_audience, iap_keys)
    if not audiences:
        raise ConfigError("set DCM_API_AUDIENCE: the api verifies its callers' ID tokens against it (terraform/"
                          "functions.tf sets the api's URL); DCM_LOCAL_MODE=1 is for the local emulator stack only")
    return TokenRule.google(audiences, google_keys)


def presented(headers: Mapping[str, str], source: Source) -> tuple[str | None, Verdict]:
    """The token a request carries where ``source`` says, or None and why not (absent, or unreadable)."""
    if source is Source.IAP:
        value = headers.get(IAP_HEADER)
    else:  # the header Cloud Run checked: X-Serverless-Authorization whenever it is sent, even empty or wrong
        value = headers.get(SERVERLESS_HEADER)
        if value is None:
            value = headers.get(AUTHORIZATION)
        if value is not None:
            scheme, _, rest = value.strip().partition(" ")
            value = rest.strip() if scheme.lower() == "bearer" else ""
    if value is None:
        return None, Verdict.ABSENT
    if not value or len(value) > MAX_TOKEN_CHARS or value.count(".") != 2:
        return None, Verdict.REFUSED
    return value, Verdict.VERIFIED


def claims_of(token: str, rule: TokenRule) -> Mapping[str, Any]:
    """The token's claims if it passes the rule's checks of signature, expiry, audience and issuer; else
    Unauthorized (its message names the failed check, never the token). KeysUnavailable if the keys cannot be had."""
    try:
        header = jwt.decode_header(token)
    except (ValueError, TypeError, UnicodeError) as exc:
        raise Unauthorized("the token is no JWT") from exc
    if not isinstance(header, Mapping) or header.get("alg") != rule.algorithm:
        raise Unauthorized(f"the token is not signed with {rule.algorithm}")
    keys = rule.keys()  # KeysUnavailable when Google's keys cannot be fetched
    try:
        claims = jwt.decode(token, certs=keys, audience=list(rule.audiences), clock_skew_in_seconds=CLOCK_SKEW_SECONDS)
    except (google_exceptions.GoogleAuthError, ValueError, TypeError, KeyError, UnicodeError) as exc:
        raise Unauthorized(f"the token fails google-auth's checks ({type(exc).__name__})") from exc
    if claims.get("iss") not in rule.issuers:
        raise Unauthorized("the token's issuer is not Google's")
    return claims


def email_of(claims: Mapping[str, Any], rule: TokenRule) -> str | None:
    """The caller a checked token names: its ``email`` (IAP's ``accounts.google.com:`` prefix stripped), if
    verified where the rule asks it to be and of a plausible length."""
    email = claims.get("email")
    if not isinstance(email, str):
        return None
    if rule.verified_email and claims.get("email_verified") is not True:
        return None
    email = email[len(IAP_PREFIX):] if email.startswith(IAP_PREFIX) else email
    return email if 0 < len(email) <= MAX_IDENTITY_CHARS and "@" in email else None


def caller_of(headers: Mapping[str, str], local_mode: bool, rule: TokenRule | None,
              admins: tuple[str, ...]) -> Caller:
    """The caller of a request: the email of the token ``rule`` verifies (local mode: ``local``)."""
    if local_mode:
        return Caller(LOCAL, LOCAL in admins, Verdict.LOCAL)
    if rule is None:
        return Caller(None, verdict=Verdict.ABSENT)
    token, verdict = presented(headers, rule.source)
    if token is None:
        return Caller(None, verdict=verdict)
    try:
        email = email_of(claims_of(token, rule), rule)
    except Unauthorized as exc:  # the failed check is logged, never the token
        log.info("caller's token refused", extra={"labels": {"auth": "refused"}, "check": str(exc)})
        return Caller(None, verdict=Verdict.REFUSED)
    except KeysUnavailable:
        return Caller(None, verdict=Verdict.UNCHECKED)
    if email is None:
        log.info("caller's token refused", extra={"labels": {"auth": "refused"}, "check": "no verified email"})
        return Caller(None, verdict=Verdict.REFUSED)
    return Caller(email, email in admins, Verdict.VERIFIED)


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


WHY_NOBODY = {  # what a change without a caller is told, by verdict: the check that failed, never the token
    Verdict.ABSENT: "no caller identity: changing a callback needs a Google ID token (Authorization or "
                    "X-Serverless-Authorization: Bearer ...) or IAP in front of the api",
    Verdict.REFUSED: "the caller's token was not accepted (a Google ID token for this api, signed by Google, "
                     "not expired, with a verified email): no caller identity",
}


def require_identity(caller: Caller) -> str:
    """The caller's identity; Unauthenticated (401) if none, or KeysUnavailable (503) if Google's keys could not
    be had to check the token it sent."""
    if caller.identity is not None:
        return caller.identity
    if caller.verdict is Verdict.UNCHECKED:
        raise KeysUnavailable("the caller's token cannot be checked now: Google's signing keys did not answer")
    raise Unauthenticated(WHY_NOBODY.get(caller.verdict, WHY_NOBODY[Verdict.ABSENT]), "Authorization")
