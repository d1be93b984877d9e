"""The api's guards end to end (issue 25), through the real api on the local stack: what a hostile web
page open in an admin's browser can send changes nothing; a changed hook gets a new secret and the
new receiver verifies with it only; a callback registered by someone else is neither changed nor
shown in full; the dead letters show no hook path or query.

Locally every caller is ``local`` (docs/api.md); a callback of another owner is written to Firestore
as the api would have stored it for that owner.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import requests
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from shared.callbacks import registration
from infra.local.receiver import Receiver
from tests.e2e.conftest import E2EStack, wait_until

WRITE = {"DCM-Request": "1"}
ALICE = "alice@example.com"


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def call(e2e: E2EStack, method: str, path: str, headers: dict[str, str] | None = None, **kwargs: Any
         ) -> requests.Response:
    return requests.request(method, e2e.api_url + path.lstrip("/"), headers=headers or {}, timeout=30, **kwargs)


def test_what_a_cross_site_page_can_send_changes_no_callback(e2e, uid, receiver):
    key = f"aws/vm/csrf-{uid}"
    created = call(e2e, "PUT", f"v1/resources/{key}/callback", WRITE, params={"hook": receiver.url("csrf")})
    assert created.status_code == 201, created.text
    cid = created.json()["callback"]["id"]
    try:
        form = {"Content-Type": "application/x-www-form-urlencoded"}  # what an HTML form posts
        for headers in (form, {**form, "Origin": "https://evil.example"}, {**WRITE, "Origin": "https://evil.example"}):
            for method, path, params in (("POST", f"v1/callbacks/{cid}/rotate", {"graceSeconds": "0"}),
                                         ("POST", f"v1/callbacks/{cid}/enable", {}),
                                         ("POST", f"v1/callbacks/{cid}/test", {}),
                                         ("DELETE", f"v1/callbacks/{cid}", {}),
                                         ("PUT", f"v1/resources/{key}/callback", {"hook": "http://127.0.0.1:9/x"}),
                                         ("POST", "v1/callbacks", {})):
                refused = call(e2e, method, path, headers, params=params, data="hook=http://127.0.0.1:9/x")
                assert refused.status_code == 403, (method, path, headers, refused.text)
                assert refused.headers["Content-Type"].startswith("application/problem+json")
        shown = call(e2e, "GET", f"v1/callbacks/{cid}").json()["callback"]
        assert shown["hook"] == receiver.url("csrf") and shown["previousSecretValidUntil"] is None
        assert call(e2e, "POST", f"v1/callbacks/{cid}/rotate", WRITE, params={"graceSeconds": "0"}).status_code == 400
        rotated = call(e2e, "POST", f"v1/callbacks/{cid}/rotate", WRITE, params={"graceSeconds": "60"})
        assert rotated.status_code == 200 and rotated.json()["callback"]["previousSecretValidUntil"]
    finally:
        call(e2e, "DELETE", f"v1/callbacks/{cid}", WRITE)


def test_a_changed_hook_gets_a_new_secret_the_old_one_does_not_verify(e2e, uid, receiver):
    """The Deltacloud tracker's re-PUT with another hook: the new receiver is sent deliveries signed with
    a new secret only (before, the old receiver's secret kept signing for whoever the hook now named)."""
    key = f"aws/vm/moved-{uid}"
    first = call(e2e, "PUT", f"v1/resources/{key}/callback", WRITE, params={"hook": receiver.url("old")}).json()
    moved = call(e2e, "PUT", f"v1/resources/{key}/callback", WRITE, params={"hook": receiver.url("new")})
    try:
        assert moved.status_code == 200 and moved.json()["secret"] != first["secret"]
        assert moved.json()["callback"]["owner"] == "local"
        new = receiver.hook("new", secret=moved.json()["secret"])
        e2e.reporter("aws").publish_now("vm", f"moved-{uid}", "RUNNING", "up").result(timeout=30)
        got = wait_until(lambda: new.got, 60, what="the delivery to the new hook")[0]
        assert got.verified
        raw = orjson.dumps(got.body)  # the bytes sent (notify writes orjson): the new secret verifies them ...
        Webhook(moved.json()["secret"]).verify(raw, got.headers)
        with pytest.raises(WebhookVerificationError):  # ... the old receiver's does not
            Webhook(first["secret"]).verify(raw, got.headers)
    finally:
        call(e2e, "PUT", f"v1/resources/{key}/callback", WRITE, params={"hook": "none"})


def test_a_callback_registered_by_another_is_neither_changed_nor_shown_in_full(e2e, uid):
    key = f"aws/vm/alice-{uid}"
    hook = f"https://hooks.example.com/p/PATH-{uid}?key=QUERY-{uid}"
    ids = {"resource": registration.resource_callback_id(key), "filter": f"falice{uid}"}
    for scope, cid in ids.items():
        e2e.db.collection("callbacks").document(cid).set({
            "hook": hook, "scope": scope, "createdAt": "2026-11-25T10:00:00.000000Z", "token": f"TOKEN-{uid}",
            "key": key if scope == "resource" else None,
            "filter": {} if scope == "resource" else {"provider": f"nobody-{uid}"},
            "retrySeconds": 60, "disabled": None, "owner": ALICE, "secrets": []})
    try:
        for cid in ids.values():
            for method, path in (("POST", f"v1/callbacks/{cid}/rotate"), ("POST", f"v1/callbacks/{cid}/enable"),
                                 ("POST", f"v1/callbacks/{cid}/test"), ("DELETE", f"v1/callbacks/{cid}")):
                refused = call(e2e, method, path, WRITE)
                assert refused.status_code == 403 and ALICE in refused.json()["detail"], (method, path, refused.text)
        for params in ({"hook": "http://127.0.0.1:9/stolen"}, {"hook": "none"}):
            assert call(e2e, "PUT", f"v1/resources/{key}/callback", WRITE, params=params).status_code == 403
        listed = [c for c in call(e2e, "GET", "v1/callbacks").json()["callbacks"] if c["id"] in ids.values()]
        shown = [call(e2e, "GET", f"v1/callbacks/{cid}").json()["callback"] for cid in ids.values()]
        for c in [*listed, *shown, call(e2e, "GET", f"v1/resources/{key}/callback").json()["callback"]]:
            assert c["owner"] == ALICE and c["redacted"] is True and c["token"] is None
            assert c["hook"] == "https://hooks.example.com/\u2026"
            assert f"PATH-{uid}" not in str(c) and f"QUERY-{uid}" not in str(c) and f"TOKEN-{uid}" not in str(c), c
        assert len(listed) == 2
        stored = e2e.db.collection("callbacks").document(ids["resource"]).get().to_dict()
        assert stored["hook"] == hook and stored["token"] == f"TOKEN-{uid}"
    finally:
        for cid in ids.values():
            e2e.db.collection("callbacks").document(cid).delete()


def test_the_dead_letters_of_an_exhausted_callback_show_no_hook_path_or_query(e2e, uid):
    key = f"aws/vm/dlhook-{uid}"
    hook = f"http://127.0.0.1:9/PATH-{uid}?key=QUERY-{uid}"  # port 9 on loopback: connection refused
    created = call(e2e, "PUT", f"v1/resources/{key}/callback", WRITE, params={"hook": hook, "retrySeconds": "2"})
    assert created.status_code == 201, created.text
    try:
        e2e.reporter("aws").publish_now("vm", f"dlhook-{uid}", "RUNNING", "up").result(timeout=30)
        wait_until(lambda: [e for e in e2e.deadletters(reason="callback_exhausted") if e.get("key") == key], 120,
                   what="the callback_exhausted dead letter")
        dead = call(e2e, "GET", "v1/deadletters", params={"reason": "callback_exhausted"})
        assert dead.status_code == 200 and dead.json()["groups"]
        assert f"PATH-{uid}" not in dead.text and f"QUERY-{uid}" not in dead.text
    finally:
        call(e2e, "PUT", f"v1/resources/{key}/callback", WRITE, params={"hook": "none"})
