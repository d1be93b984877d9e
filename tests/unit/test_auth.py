"""Production mode verifies the push OIDC token; local mode is an explicit switch."""

import flask
import pytest
from werkzeug.exceptions import Forbidden, Unauthorized

from shared import auth, config
from shared.errors import Unauthorized as TokenRejected


@pytest.fixture
def production(monkeypatch):
    monkeypatch.delenv("DCM_LOCAL_MODE", raising=False)
    monkeypatch.setenv("DCM_PUSH_AUDIENCE", "https://ingest.example")
    monkeypatch.setenv("DCM_PUSH_SERVICE_ACCOUNT", "invoker@p.iam.gserviceaccount.com")
    config.settings.cache_clear()
    yield
    config.settings.cache_clear()


def call(headers):
    app = flask.Flask("t")
    with app.test_request_context("/projects/p/topics/t", headers=headers):
        auth.verify_push_request()


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


def test_wrong_service_account_is_rejected(monkeypatch):
    monkeypatch.setattr("google.oauth2.id_token.verify_oauth2_token",
                        lambda *a, **k: {"iss": "https://accounts.google.com", "email": "evil@x", "email_verified": True})
    with pytest.raises(TokenRejected):
        auth.verify_token("t", "aud", "invoker@p.iam.gserviceaccount.com")


def test_local_mode_skips_verification():
    config.settings.cache_clear()
    call({})  # DCM_LOCAL_MODE=1 from tests/conftest.py
