"""Production mode verifies the push OIDC token; local mode is an explicit switch."""

import flask
import pytest
from werkzeug.exceptions import Forbidden, Unauthorized

from shared.contracts.errors import Unauthorized as TokenRejected
from shared.runtime import auth
from shared.runtime import settings as settings_module

PRODUCTION = settings_module.from_env({"DCM_PROJECT": "p", "DCM_PUSH_AUDIENCE": "https://ingest.example",
                                       "DCM_PUSH_SERVICE_ACCOUNT": "invoker@p.iam.gserviceaccount.com"})


@pytest.fixture
def production():
    return PRODUCTION


def call(headers, settings=PRODUCTION):
    app = flask.Flask("t")
    with app.test_request_context("/projects/p/topics/t", headers=headers):
        auth.verify_push_request(settings)


def test_missing_token_is_401(production):
    with pytest.raises(Unauthorized):
        call({})


def test_invalid_token_is_403(production, monkeypatch):
    def reject(token, audience, sa):
        raise TokenRejected("bad signature")
    monkeypatch.setattr(auth, "verify_token", reject)
    with pytest.raises(Forbidden):
        call({"Authorization": "Bearer x"})


def test_valid_token_passes_with_configured_audience_and_account(production, monkeypatch):
    seen = {}
    monkeypatch.setattr(auth, "verify_token", lambda t, a, s: seen.update(token=t, audience=a, sa=s) or {})
    call({"Authorization": "Bearer tok"})
    assert seen == {"token": "tok", "audience": "https://ingest.example", "sa": "invoker@p.iam.gserviceaccount.com"}


@pytest.mark.parametrize("claims", [
    {"iss": "https://accounts.google.com", "email": "evil@x", "email_verified": True},
    {"iss": "https://evil.example", "email": "invoker@p.iam.gserviceaccount.com", "email_verified": True},
    {"iss": "https://accounts.google.com", "email": "invoker@p.iam.gserviceaccount.com", "email_verified": False},
])
def test_wrong_issuer_or_account_is_rejected(monkeypatch, claims):
    monkeypatch.setattr(auth._CERTS, "get", lambda: {"k": "cert"})
    monkeypatch.setattr("google.auth.jwt.decode", lambda *a, **k: claims)
    with pytest.raises(TokenRejected):
        auth.verify_token("t", "aud", "invoker@p.iam.gserviceaccount.com")


def test_bad_signature_is_rejected(monkeypatch):
    monkeypatch.setattr(auth._CERTS, "get", lambda: {"k": "cert"})

    def bad(*a, **k):
        raise ValueError("Could not verify token signature.")
    monkeypatch.setattr("google.auth.jwt.decode", bad)
    with pytest.raises(TokenRejected):
        auth.verify_token("t", "aud", None)


def test_certificates_are_fetched_once_and_cached(monkeypatch):
    calls = []

    class Resp:
        headers = {"Cache-Control": "public, max-age=600"}

        def raise_for_status(self):
            pass

        def json(self):
            return {"k": "cert"}
    monkeypatch.setattr(auth.requests, "get", lambda *a, **k: calls.append(1) or Resp())
    cache = auth._CertCache()
    assert cache.get() == cache.get() == {"k": "cert"}
    assert len(calls) == 1


def test_unreachable_certificates_mean_503_so_pubsub_retries(production, monkeypatch):
    from werkzeug.exceptions import ServiceUnavailable

    def down(*a, **k):
        raise auth.requests.ConnectionError("no route")
    monkeypatch.setattr(auth._CERTS, "get", down)
    with pytest.raises(ServiceUnavailable):
        call({"Authorization": "Bearer x"})


def test_local_mode_skips_verification():
    call({}, settings_module.from_env({"DCM_PROJECT": "p", "DCM_LOCAL_MODE": "1"}))
