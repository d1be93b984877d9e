"""The api's callers (issue 37, item 1; docs/security.md item 14): which header names the caller, what a token
must be, Google's keys fetched once, the settings a deployment must give. Tokens are signed by keys made here
(tests/google_tokens.py): nothing needs the network."""

from __future__ import annotations

import base64
import time

import pytest
import requests
from dcm_status_contracts.errors import ConfigError, KeysUnavailable, Unauthorized
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.api.app import check_identity_configured, token_rule
from shared.api.callers import (IAP_HEADER, MAX_TOKEN_CHARS, SERVERLESS_HEADER, Caller, Source, TokenRule, Verdict,
                                 caller_of, claims_of, presented, require_identity, rule_for)
from shared.runtime import auth
from shared.runtime import settings as settings_module
from shared.runtime.entrypoint import check_startup
from tests.google_tokens import API_URL, IAP_AUDIENCE, Google, Signer, bearer, unsigned
from tests.profile import examples

GOOGLE = Google()
RULE = TokenRule.google((API_URL,), GOOGLE.keys)
ALICE, MALLORY = "alice@example.com", "admin@example.com"


# ---- which header names the caller ------------------------------------------------------------------
def test_the_header_cloud_run_checked_names_the_caller_and_authorization_only_without_it():
    real, forged = GOOGLE.id_token(ALICE), unsigned({"email": MALLORY})
    assert presented({SERVERLESS_HEADER: f"Bearer {real}", "Authorization": f"Bearer {forged}"}, Source.BEARER) == (
        real, Verdict.VERIFIED)
    assert presented({"Authorization": f"bearer {real}"}, Source.BEARER) == (real, Verdict.VERIFIED)
    # sent, but empty or not a bearer token: no fallback to Authorization
    for value in ("", "Basic eDp5", "Bearer", "Bearer a.b"):
        assert presented({SERVERLESS_HEADER: value, "Authorization": f"Bearer {real}"}, Source.BEARER) == (
            None, Verdict.REFUSED), value
    assert presented({}, Source.BEARER) == (None, Verdict.ABSENT)
    assert presented({"Authorization": f"Bearer {real}"}, Source.IAP) == (None, Verdict.ABSENT)
    assert presented({IAP_HEADER: real}, Source.IAP) == (real, Verdict.VERIFIED)
    assert presented({"Authorization": "Bearer " + "a." * 2 + "b" * MAX_TOKEN_CHARS}, Source.BEARER) == (
        None, Verdict.REFUSED)


def test_a_forged_authorization_beside_a_real_token_never_names_an_admin():
    forged = unsigned({"email": MALLORY, "email_verified": True, "aud": API_URL, "iss": "https://accounts.google.com",
                       "exp": int(time.time()) + 600, "iat": int(time.time())})
    headers = {SERVERLESS_HEADER: f"Bearer {GOOGLE.id_token(ALICE)}", "Authorization": f"Bearer {forged}"}
    assert caller_of(headers, False, RULE, (MALLORY,)) == Caller(ALICE, False, Verdict.VERIFIED)
    assert caller_of(bearer(forged), False, RULE, (MALLORY,)) == Caller(None, False, Verdict.REFUSED)


# ---- what a token must be ---------------------------------------------------------------------------
@pytest.mark.parametrize("why, token", [
    ("another key", lambda: GOOGLE.id_token(ALICE, signer=Signer.rsa("google-1"))),
    ("an unknown key id", lambda: GOOGLE.id_token(ALICE, signer=Signer.rsa("elsewhere"))),
    ("expired", lambda: GOOGLE.id_token(ALICE, iat=int(time.time()) - 7200, exp=int(time.time()) - 3600)),
    ("issued in the future", lambda: GOOGLE.id_token(ALICE, iat=int(time.time()) + 3600)),
    ("no expiry", lambda: GOOGLE.id_token(ALICE, exp=None)),
    ("another audience", lambda: GOOGLE.id_token(ALICE, aud="https://another-service.run.app")),
    ("another issuer", lambda: GOOGLE.id_token(ALICE, iss="https://attacker.example")),
    ("alg none", lambda: unsigned(Google.claims(ALICE))),
    ("ES256 on Google's RSA key id", lambda: Signer.es256("google-1").sign(Google.claims(ALICE))),
])
def test_a_token_that_fails_a_check_is_refused_with_the_check_never_the_token(why, token):
    value = token()
    with pytest.raises(Unauthorized) as refused:
        claims_of(value, RULE)
    assert value not in str(refused.value) and value.split(".")[1] not in str(refused.value)
    assert caller_of(bearer(value), False, RULE, (ALICE,)) == Caller(None, verdict=Verdict.REFUSED)


