"""Production mode verifies the push OIDC token; local mode is an explicit switch, and a misconfigured
function fails closed: it does not start (issue 25, item 7)."""


import flask
import pytest
from dcm_status_contracts.errors import ConfigError
from dcm_status_contracts.errors import Unauthorized as TokenRejected
from werkzeug.exceptions import Forbidden, InternalServerError, Unauthorized

from shared.runtime import auth
from shared.runtime import settings as settings_module
from shared.runtime.entrypoint import http_function, pubsub_function

INVOKER = "invoker@p.iam.gserviceaccount.com"

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
        auth.verify_token("t", "aud", INVOKER)


def test_certificates_are_fetched_once_and_cached(monkeypatch):
    calls = []

    class Resp:
        headers = {"Cache-Control": "public, max-age=600"}

        def raise_for_status(self):
            pass

        def json(self):
            return {"k": "cert"}
    monkeypatch.setattr(auth.requests, "get", lambda *a, **k: calls.append(1) or Resp())
    cache = auth.KeyCache(auth.GOOGLE_CERTS_URL)
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


# ---- fail closed on misconfiguration ---------------------------------------------------------------------


@pytest.mark.parametrize("value", ["true", "yes", "on", "TRUE", " 1", "1 ", "2", "local"])
def test_local_mode_is_exactly_1_anything_else_is_refused(value):
    with pytest.raises(ConfigError, match="DCM_LOCAL_MODE must be 1"):
        settings_module.from_env({"DCM_PROJECT": "p", "DCM_LOCAL_MODE": value})


@pytest.mark.parametrize("value, local", [("1", True), ("0", False), ("", False), (None, False)])
def test_local_mode_documented_values(value, local):
    env = {"DCM_PROJECT": "p", **({"DCM_LOCAL_MODE": value} if value is not None else {})}
    assert settings_module.from_env(env).local_mode is local


@pytest.mark.parametrize("emulators", [{}, {"PUBSUB_EMULATOR_HOST": "127.0.0.1:8085"},
                                       {"FIRESTORE_EMULATOR_HOST": "127.0.0.1:8080"}],
                         ids=["no-emulator", "pubsub-only", "firestore-only"])
def test_local_mode_is_refused_on_cloud_run_without_the_emulators(emulators):
    env = {"DCM_PROJECT": "p", "DCM_LOCAL_MODE": "1", "K_SERVICE": "dcm-status-ingest", **emulators}
    with pytest.raises(ConfigError, match="Cloud Run"):
        settings_module.from_env(env)


def test_local_mode_with_both_emulators_is_the_local_stack():
    env = {"DCM_PROJECT": "p", "DCM_LOCAL_MODE": "1", "K_SERVICE": "x",
           "PUBSUB_EMULATOR_HOST": "127.0.0.1:8085", "FIRESTORE_EMULATOR_HOST": "127.0.0.1:8080"}
    assert settings_module.from_env(env).local_mode is True


def test_an_unset_account_accepts_no_google_account(monkeypatch):
    """Before: verify_token(..., service_account=None) accepted a token of any Google identity."""
    monkeypatch.setattr(auth._CERTS, "get", lambda: {"k": "cert"})
    monkeypatch.setattr("google.auth.jwt.decode", lambda *a, **k: {
        "iss": "https://accounts.google.com", "email": "anyone@gmail.com", "email_verified": True})
    for account in (None, ""):
        with pytest.raises(TokenRejected):
            auth.verify_token("t", "https://ingest.example", account)


def test_an_unset_audience_checks_no_token(monkeypatch):
    """google.auth.jwt.decode(audience=None) skips the audience check: a token for any service would do."""
    decoded = []
    monkeypatch.setattr(auth._CERTS, "get", lambda: {"k": "cert"})
    monkeypatch.setattr("google.auth.jwt.decode", lambda *a, **k: decoded.append(k) or {
        "iss": "https://accounts.google.com", "email": INVOKER, "email_verified": True})
    with pytest.raises(TokenRejected):
        auth.verify_token("t", None, INVOKER)
    assert decoded == []


