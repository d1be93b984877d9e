"""The api's guards (issue 25): no cross-site page acts for an admin, a callback is changed only by
who registered it (or an admin), callbacks and live streams are capped, a reader sees no token or
hook path of another's callback nor in the dead letters, malformed input is a 400, never a 500.

Production mode (the caller from the ID token the api verifies, here signed by a key the test makes:
tests/google_tokens.py; https hooks resolving to a public address) runs the api directly on the Firestore
emulator; local mode through functions-framework.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import flask
import orjson
import pytest
from dcm_status_contracts import tokens
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from werkzeug.test import EnvironBuilder

from shared.api.app import Api, Guards
from shared.api.callbacks import Callbacks
from shared.api.callers import Caller, TokenRule, Verdict, caller_of, same_origin
from tests.google_tokens import API_URL, IAP_AUDIENCE, Google, Signer, bearer, unsigned
from tests.profile import examples

HOOK = "https://hooks.example.com/cb/PATH-SECRET?key=QUERY-SECRET"
WRITE = {"DCM-Request": "1"}
ALICE, BOB, ADMIN = "alice@example.com", "bob@example.com", "admin@example.com"


GOOGLE = Google()  # signs the callers' ID tokens; the api is handed its keys instead of Google's certificates
RULE = TokenRule.google((API_URL,), GOOGLE.keys)


def id_token(email: str) -> dict[str, str]:
    """The Authorization header `gcloud run services proxy` attaches: a Google ID token for the api."""
    return bearer(GOOGLE.id_token(email))


class Direct:
    """The api as deployed (not local mode), called in process: one request, one answer."""

    def __init__(self, api: Api):
        self.api = api

    def open(self, method: str, path: str, who: str | None = None, headers: dict[str, str] | None = None,
             **kwargs: Any) -> flask.Response:
        sent = {**(id_token(who) if who else {}), **(headers or {})}
        request = flask.Request(EnvironBuilder(path, method=method, headers=sent, **kwargs).get_environ())
        return self.api(request)

    def write(self, method: str, path: str, who: str | None = None, **kwargs: Any) -> flask.Response:
        return self.open(method, path, who, headers={**WRITE, **kwargs.pop("headers", {})}, **kwargs)


def body(response: flask.Response) -> dict[str, Any]:
    return orjson.loads(response.get_data())


@pytest.fixture
def prod(firestore, tmp_path, monkeypatch):
    keyring = tmp_path / "keys.json"  # the signing secrets' keyring (docs/callbacks.md), as the local stack writes it
    keyring.write_text(orjson.dumps({"primary": "k1", "keys": {"k1": base64.b64encode(bytes(range(32))).decode()}})
                       .decode())
    monkeypatch.setenv("DCM_CALLBACK_KEYS_FILE", str(keyring))
    callbacks = Callbacks(firestore, local_mode=False, resolver=lambda host, port: ["93.184.216.34"],
                          max_per_caller=3, max_total=5)
    guards = Guards(local_mode=False, tokens=RULE, admins=(ADMIN,), min_rotation_grace_seconds=60, max_streams=3,
                    max_streams_per_caller=2)
    return Direct(Api(firestore, ("aws",), 7, 0.0, 0.5, callbacks, guards=guards))


def alices_callback(prod: Direct, key: str = "aws/vm/i-1") -> tuple[str, dict[str, Any]]:
    created = prod.write("PUT", f"/v1/resources/{key}/callback", ALICE, query_string={"hook": HOOK, "token": "TOK"})
    assert created.status_code == 201, created.get_data()
    shown = body(created)
    return shown["callback"]["id"], shown


# ---- item 2: cross-site request forgery -----------------------------------------------------------
MUTATIONS = [("POST", "/v1/callbacks/{cid}/rotate", {"query_string": {"graceSeconds": "3600"}}),
             ("POST", "/v1/callbacks/{cid}/enable", {}), ("POST", "/v1/callbacks/{cid}/test", {}),
             ("DELETE", "/v1/callbacks/{cid}", {}),
             ("PUT", "/v1/resources/aws/vm/i-1/callback", {"query_string": {"hook": "https://other.example.com/x"}}),
             ("PUT", "/v1/resources/aws/vm/i-1/callback", {"query_string": {"track_hook": "none"}}),  # the tracker's
             ("PUT", "/v1/resources/aws/vm/i-1", {"query_string": {"track_hook": "https://other.example.com/x"}}),
             ("POST", "/v1/callbacks", {"data": "hook=https://other.example.com/x",
                                        "content_type": "application/x-www-form-urlencoded"}),
             ("POST", "/v1/callbacks", {"json": {"hook": "https://other.example.com/x"}})]


@pytest.mark.parametrize("method, path, kwargs", MUTATIONS)
def test_a_request_a_cross_site_form_can_send_changes_nothing(prod, firestore, method, path, kwargs):
    """What an admin's browser sends for a form of another site (the admin's token attached by the
    proxy, no DCM-Request header; Origin foreign or absent) is a 403 on every route that changes something."""
    cid, _ = alices_callback(prod)
    before = firestore.collection("callbacks").document(cid).get().to_dict()
    for headers, parameter in (({}, "DCM-Request"), ({"Origin": "https://evil.example"}, "Origin"),
                               ({**WRITE, "Origin": "https://evil.example"}, "Origin"),
                               ({**WRITE, "Origin": "null"}, "Origin")):
        refused = prod.open(method, path.format(cid=cid), ALICE, headers=headers, **kwargs)
        assert refused.status_code == 403 and refused.mimetype == "application/problem+json", refused.get_data()
        assert body(refused)["parameter"] == parameter
    assert firestore.collection("callbacks").document(cid).get().to_dict() == before
    assert [d.id for d in firestore.collection("callbacks").stream()] == [cid]


def test_the_apis_own_origin_and_reads_pass(prod):
    cid, _ = alices_callback(prod)
    own = prod.write("POST", f"/v1/callbacks/{cid}/enable", ALICE, headers={"Origin": "http://localhost"})
    assert own.status_code == 200
    proxied = {"Origin": "http://127.0.0.1:8080", "X-Forwarded-Host": "127.0.0.1:8080"}  # behind a local proxy
    assert prod.write("POST", f"/v1/callbacks/{cid}/enable", ALICE, headers=proxied).status_code == 200
    assert prod.open("GET", "/v1/callbacks", ALICE, headers={"Origin": "https://evil.example"}).status_code == 200
    assert same_origin("https://API.example:8443", "api.example:8443") and not same_origin("https://api.example",
                                                                                            "api.example:8443")


def test_a_rotation_keeps_the_previous_secret_signing_at_least_the_minimum_grace(prod):
    cid, _ = alices_callback(prod)
    for grace in ("0", "59"):
        refused = prod.write("POST", f"/v1/callbacks/{cid}/rotate", ALICE, query_string={"graceSeconds": grace})
        assert refused.status_code == 400 and body(refused)["parameter"] == "graceSeconds"
        assert "60" in body(refused)["detail"]
    rotated = prod.write("POST", f"/v1/callbacks/{cid}/rotate", ALICE, query_string={"graceSeconds": "60"})
    assert rotated.status_code == 200 and body(rotated)["callback"]["previousSecretValidUntil"]


# ---- item 3: who registered a callback changes it ---------------------------------------------------
def test_only_the_owner_or_an_admin_changes_a_callback(prod, firestore):
    cid, created = alices_callback(prod)
    assert created["callback"]["owner"] == ALICE
    path = "/v1/resources/aws/vm/i-1/callback"
    for method, url, kwargs in [("PUT", path, {"query_string": {"hook": "https://bob.example.com/steal"}}),
                                ("PUT", path, {"query_string": {"hook": "none"}}),
                                ("POST", f"/v1/callbacks/{cid}/rotate", {}), ("POST", f"/v1/callbacks/{cid}/enable", {}),
                                ("POST", f"/v1/callbacks/{cid}/test", {}), ("DELETE", f"/v1/callbacks/{cid}", {})]:
        refused = prod.write(method, url, BOB, **kwargs)
        assert refused.status_code == 403 and ALICE in body(refused)["detail"], (method, url, refused.get_data())
    stored = firestore.collection("callbacks").document(cid).get().to_dict()
    assert stored["hook"] == HOOK and stored["owner"] == ALICE
    anonymous = prod.write("PUT", path, None, query_string={"hook": "https://x.example.com/"})
    assert anonymous.status_code == 401 and body(anonymous)["parameter"] == "Authorization"
    assert prod.write("POST", f"/v1/callbacks/{cid}/rotate", ADMIN).status_code == 200  # an admin may
    assert prod.write("POST", f"/v1/callbacks/{cid}/enable", ALICE).status_code == 200  # its owner may


def test_a_changed_hook_gets_a_new_secret_and_the_old_one_no_longer_signs(prod, firestore):
    cid, created = alices_callback(prod)
    path = "/v1/resources/aws/vm/i-1/callback"
    kept = prod.write("PUT", path, ALICE, query_string={"hook": HOOK, "token": "T2"})
    assert kept.status_code == 200 and "secret" not in body(kept)  # same hook: same secret
    moved = prod.write("PUT", path, ALICE, query_string={"hook": "https://new.example.com/cb"})
    assert moved.status_code == 200 and body(moved)["secret"].startswith("whsec_")
    assert body(moved)["secret"] != created["secret"]
    secrets = firestore.collection("callbacks").document(cid).get().to_dict()["secrets"]
    assert len(secrets) == 1 and secrets[0].get("expiresAt") is None  # the old one is gone, not in grace
    assert body(moved)["callback"]["previousSecretValidUntil"] is None


def test_the_caller_is_the_verified_token_or_iap_or_local():
    assert caller_of(id_token(ALICE), False, RULE, (ADMIN,)).identity == ALICE
    assert caller_of(id_token(ADMIN), False, RULE, (ADMIN,)).admin
    assert caller_of({**id_token(ALICE), "X-Goog-Authenticated-User-Email": BOB}, False, RULE, ()).identity == ALICE
    assert caller_of({"X-Goog-Authenticated-User-Email": BOB}, False, RULE, ()).identity is None  # not a token
    assert caller_of({"Authorization": "Bearer not-a-jwt"}, False, RULE, ()).identity is None
    assert caller_of(id_token(ALICE), True, RULE, ()).identity == "local"


# ---- item 4: caps ------------------------------------------------------------------------------
def test_callbacks_are_capped_per_caller_and_in_total_with_a_409_naming_the_limit(prod):
    for n in range(3):
        assert prod.write("POST", "/v1/callbacks", ALICE, json={"hook": HOOK}).status_code == 201
    over = prod.write("POST", "/v1/callbacks", ALICE, json={"hook": HOOK})
    assert over.status_code == 409 and "DCM_MAX_CALLBACKS_PER_CALLER=3" in body(over)["detail"]
    over = prod.write("PUT", "/v1/resources/aws/vm/i-9/callback", ALICE, query_string={"hook": HOOK})
    assert over.status_code == 409 and "DCM_MAX_CALLBACKS_PER_CALLER=3" in body(over)["detail"]
    assert prod.write("POST", "/v1/callbacks", BOB, json={"hook": HOOK}).status_code == 201
    assert prod.write("PUT", "/v1/resources/aws/vm/i-8/callback", BOB, query_string={"hook": HOOK}).status_code == 201
    total = prod.write("POST", "/v1/callbacks", ADMIN, json={"hook": HOOK})
    assert total.status_code == 409 and "DCM_MAX_CALLBACKS=5" in body(total)["detail"]
    # changing one held is no new callback
    moved = prod.write("PUT", "/v1/resources/aws/vm/i-8/callback", BOB, query_string={"hook": HOOK + "2"})
    assert moved.status_code == 200


# ---- item 10: what a reader sees of another's callback, and of the dead letters -----------------------
def test_another_callers_callback_is_shown_without_its_token_or_hook_path(prod, firestore):
    cid, _ = alices_callback(prod)
    firestore.collection("callbacks").document(cid).update(
        {"stats.lastError": "HTTPSConnectionPool(host='hooks.example.com', port=443): Max retries exceeded with "
                            "url: /cb/PATH-SECRET?key=QUERY-SECRET (timeout)"})
    for answer in (body(prod.open("GET", "/v1/callbacks", BOB))["callbacks"][0],
                   body(prod.open("GET", f"/v1/callbacks/{cid}", BOB))["callback"],
                   body(prod.open("GET", "/v1/resources/aws/vm/i-1/callback", ADMIN))["callback"]):
        text = orjson.dumps(answer).decode()
        assert "SECRET" not in text and "TOK" not in text, text
        assert answer["hook"] == "https://hooks.example.com/\u2026" and answer["token"] is None
        assert answer["redacted"] is True and answer["owner"] == ALICE
    mine = body(prod.open("GET", f"/v1/callbacks/{cid}", ALICE))["callback"]
    assert mine["hook"] == HOOK and mine["token"] == "TOK" and mine["redacted"] is False


def test_the_dead_letters_show_no_hook_path_or_query(prod, firestore):
    firestore.collection("deadletters").document("d1").set({
        "fingerprint": "fp", "reason": "callback_exhausted", "provider": None,
        "message": f"callback f1: {HOOK} failed for 60 s since 2026-11-25T10:00:00Z; last: HTTPSConnectionPool("
                   "host='hooks.example.com', port=443): Max retries exceeded with url: /cb/PATH-SECRET?key=QUERY-SECRET",
        "occurrences": 1, "state": "open", "firstSeen": "2026-11-25T10:00:00.000000Z",
        "lastSeen": "2026-11-25T10:00:00.000000Z"})
    [group] = body(prod.open("GET", "/v1/deadletters", ALICE))["groups"]
    assert "SECRET" not in group["message"] and "https://hooks.example.com/\u2026 failed" in group["message"]


# ---- item 11: live streams capped per instance and per caller --------------------------------------
def test_live_streams_are_capped_per_caller_and_per_instance_and_a_closed_one_frees_its_place(prod):
    a1, a2 = prod.open("GET", "/v1/changes/stream", ALICE), prod.open("GET", "/v1/changes/stream", ALICE)
    assert a1.status_code == a2.status_code == 200
    refused = prod.open("GET", "/v1/changes/stream", ALICE)
    assert refused.status_code == 429 and refused.headers["Retry-After"]
    assert "DCM_MAX_STREAMS_PER_CALLER" in body(refused)["detail"]
    b1 = prod.open("GET", "/v1/changes/stream", BOB)
    assert b1.status_code == 200
    full = prod.open("GET", "/v1/changes/stream", ADMIN)
    assert full.status_code == 429 and "DCM_MAX_STREAMS" in body(full)["detail"]
    a1.close()  # never read: the server closes it when the client goes
    again = prod.open("GET", "/v1/changes/stream", ALICE)
    assert again.status_code == 200
    for response in (a2, b1, again):
        response.close()
    assert prod.api.slots.open() == 0


def test_a_stream_read_to_its_end_through_the_server_frees_its_place(client, firestore):
    from tests.fakes import runtime_of
    from tests.functional.conftest import PROJECT, bind_all
    bind_all(runtime_of(firestore=firestore, DCM_PROJECT=PROJECT, DCM_FEED_SETTLE_SECONDS="0",
                        DCM_STREAM_SECONDS="0.2", DCM_MAX_STREAMS_PER_CALLER="1"))
    for _ in range(3):  # one at a time, each to its end (then closed, as a WSGI server does): never over the cap
        response = client.get("/v1/changes/stream")
        assert response.status_code == 200 and b"ready" in response.get_data()
        response.close()
    held = client.get("/v1/changes/stream", buffered=False)
    assert client.get("/v1/changes/stream").status_code == 429
    held.close()
    assert client.get("/v1/changes/stream", buffered=False).status_code == 200


# ---- item 12: malformed input is a 400, never a 500 -----------------------------------------------
def test_a_cursor_or_page_token_naming_no_document_is_a_400(api):
    bad = ["a/b", "..", ".", "__x__", "x" * 1501]
    for doc_id in bad:
        for path, parameter in [
            ("/v1/resources?pageToken=" + tokens.to_token(["key", doc_id]), "pageToken"),
            ("/v1/resources?sort=-updatedAt&pageToken=" + tokens.to_token(["-updatedAt", "t", doc_id]), "pageToken"),
            ("/v1/resources?q=i&pageToken=" + tokens.to_token(["resourceId", "i", doc_id]), "pageToken"),
            ("/v1/resources/aws/vm/i-1/history?pageToken=" + tokens.to_token(["history", "t", doc_id]), "pageToken"),
            ("/v1/changes?after=" + tokens.to_token(["2099-01-01T00:00:00Z", doc_id]), "after"),
            ("/v1/changes/stream?after=" + tokens.to_token(["2099-01-01T00:00:00Z", doc_id]), "after"),
        ]:
            if len(path) > 2200:
                continue
            response = api.client.get(path)
            assert response.status_code == 400 and response.json["parameter"] == parameter, (path, response.data)


@pytest.mark.parametrize("hook", ["https://metadata.google.internal../", "https://a..example.com/",
                                  "https://" + "a" * 64 + ".example.com/", "http://127.0.0.1../x"])
def test_a_hook_that_is_no_host_name_is_a_400(api, hook):
    for response in (api.open("POST", "/v1/callbacks", json={"hook": hook}, headers=WRITE),
                     api.open("PUT", "/v1/resources/aws/vm/i-1/callback", query_string={"hook": hook},
                              headers=WRITE)):
        assert response.status_code == 400 and response.json["parameter"] == "hook", response.data


@pytest.mark.parametrize("cid", ["__x__", "..", "."])
def test_a_callback_id_naming_no_document_is_a_404(api, cid):
    assert api.client.get(f"/v1/callbacks/{cid}").status_code in (404, 308)  # werkzeug may normalise . and ..
    assert api.client.post(f"/v1/callbacks/{cid}/enable", headers=WRITE).status_code in (404, 308)


text = st.text(st.characters(codec="utf-8"), max_size=80)
token_parts = st.lists(st.one_of(text, st.sampled_from(["key", "-updatedAt", "resourceId", "history", "a/b",
                                                        "__x__", "..", "2026-01-01T00:00:00Z"])), max_size=4)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=token_parts, raw=text)
def test_fuzzed_tokens_cursors_ids_and_hooks_never_answer_500(api, parts, raw):
    encoded = tokens.to_token(parts)
    for path in (f"/v1/resources?pageToken={encoded}", f"/v1/resources?sort=-updatedAt&pageToken={encoded}",
                 f"/v1/changes?after={encoded}", f"/v1/resources/aws/vm/i-1/history?pageToken={encoded}"):
        assert api.client.get(path).status_code < 500, path
    for query in ({"pageToken": raw}, {"after": raw}, {"q": raw or "x"}):
        assert api.client.get("/v1/resources" if "after" not in query else "/v1/changes",
                              query_string=query).status_code < 500, query
    assert api.client.post("/v1/callbacks", json={"hook": "https://" + raw + "/"}, headers=WRITE).status_code < 500
    assert api.client.get("/v1/callbacks/" + (raw.replace("/", "_") or "x")).status_code < 500


# ---- issue 37, item 1: the api verifies who calls it ------------------------------------------------
IMPOSTOR = Signer.rsa("google-1")  # a key that is not Google's, even under the id of one of Google's keys
FORGED_ADMIN = {"Authorization": "Bearer " + unsigned({"email": ADMIN, "email_verified": True, "aud": API_URL,
                                                       "iss": "https://accounts.google.com",
                                                       "exp": int(time.time()) + 3600, "iat": int(time.time())})}
ALICES_CHANGES = [("POST", "/v1/callbacks/{cid}/rotate", {}), ("POST", "/v1/callbacks/{cid}/enable", {}),
                  ("POST", "/v1/callbacks/{cid}/test", {}), ("DELETE", "/v1/callbacks/{cid}", {}),
                  ("PUT", "/v1/resources/aws/vm/i-1/callback", {"query_string": {"hook": "https://bob.example/x"}})]


def serverless(token: str) -> dict[str, str]:
    return {"X-Serverless-Authorization": f"Bearer {token}"}


def stored(firestore, cid: str) -> dict[str, Any]:
    return firestore.collection("callbacks").document(cid).get().to_dict()


@pytest.mark.parametrize("method, path, kwargs", ALICES_CHANGES)
def test_a_forged_authorization_beside_the_token_cloud_run_checked_changes_nothing(prod, firestore, method, path,
                                                                                   kwargs):
    """The issue's probe: an invoker sends its real token in X-Serverless-Authorization (what Cloud Run's IAM
    check reads) and `Authorization: Bearer <alg none>.<{"email": admin}>.x`. The api names the caller by the
    header Cloud Run checked (Bob: 403 on Alice's callback), never by the forged one; with no real token
    beside it, or an invalid one, nobody (401): no fallback to Authorization."""
    cid, _ = alices_callback(prod)
    before = stored(firestore, cid)
    for headers, status in ((serverless(GOOGLE.id_token(BOB)), 403),
                            (serverless(GOOGLE.id_token(BOB, aud="https://other.example")), 401),
                            (serverless("garbage"), 401), ({"X-Serverless-Authorization": ""}, 401), ({}, 401)):
        refused = prod.open(method, path.format(cid=cid), headers={**WRITE, **FORGED_ADMIN, **headers}, **kwargs)
        assert refused.status_code == status, (headers, refused.get_data())
        assert refused.mimetype == "application/problem+json" and ADMIN not in refused.get_data(as_text=True)
    assert stored(firestore, cid) == before
    assert prod.write("POST", f"/v1/callbacks/{cid}/enable", ADMIN).status_code == 200  # the real admin may


CHECKS_FAILED = [
    ("signed by a key that is not Google's", lambda email: GOOGLE.id_token(email, signer=IMPOSTOR)),
    ("expired", lambda email: GOOGLE.id_token(email, iat=int(time.time()) - 7200, exp=int(time.time()) - 3600)),
    ("for another audience", lambda email: GOOGLE.id_token(email, aud="https://dcm-status-ingest-1.run.app")),
    ("from another issuer", lambda email: GOOGLE.id_token(email, iss="https://attacker.example")),
    ("email not verified", lambda email: GOOGLE.id_token(email, email_verified=False)),
    ("unsigned (alg none)", lambda email: unsigned(Google.claims(email))),
    ("signed ES256 where Google signs RS256", lambda email: Signer.es256("google-1").sign(Google.claims(email))),
    ("longer than any ID token", lambda email: GOOGLE.id_token(email, padding="x" * 9000)),
]


@pytest.mark.parametrize("why, token", CHECKS_FAILED, ids=[c[0] for c in CHECKS_FAILED])
def test_a_token_that_fails_a_check_names_nobody(prod, firestore, why, token):
    """Each check: a change is a 401 and writes nothing; a read is answered as to anyone (the callback's owner
    would see its token and hook; this caller does not)."""
    cid, _ = alices_callback(prod)
    before = stored(firestore, cid)
    forged = bearer(token(ALICE))
    assert caller_of(forged, False, RULE, (ALICE,)) == Caller(None, verdict=Verdict.REFUSED)
    created = prod.open("PUT", "/v1/resources/aws/vm/i-2/callback", headers={**WRITE, **forged},
                        query_string={"hook": HOOK})
    assert created.status_code == 401 and body(created)["parameter"] == "Authorization", created.get_data()
    for method, path, kwargs in ALICES_CHANGES:
        assert prod.open(method, path.format(cid=cid), headers={**WRITE, **forged}, **kwargs).status_code == 401
    assert stored(firestore, cid) == before and [d.id for d in firestore.collection("callbacks").stream()] == [cid]
    shown = prod.open("GET", f"/v1/callbacks/{cid}", headers=forged)
    assert shown.status_code == 200 and body(shown)["callback"]["redacted"] is True
    assert "TOK" not in shown.get_data(as_text=True) and "SECRET" not in shown.get_data(as_text=True)


def test_a_valid_token_names_its_caller_and_whether_an_admin():
    alice = caller_of(id_token(ALICE), False, RULE, (ADMIN,))
    admin = caller_of(serverless(GOOGLE.id_token(ADMIN)), False, RULE, (ADMIN,))
    assert (alice.identity, alice.admin, alice.verdict) == (ALICE, False, Verdict.VERIFIED)
    assert (admin.identity, admin.admin) == (ADMIN, True)
    assert caller_of(bearer(GOOGLE.id_token(ALICE, iss="accounts.google.com")), False, RULE, ()).identity == ALICE


def test_a_read_with_a_token_the_api_cannot_verify_is_a_read_by_anyone(prod, firestore):
    """The DCM CLI sends `Authorization: Bearer $DCM_TOKEN` (a token of the control-plane, not Google's): its
    reads are answered as reads without identity, never a 401 or a 500; and a forged token of a callback's
    owner does not show the owner's view (the token and hook path)."""
    cid, _ = alices_callback(prod)
    firestore.collection("resources").document("aws~vm~i-1").set({"provider": "aws", "resourceType": "vm",
                                                                 "resourceId": "i-1", "status": "RUNNING"})
    forged_alice = bearer(unsigned({"email": ALICE, "email_verified": True}))
    for headers in (bearer("dcm-control-plane-token"), bearer("a.b.c"), forged_alice,
                    bearer(GOOGLE.id_token(ALICE, exp=int(time.time()) - 3600)), {"Authorization": "Basic eDp5"}):
        for path in ("/api/v1alpha1/service-type-instances", "/api/v1alpha1/health", "/v1/callbacks",
                     f"/v1/callbacks/{cid}", "/v1/resources/aws/vm/i-1/callback"):
            answer = prod.open("GET", path, headers=headers)
            assert answer.status_code == 200, (path, headers, answer.get_data())
        assert "TOK" not in prod.open("GET", f"/v1/callbacks/{cid}", headers=headers).get_data(as_text=True)
    listed = prod.open("GET", "/api/v1alpha1/service-type-instances", headers=forged_alice)
    assert listed.status_code == 200 and "i-1" in listed.get_data(as_text=True), listed.get_data()


def test_without_googles_keys_a_change_waits_with_a_503_and_a_read_is_answered(firestore, tmp_path, monkeypatch):
    from dcm_status_contracts.errors import KeysUnavailable

    def unreachable() -> dict[str, str]:
        raise KeysUnavailable("Google's signing keys could not be fetched")
    keyring = tmp_path / "keys.json"
    keyring.write_text(orjson.dumps({"primary": "k1", "keys": {"k1": base64.b64encode(bytes(32)).decode()}}).decode())
    monkeypatch.setenv("DCM_CALLBACK_KEYS_FILE", str(keyring))
    api = Direct(Api(firestore, ("aws",), 7, 0.0, 0.5, Callbacks(firestore, local_mode=False,
                                                                 resolver=lambda h, p: ["93.184.216.34"]),
                     guards=Guards(tokens=TokenRule.google((API_URL,), unreachable))))
    waiting = api.write("PUT", "/v1/resources/aws/vm/i-1/callback", ALICE, query_string={"hook": HOOK})
    assert waiting.status_code == 503 and waiting.headers["Retry-After"], waiting.get_data()
    assert "Google" in body(waiting)["detail"]
    assert api.open("GET", "/v1/callbacks", ALICE).status_code == 200
    assert list(firestore.collection("callbacks").stream()) == []


def test_behind_iap_the_caller_is_iaps_signed_assertion_never_the_plain_header(firestore, tmp_path, monkeypatch):
    keyring = tmp_path / "keys.json"
    keyring.write_text(orjson.dumps({"primary": "k1", "keys": {"k1": base64.b64encode(bytes(32)).decode()}}).decode())
    monkeypatch.setenv("DCM_CALLBACK_KEYS_FILE", str(keyring))
    rule = TokenRule.iap(IAP_AUDIENCE, GOOGLE.iap_keys)
    api = Direct(Api(firestore, ("aws",), 7, 0.0, 0.5, Callbacks(firestore, local_mode=False,
                                                                 resolver=lambda h, p: ["93.184.216.34"]),
                     guards=Guards(tokens=rule, admins=(ADMIN,))))
    plain = {"X-Goog-Authenticated-User-Email": f"accounts.google.com:{ADMIN}", **WRITE}
    put = ("PUT", "/v1/resources/aws/vm/i-1/callback")
    assert api.open(*put, headers=plain, query_string={"hook": HOOK}).status_code == 401  # the header alone: nobody
    for wrong in (GOOGLE.iap_assertion(ADMIN, signer=Signer.es256("iap-1")),  # not IAP's key
                  GOOGLE.iap_assertion(ADMIN, aud="/projects/1/global/backendServices/2"),
                  GOOGLE.iap_assertion(ADMIN, iss="https://accounts.google.com"),
                  GOOGLE.iap_assertion(ADMIN, exp=int(time.time()) - 60, iat=int(time.time()) - 700),
                  GOOGLE.id_token(ADMIN)):  # a Google ID token is not IAP's assertion
        refused = api.open(*put, headers={**plain, "X-Goog-IAP-JWT-Assertion": wrong}, query_string={"hook": HOOK})
        assert refused.status_code == 401, refused.get_data()
    assert list(firestore.collection("callbacks").stream()) == []
    signed = {**WRITE, "X-Goog-IAP-JWT-Assertion": GOOGLE.iap_assertion(ALICE)}
    created = api.open(*put, headers=signed, query_string={"hook": HOOK})
    assert created.status_code == 201 and body(created)["callback"]["owner"] == ALICE
    assert caller_of({"X-Goog-IAP-JWT-Assertion": GOOGLE.iap_assertion(ADMIN)}, False, rule, (ADMIN,)).admin


# ---- moved from tests/e2e/test_api_security.py (issue 41): the api in local mode (every caller ``local``), the
# pipeline in process (tests/pipeline.py), a webhook receiver on loopback; a callback of another owner is
# written to Firestore as the api would have stored it for that owner -------------------------------------


@pytest.fixture
def receiver():
    from infra.local.receiver import Receiver

    r = Receiver()
    yield r
    r.close()


def call(pipeline, method: str, path: str, headers: dict[str, str] | None = None, params: dict[str, str] | None = None,
         **kwargs: Any):
    """One request to the api as a browser or curl sends it (``params``: the query string)."""
    return pipeline.api.open(method, "/" + path.lstrip("/"), headers=headers or {}, query_string=params or {}, **kwargs)


def test_what_a_cross_site_page_can_send_changes_no_callback(pipeline, receiver):
    key = "aws/vm/csrf-1"
    created = call(pipeline, "PUT", f"v1/resources/{key}/callback", WRITE, params={"hook": receiver.url("csrf")})
    assert created.status_code == 201, created.text
    cid = created.json["callback"]["id"]
    form = {"Content-Type": "application/x-www-form-urlencoded"}  # what an HTML form posts
    for headers in (form, {**form, "Origin": "https://evil.example"}, {**WRITE, "Origin": "https://evil.example"}):
        for method, path, params in (("POST", f"v1/callbacks/{cid}/rotate", {"graceSeconds": "0"}),
                                     ("POST", f"v1/callbacks/{cid}/enable", {}),
                                     ("POST", f"v1/callbacks/{cid}/test", {}),
                                     ("DELETE", f"v1/callbacks/{cid}", {}),
                                     ("PUT", f"v1/resources/{key}/callback", {"hook": "http://127.0.0.1:9/x"}),
                                     ("POST", "v1/callbacks", {})):
            refused = call(pipeline, method, path, headers, params=params, data="hook=http://127.0.0.1:9/x")
            assert refused.status_code == 403, (method, path, headers, refused.text)
            assert refused.headers["Content-Type"].startswith("application/problem+json")
    shown = call(pipeline, "GET", f"v1/callbacks/{cid}").json["callback"]
    assert shown["hook"] == receiver.url("csrf") and shown["previousSecretValidUntil"] is None
    assert call(pipeline, "POST", f"v1/callbacks/{cid}/rotate", WRITE, params={"graceSeconds": "0"}).status_code == 400
    rotated = call(pipeline, "POST", f"v1/callbacks/{cid}/rotate", WRITE, params={"graceSeconds": "60"})
    assert rotated.status_code == 200 and rotated.json["callback"]["previousSecretValidUntil"]


def test_a_changed_hook_gets_a_new_secret_the_old_one_does_not_verify(pipeline, receiver):
    """The Deltacloud tracker's re-PUT with another hook: the new receiver is sent deliveries signed with
    a new secret only (before, the old receiver's secret kept signing for whoever the hook now named)."""
    from standardwebhooks.webhooks import Webhook, WebhookVerificationError

    key = "aws/vm/moved-1"
    first = call(pipeline, "PUT", f"v1/resources/{key}/callback", WRITE, params={"hook": receiver.url("old")}).json
    moved = call(pipeline, "PUT", f"v1/resources/{key}/callback", WRITE, params={"hook": receiver.url("new")})
    assert moved.status_code == 200 and moved.json["secret"] != first["secret"]
    assert moved.json["callback"]["owner"] == "local"
    new = receiver.hook("new", secret=moved.json["secret"])
    pipeline.reporter("aws").publish_now("vm", "moved-1", "RUNNING", "up").result()
    pipeline.settle()
    got = new.got[0]
    assert got.verified
    raw = orjson.dumps(got.body)  # the bytes sent (notify writes orjson): the new secret verifies them ...
    Webhook(moved.json["secret"]).verify(raw, got.headers)
    with pytest.raises(WebhookVerificationError):  # ... the old receiver's does not
        Webhook(first["secret"]).verify(raw, got.headers)


def test_a_callback_registered_by_another_is_neither_changed_nor_shown_in_full(pipeline):
    from shared.callbacks import registration

    uid = "u1"
    key = f"aws/vm/alice-{uid}"
    hook = f"https://hooks.example.com/p/PATH-{uid}?key=QUERY-{uid}"
    ids = {"resource": registration.resource_callback_id(key), "filter": f"falice{uid}"}
    for scope, cid in ids.items():
        pipeline.db.collection("callbacks").document(cid).set({
            "hook": hook, "scope": scope, "createdAt": "2026-11-25T10:00:00.000000Z", "token": f"TOKEN-{uid}",
            "key": key if scope == "resource" else None,
            "filter": {} if scope == "resource" else {"provider": f"nobody-{uid}"},
            "retrySeconds": 60, "disabled": None, "owner": ALICE, "secrets": []})
    for cid in ids.values():
        for method, path in (("POST", f"v1/callbacks/{cid}/rotate"), ("POST", f"v1/callbacks/{cid}/enable"),
                             ("POST", f"v1/callbacks/{cid}/test"), ("DELETE", f"v1/callbacks/{cid}")):
            refused = call(pipeline, method, path, WRITE)
            assert refused.status_code == 403 and ALICE in refused.json["detail"], (method, path, refused.text)
    for params in ({"hook": "http://127.0.0.1:9/stolen"}, {"hook": "none"}):
        assert call(pipeline, "PUT", f"v1/resources/{key}/callback", WRITE, params=params).status_code == 403
    listed = [c for c in call(pipeline, "GET", "v1/callbacks").json["callbacks"] if c["id"] in ids.values()]
    shown = [call(pipeline, "GET", f"v1/callbacks/{cid}").json["callback"] for cid in ids.values()]
    for c in [*listed, *shown, call(pipeline, "GET", f"v1/resources/{key}/callback").json["callback"]]:
        assert c["owner"] == ALICE and c["redacted"] is True and c["token"] is None
        assert c["hook"] == "https://hooks.example.com/\u2026"
        assert f"PATH-{uid}" not in str(c) and f"QUERY-{uid}" not in str(c) and f"TOKEN-{uid}" not in str(c), c
    assert len(listed) == 2
    stored = pipeline.db.collection("callbacks").document(ids["resource"]).get().to_dict()
    assert stored["hook"] == hook and stored["token"] == f"TOKEN-{uid}"


def test_the_dead_letters_of_an_exhausted_callback_show_no_hook_path_or_query(pipeline):
    from shared.deadletter.store import DeadLetterStore

    uid = "u1"
    key = f"aws/vm/dlhook-{uid}"
    hook = f"http://127.0.0.1:9/PATH-{uid}?key=QUERY-{uid}"  # port 9 on loopback: connection refused
    created = call(pipeline, "PUT", f"v1/resources/{key}/callback", WRITE, params={"hook": hook, "retrySeconds": "2"})
    assert created.status_code == 201, created.text
    pipeline.reporter("aws").publish_now("vm", f"dlhook-{uid}", "RUNNING", "up").result()
    pipeline.settle()
    assert [e for e in DeadLetterStore(pipeline.db).query(reason="callback_exhausted") if e.get("key") == key]
    dead = call(pipeline, "GET", "v1/deadletters", params={"reason": "callback_exhausted"})
    assert dead.status_code == 200 and dead.json["groups"]
    assert f"PATH-{uid}" not in dead.text and f"QUERY-{uid}" not in dead.text