def test_a_valid_token_names_its_verified_email_and_only_that():
    assert caller_of(bearer(GOOGLE.id_token(ALICE)), False, RULE, ()) == Caller(ALICE, False, Verdict.VERIFIED)
    assert caller_of(bearer(GOOGLE.id_token(ALICE)), False, RULE, (ALICE,)).admin
    assert caller_of(bearer(GOOGLE.id_token(ALICE, email_verified=False)), False, RULE, ()).identity is None
    assert caller_of(bearer(GOOGLE.id_token(None)), False, RULE, ()).identity is None  # no email claim
    two = TokenRule.google((API_URL, "32555940559.apps.googleusercontent.com"), GOOGLE.keys)  # + gcloud's client
    token = GOOGLE.id_token(ALICE, aud="32555940559.apps.googleusercontent.com")
    assert caller_of(bearer(token), False, two, ()).identity == ALICE
    assert caller_of(bearer(token), False, RULE, ()).identity is None


def test_iaps_assertion_is_checked_with_es256_and_its_audience():
    rule = TokenRule.iap(IAP_AUDIENCE, GOOGLE.iap_keys)
    assert caller_of({IAP_HEADER: GOOGLE.iap_assertion(ALICE)}, False, rule, ()).identity == ALICE
    prefixed = GOOGLE.iap_assertion(f"accounts.google.com:{ALICE}")
    assert caller_of({IAP_HEADER: prefixed}, False, rule, ()).identity == ALICE
    for wrong in (GOOGLE.iap_assertion(ALICE, aud=API_URL), GOOGLE.iap_assertion(ALICE, signer=Signer.es256("iap-1")),
                  GOOGLE.id_token(ALICE), GOOGLE.iap_assertion(ALICE, iss="https://accounts.google.com")):
        assert caller_of({IAP_HEADER: wrong}, False, rule, ()).identity is None
    assert caller_of({"X-Goog-Authenticated-User-Email": f"accounts.google.com:{ALICE}"}, False, rule, ()) == Caller(
        None, verdict=Verdict.ABSENT)


def test_local_mode_is_local_whatever_is_sent():
    assert caller_of(bearer(unsigned({"email": MALLORY})), True, None, ("local",)) == Caller("local", True,
                                                                                          Verdict.LOCAL)


@settings(max_examples=examples(200), deadline=None)
@given(parts=st.lists(st.one_of(st.text(max_size=40),
                                st.binary(max_size=40).map(lambda b: base64.urlsafe_b64encode(b).decode().rstrip("="))),
                      min_size=0, max_size=4),
       header=st.sampled_from(["Authorization", SERVERLESS_HEADER]), scheme=st.sampled_from(["Bearer ", "bearer ", ""]))
def test_any_header_value_is_a_caller_or_nobody_never_an_error(parts, header, scheme):
    value = scheme + ".".join(parts)
    if "\n" in value or "\r" in value:
        return
    caller = caller_of({header: value}, False, RULE, ())
    assert caller.identity is None and caller.verdict in (Verdict.REFUSED, Verdict.ABSENT)


# ---- a change without a caller: 401; while Google's keys cannot be had: 503 -----------------------------
def test_nobody_may_change_and_an_unchecked_token_waits():
    from dcm_status_contracts.errors import Unauthenticated
    with pytest.raises(Unauthenticated, match="not accepted"):
        require_identity(Caller(None, verdict=Verdict.REFUSED))
    with pytest.raises(Unauthenticated, match="no caller identity"):
        require_identity(Caller(None, verdict=Verdict.ABSENT))

    def down() -> dict[str, str]:
        raise KeysUnavailable("down")
    unchecked = caller_of(bearer(GOOGLE.id_token(ALICE)), False, TokenRule.google((API_URL,), down), ())
    assert unchecked == Caller(None, verdict=Verdict.UNCHECKED)
    with pytest.raises(KeysUnavailable):
        require_identity(unchecked)


