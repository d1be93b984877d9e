"""Webhook callbacks end to end: providers report, upsert commits, notify fans out and delivers,
through real push subscriptions on the emulators, to a real receiver on loopback that verifies
every signature with the ``standardwebhooks`` library (tests/receiver.py).

Locally a failed delivery is retried about once a second (the emulator's redelivery; production
follows the retry lane's back-off: docs/callbacks.md); short retry periods stand for the 3 days.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import orjson
import pytest
import requests
from requests.adapters import HTTPAdapter
from urllib3.util import Retry

from infra.local.receiver import Hook, Receiver
from shared.callbacks.hooks import redact_hook
from tests.e2e.conftest import E2EStack, wait_until

HOOK_TIMEOUT = 5.0  # the e2e stack's DCM_HOOK_TIMEOUT_SECONDS (conftest)


@pytest.fixture
def receiver(e2e):
    r = Receiver()
    yield r
    r.close()
    # its callbacks go with it: or the later tests would share the stack with deliveries retried for days
    for c in api(e2e, "GET", "v1/callbacks").json()["callbacks"]:
        if c["hook"].startswith(r.url("")):
            api(e2e, "DELETE", f"v1/callbacks/{c['id']}")


def _client() -> requests.Session:
    """As a legitimate client calls the api: a 503 (Firestore slow to answer) is retried after its Retry-After."""
    session = requests.Session()
    retry = Retry(total=3, status_forcelist=[503], allowed_methods=None, respect_retry_after_header=True,
                  raise_on_status=False)
    session.mount("http://", HTTPAdapter(max_retries=retry))
    return session


CLIENT = _client()


def api(e2e: E2EStack, method: str, path: str, **kwargs: Any) -> requests.Response:
    """A call of the api as a legitimate client makes it: with DCM-Request on what changes something."""
    headers = {"DCM-Request": "1", **kwargs.pop("headers", {})}
    return CLIENT.request(method, e2e.api_url + path.lstrip("/"), timeout=30, headers=headers, **kwargs)


def on_resource(e2e: E2EStack, key: str, hook: str, **params: Any) -> dict[str, Any]:
    response = api(e2e, "PUT", f"v1/resources/{key}/callback", params={"hook": hook, **params})
    assert response.status_code in (200, 201), response.text
    return response.json()


def on_filter(e2e: E2EStack, hook: str, where: dict[str, str], **fields: Any) -> dict[str, Any]:
    response = api(e2e, "POST", "v1/callbacks", json={"hook": hook, "filter": where, **fields})
    assert response.status_code == 201, response.text
    return response.json()


def stats(e2e: E2EStack, callback_id: str) -> dict[str, Any]:
    return api(e2e, "GET", f"v1/callbacks/{callback_id}").json()["callback"]


def status_change(body: dict[str, Any]) -> tuple[Any, Any] | None:
    return next(((c["old"], c["new"]) for c in body["changes"] if c["attribute"] == "/status"), None)


def test_a_status_change_is_one_signed_callback_with_the_right_diff(e2e, uid, receiver):
    key = f"aws/vm/cb-{uid}"
    registered = on_resource(e2e, key, receiver.url("ok"), token="ABCDEFG42")
    stored = e2e.db.collection("callbacks").document(registered["callback"]["id"]).get().to_dict()
    assert "whsec_" not in orjson.dumps(stored).decode()  # sealed at rest (AES-GCM); every delivery still verifies
    hook = receiver.hook("ok", secret=registered["secret"])
    aws = e2e.reporter("aws")
    aws.publish_now("vm", f"cb-{uid}", "RUNNING", "up").result(timeout=30)
    e2e.wait_for_status(key, "RUNNING")
    aws.publish_now("vm", f"cb-{uid}", "STOPPED", "down", time="2099-01-01T00:00:00Z").result(timeout=30)
    changes = {(None, "RUNNING"), ("RUNNING", "STOPPED")}
    wait_until(lambda: {status_change(b) for b in hook.bodies()} == changes, 30, what="both callbacks")
    time.sleep(1)  # room for a duplicate to show
    assert all(r.verified for r in hook.got) and len(hook.got) == 2
    # deliveries are not ordered (two lanes, at least once): each says which change it is
    first, second = sorted(hook.bodies(), key=lambda b: status_change(b) != (None, "RUNNING"))
    assert status_change(first) == (None, "RUNNING") and second["resource"]["status"] == "STOPPED"
    assert second["token"] == "ABCDEFG42" and second["key"] == key
    assert len({r.headers["webhook-id"] for r in hook.got}) == 2
    # the cursor catches up from the feed (once the change has settled there)
    wait_until(lambda: second["id"] in catch_up(e2e, first["cursor"], key), 10, what="the change in the feed")
    s = wait_until(lambda: (c := stats(e2e, registered["callback"]["id"]))["stats"]["delivered"] == 2 and c,
                   10, what="the stats")["stats"]
    assert s["consecutiveFailures"] == 0 and s["lastSuccessAt"] and s["lastStatus"] == 204


def test_a_receiver_answering_500_three_times_then_204_gets_the_change_once_it_recovers(e2e, uid, receiver):
    key = f"aws/vm/flaky-{uid}"
    registered = on_resource(e2e, key, receiver.url("flaky"))
    hook = receiver.hook("flaky", secret=registered["secret"], statuses=[500, 500, 500, 204])
    e2e.reporter("aws").publish_now("vm", f"flaky-{uid}", "RUNNING", "up").result(timeout=30)
    wait_until(lambda: any(r.status == 204 for r in hook.got), 60, what="the delivery that succeeds")
    assert [r.status for r in hook.got] == [500, 500, 500, 204]
    assert len({r.headers["webhook-id"] for r in hook.got}) == 1 and all(r.verified for r in hook.got)
    s = wait_until(lambda: (c := stats(e2e, registered["callback"]["id"]))["stats"]["delivered"] == 1 and c,
                   10, what="the stats")["stats"]
    assert s["failedAttempts"] == 3 and s["consecutiveFailures"] == 0 and s["lastFailureAt"] < s["lastSuccessAt"]


def test_410_gone_disables_the_callback(e2e, uid, receiver):
    gone = on_filter(e2e, receiver.url("gone"), {"label": f"tenant:{uid}"})
    fine = on_filter(e2e, receiver.url("fine"), {"label": f"tenant:{uid}"})
    gone_hook = receiver.hook("gone", secret=gone["secret"], statuses=[410])
    fine_hook = receiver.hook("fine", secret=fine["secret"])
    aws = e2e.reporter("aws")
    aws.publish_now("vm", f"g1-{uid}", "RUNNING", "up", metadata={"tenant": uid}).result(timeout=30)
    wait_until(lambda: stats(e2e, gone["callback"]["id"])["disabled"], 30, what="the callback disabled")
    aws.publish_now("vm", f"g2-{uid}", "RUNNING", "up", metadata={"tenant": uid}).result(timeout=30)
    wait_until(lambda: len(fine_hook.got) == 2, 30, what="the other callback's second delivery")
    time.sleep(1)
    assert len(gone_hook.got) == 1 and "410" in stats(e2e, gone["callback"]["id"])["disabled"]


def test_a_receiver_that_hangs_does_not_delay_another(e2e, uid, receiver):
    hang = on_filter(e2e, receiver.url("hang"), {"label": f"tenant:{uid}"})
    fast = on_filter(e2e, receiver.url("fast"), {"label": f"tenant:{uid}"})
    hang_hook = receiver.hook("hang", secret=hang["secret"], hang=threading.Event())
    fast_hook = receiver.hook("fast", secret=fast["secret"])
    aws = e2e.reporter("aws")
    for n in range(4):
        aws.publish_now("vm", f"h{n}-{uid}", "RUNNING", "up", metadata={"tenant": uid}).result(timeout=30)
    wait_until(lambda: len(fast_hook.got) == 4, 30, what="the fast receiver's four deliveries")
    wait_until(lambda: hang_hook.got, 10, what="the hanging receiver's first call")
    first_hang = hang_hook.got[0].at
    # all four reached the fast receiver while the first call to the hanging one was still waiting
    assert max(r.at for r in fast_hook.got) < first_hang + HOOK_TIMEOUT
    assert all(r.verified for r in fast_hook.got)


def test_retries_can_reorder_deliveries_and_each_carries_what_orders_it(e2e, uid, receiver):
    key = f"aws/vm/ord-{uid}"
    registered = on_resource(e2e, key, receiver.url("ord"))
    hook = receiver.hook("ord", secret=registered["secret"], statuses=[503, 204])
    aws = e2e.reporter("aws")
    for n, status in enumerate(["RUNNING", "STOPPED", "RUNNING"]):
        aws.publish_now("vm", f"ord-{uid}", status, status.lower(), time=f"2030-01-01T00:00:0{n}Z").result(timeout=30)
        e2e.wait_for_status(key, status)
    wait_until(lambda: len([r for r in hook.got if r.status == 204]) == 3, 60, what="three deliveries")
    delivered = [r.body for r in hook.got if r.status == 204]
    ordered = sorted(delivered, key=lambda b: (b["committedAt"], b["cursor"]))
    assert [b["resource"]["status"] for b in ordered] == ["RUNNING", "STOPPED", "RUNNING"]
    assert [status_change(b) for b in ordered] == [(None, "RUNNING"), ("RUNNING", "STOPPED"), ("STOPPED", "RUNNING")]


def test_a_receiver_down_for_its_whole_retry_period_loses_nothing(e2e, uid, receiver):
    """Its deliveries end as callback_exhausted dead letters; GET /v1/changes from the last cursor it
    saw returns every change it missed; once it is back, a replay delivers them."""
    key = f"aws/vm/down-{uid}"
    registered = on_resource(e2e, key, receiver.url("up"), retrySeconds=4)
    up = receiver.hook("up", secret=registered["secret"])
    aws = e2e.reporter("aws")
    aws.publish_now("vm", f"down-{uid}", "RUNNING", "up").result(timeout=30)
    wait_until(lambda: up.got, 30, what="the first delivery")
    last_seen = up.bodies()[-1]["cursor"]
    moved = on_resource(e2e, key, receiver.url("down"), retrySeconds=4)  # same callback; a new hook, a new secret
    down: Hook = receiver.hook("down", secret=moved["secret"], statuses=[503])
    for n, status in enumerate(["STOPPED", "RUNNING"]):
        aws.publish_now("vm", f"down-{uid}", status, status.lower(), time=f"2031-01-01T00:00:0{n}Z").result(timeout=30)
        e2e.wait_for_status(key, status)
    dead = wait_until(lambda: (d := [e for e in e2e.deadletters(reason="callback_exhausted") if e.get("key") == key])
                      and len(d) == 2 and d, 60, what="two callback_exhausted dead letters")
    assert all(e["detail"]["lastStatus"] == 503 and e["detail"]["callback"] == registered["callback"]["id"]
               for e in dead)
    # the hook's path and query (often a credential) never reach a dead letter: scheme, host and port only
    assert all(e["detail"]["hook"] == redact_hook(receiver.url("down")) for e in dead)
    assert receiver.url("down") not in orjson.dumps(dead, default=str).decode()
    assert len(down.got) >= 4  # tried about once a second for its 4 s
    missed = {b["id"] for b in down.bodies()}
    caught_up = catch_up(e2e, last_seen, key)
    assert missed <= caught_up and len(caught_up) == 2
    assert stats(e2e, registered["callback"]["id"])["stats"]["exhausted"] == 2
    up.secret = on_resource(e2e, key, receiver.url("up"))["secret"]  # the receiver is back (a new hook: a new secret)
    e2e.cli("dlq", "replay", *[e["id"] for e in dead])
    wait_until(lambda: {b["id"] for b in up.bodies()} >= missed, 30, what="the replayed deliveries")


def catch_up(e2e: E2EStack, cursor: str, key: str) -> set[str]:
    """Every change of ``key`` in the feed after ``cursor`` (what a receiver reads to catch up)."""
    seen: set[str] = set()
    while True:
        page = api(e2e, "GET", "v1/changes", params={"after": cursor, "provider": "aws", "limit": 1000}).json()
        seen |= {c["id"] for c in page["changes"] if c["key"] == key}
        if not page["changes"]:
            return seen
        cursor = page["nextCursor"]


def test_an_operator_manages_a_callback_with_the_cli(e2e, uid, receiver):
    added = e2e.cli("callbacks", "add", "--hook", receiver.url("cli"), "--resource", f"aws/vm/cli-{uid}",
                    "--token", "T", "--json")
    created = orjson.loads(added.stdout)
    assert "loopback hooks are allowed" in added.stderr  # local mode says so
    hook = receiver.hook("cli", secret=created["secret"])
    cid = created["callback"]["id"]
    tested = e2e.cli("callbacks", "test", cid)
    assert tested.stdout.strip() == "delivered"
    assert hook.got[0].verified and hook.got[0].body["test"] is True and hook.got[0].body["token"] == "T"
    e2e.reporter("aws").publish_now("vm", f"cli-{uid}", "RUNNING", "up").result(timeout=30)
    wait_until(lambda: len(hook.got) == 2, 30, what="the change delivered")
    wait_until(lambda: "stats.delivered     1" in e2e.cli("callbacks", "show", cid).stdout, 10, what="the stats")
    # a key rotation: a new primary key, every secret sealed again with it; deliveries still verify
    rekeyed = orjson.loads(e2e.cli("callbacks", "rekey", "--rotate", "--json").stdout)
    assert rekeyed["resealed"] >= 1 and rekeyed["unavailable"] == []
    stored = e2e.db.collection("callbacks").document(cid).get().to_dict()
    assert [s["keyId"] for s in stored["secrets"]] == [rekeyed["primary"]]
    shown = e2e.cli("callbacks", "keyring").stdout
    assert shown.startswith(f"primary {rekeyed['primary']};") and "=" not in shown  # key ids, never a key
    proposed = orjson.loads(e2e.cli("callbacks", "keyring", "--add-primary").stdout)  # for gcloud; nothing written
    assert proposed["primary"] not in shown and rekeyed["primary"] in proposed["keys"]
    assert e2e.cli("callbacks", "keyring").stdout == shown
    e2e.reporter("aws").publish_now("vm", f"cli-{uid}", "STOPPED", "down", time="2099-01-01T00:00:00Z").result(timeout=30)
    wait_until(lambda: len(hook.got) == 3, 30, what="a change delivered after the rekey")
    assert all(r.verified for r in hook.got)
    # the api's test answers delivered or not and a category: never a status, error text, address or timing
    assert api(e2e, "POST", f"v1/callbacks/{cid}/test").json() == {"delivered": True, "outcome": "delivered"}
    assert hook.got[-1].verified and hook.got[-1].body["test"] is True  # signed with the rekeyed secret
    closed = on_filter(e2e, "http://127.0.0.1:9/cb", {"label": f"tenant:nobody-{uid}"})["callback"]["id"]
    assert api(e2e, "POST", f"v1/callbacks/{closed}/test").json() == {"delivered": False, "outcome": "unreachable"}
    api(e2e, "DELETE", f"v1/callbacks/{closed}")
    assert cid in e2e.cli("callbacks", "list").stdout
    rotated = orjson.loads(e2e.cli("callbacks", "rotate", cid, "--json").stdout)
    assert rotated["secret"] != created["secret"] and rotated["callback"]["previousSecretValidUntil"]
    e2e.cli("callbacks", "rm", cid)
    assert e2e.cli("callbacks", "show", cid, check=False).returncode == 1