@pytest.mark.parametrize("env", [{"DCM_PUSH_SERVICE_ACCOUNT": INVOKER},
                                 {"DCM_PUSH_AUDIENCE": "https://ingest.example"}, {}],
                         ids=["no-audience", "no-account", "neither"])
def test_a_request_never_takes_its_audience_or_account_from_itself(monkeypatch, env):
    """Before: no DCM_PUSH_AUDIENCE meant the request's own Host header was the audience."""
    settings = settings_module.from_env({"DCM_PROJECT": "p", **env})
    checked = []
    monkeypatch.setattr(auth, "verify_token", lambda *a: checked.append(a) or {})
    with pytest.raises(InternalServerError):
        call({"Authorization": "Bearer tok", "Host": "attacker.example"}, settings)
    assert checked == []


@pytest.fixture
def production_env(monkeypatch):
    """The environment Terraform gives a pushed function (terraform/functions.tf); the tests take from it."""
    for name in ("DCM_LOCAL_MODE", "K_SERVICE", "PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DCM_PROJECT", "p")
    monkeypatch.setenv("DCM_PUSH_AUDIENCE", "https://dcm-status-ingest-123.europe-west1.run.app")
    monkeypatch.setenv("DCM_PUSH_SERVICE_ACCOUNT", INVOKER)
    return monkeypatch



def test_a_pushed_function_with_its_settings_starts(production_env):
    assert callable(pubsub_function("ingest", lambda runtime: None))


@pytest.mark.parametrize("unset", [["DCM_PUSH_AUDIENCE"], ["DCM_PUSH_SERVICE_ACCOUNT"],
                                   ["DCM_PUSH_AUDIENCE", "DCM_PUSH_SERVICE_ACCOUNT"]],
                         ids=["no-audience", "no-account", "neither"])
def test_a_pushed_function_without_its_push_settings_does_not_start(production_env, logged, unset):
    for name in unset:
        production_env.delenv(name)
    with pytest.raises(ConfigError) as exc:
        pubsub_function("ingest", lambda runtime: None)
    assert all(name in str(exc.value) for name in unset)
    lines = logged()
    assert len(lines) == 1, lines  # one clear line, then the import fails
    assert lines[0]["severity"] == "CRITICAL" and lines[0]["message"].startswith("function ingest cannot start")
    assert all(name in lines[0]["message"] for name in unset)


@pytest.mark.parametrize("audience, account", [("ingest.example", INVOKER), ("http://ingest.example", INVOKER),
                                               ("https://ingest.example", "invoker")])
def test_a_malformed_push_setting_does_not_start(production_env, audience, account):
    production_env.setenv("DCM_PUSH_AUDIENCE", audience)
    production_env.setenv("DCM_PUSH_SERVICE_ACCOUNT", account)
    with pytest.raises(ConfigError):
        pubsub_function("ingest", lambda runtime: None)


@pytest.mark.parametrize("value", ["true", "yes"])
def test_a_function_with_a_truthy_local_mode_does_not_start(production_env, value):
    production_env.setenv("DCM_LOCAL_MODE", value)
    with pytest.raises(ConfigError):
        pubsub_function("ingest", lambda runtime: None)
    with pytest.raises(ConfigError):
        http_function("api", lambda runtime: None)


def test_no_function_starts_in_local_mode_on_cloud_run(production_env, logged):
    production_env.setenv("DCM_LOCAL_MODE", "1")
    production_env.setenv("K_SERVICE", "dcm-status-api")
    with pytest.raises(ConfigError):
        pubsub_function("ingest", lambda runtime: None)
    with pytest.raises(ConfigError):  # the api too: local mode also lets hooks be plain http and loopback
        http_function("api", lambda runtime: None)
    assert [line["severity"] for line in logged()] == ["CRITICAL", "CRITICAL"]


def test_the_api_takes_no_push_and_needs_no_push_settings(production_env):
    """The api is HTTP, behind the Cloud Run invoker check (terraform/api.tf): Terraform gives it no push settings."""
    production_env.delenv("DCM_PUSH_AUDIENCE")
    production_env.delenv("DCM_PUSH_SERVICE_ACCOUNT")
    assert callable(http_function("api", lambda runtime: None))