# ---- Google's keys: fetched once, kept for their max-age, an outage not a wait per request --------------
class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_googles_keys_are_fetched_once_and_again_when_their_max_age_ends():
    fetched, clock = [], Clock()
    cache = auth.KeyCache("https://keys.example", lambda url: (fetched.append(url) or {"k": "pem"}, 600.0), clock)
    assert all(cache.get() == {"k": "pem"} for _ in range(100))
    assert fetched == ["https://keys.example"]
    clock.now += 601
    cache.get()
    assert len(fetched) == 2


def test_when_googles_keys_cannot_be_fetched_those_held_serve_and_none_held_fails_fast():
    clock, calls = Clock(), []

    def flaky(url: str) -> tuple[dict[str, str], float]:
        calls.append(url)
        if len(calls) > 1:
            raise requests.ConnectionError("no route")
        return {"k": "pem"}, 60.0
    cache = auth.KeyCache("https://keys.example", flaky, clock, retry_seconds=5)
    cache.get()
    clock.now += 61
    assert cache.get() == {"k": "pem"} and len(calls) == 2  # the refresh failed: the keys held serve
    assert cache.get() == {"k": "pem"} and len(calls) == 2  # ... and it is not tried again at once
    empty = auth.KeyCache("https://keys.example", flaky, clock, retry_seconds=5)
    with pytest.raises(KeysUnavailable):
        empty.get()
    with pytest.raises(KeysUnavailable):
        empty.get()
    assert len(calls) == 3  # the second get did not fetch again
    clock.now += 6
    with pytest.raises(KeysUnavailable):
        empty.get()
    assert len(calls) == 4


def test_a_key_answer_that_is_not_key_ids_and_pems_is_an_outage_not_keys(monkeypatch):
    class Answer:
        headers = {"Cache-Control": "max-age=60"}

        def raise_for_status(self) -> None:
            pass

        def json(self) -> object:
            return ["not", "keys"]
    monkeypatch.setattr(auth.requests, "get", lambda *a, **k: Answer())
    with pytest.raises(KeysUnavailable):
        auth.KeyCache("https://keys.example").get()


# ---- the settings a deployment must give -------------------------------------------------------------
def test_the_settings_read_the_audiences_and_the_rule_follows_them(monkeypatch):
    env = {"DCM_PROJECT": "p", "DCM_API_AUDIENCE": f"{API_URL}, 32555940559.apps.googleusercontent.com"}
    s = settings_module.from_env(env)
    assert s.api_audiences == (API_URL, "32555940559.apps.googleusercontent.com")
    rule = token_rule(s)
    assert rule is not None and rule.source is Source.BEARER and rule.audiences == s.api_audiences
    iap = token_rule(settings_module.from_env({"DCM_PROJECT": "p", "DCM_API_IAP": "1",
                                               "DCM_API_IAP_AUDIENCE": IAP_AUDIENCE}))
    assert iap is not None and iap.source is Source.IAP and iap.audiences == (IAP_AUDIENCE,)
    assert iap.algorithm == "ES256"
    assert token_rule(settings_module.from_env({"DCM_PROJECT": "p", "DCM_LOCAL_MODE": "1"})) is None


@pytest.mark.parametrize("env, names", [({}, "DCM_API_AUDIENCE"), ({"DCM_API_IAP": "1"}, "DCM_API_IAP_AUDIENCE"),
                                        ({"DCM_API_IAP": "1", "DCM_API_IAP_AUDIENCE": API_URL}, "/projects/")])
def test_the_api_does_not_start_without_what_checks_its_callers(env, names, monkeypatch):
    for name in ("DCM_API_AUDIENCE", "DCM_API_IAP", "DCM_API_IAP_AUDIENCE", "DCM_LOCAL_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DCM_PROJECT", "p")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=names):
        check_startup("api", pushed=False, needs=(check_identity_configured,))
    with pytest.raises(ConfigError):
        rule_for(False, "DCM_API_IAP" in env, (), env.get("DCM_API_IAP_AUDIENCE"), GOOGLE.keys, GOOGLE.iap_keys)
