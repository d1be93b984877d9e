"""Registering webhook callbacks through the api (every answer checked against the OpenAPI
document), and the rules a hook must pass: refused at registration with the reason."""

from __future__ import annotations

import http.server
import threading

import pytest
from dcm_status_contracts import timeutil
from dcm_status_contracts.errors import InvalidRequest, NotFound
from standardwebhooks.webhooks import Webhook

from shared.api.callbacks import Callbacks
from shared.runtime import secretbox
from shared.runtime.secretbox import Keyring

HOOK = "http://127.0.0.1:9/hook"
WRITE = {"DCM-Request": "1"}  # what every request that changes something carries (not a cross-site form)


def write(api, method: str, path: str, **kwargs):
    return api.open(method, path, headers={**WRITE, **kwargs.pop("headers", {})}, **kwargs)


def test_a_filter_callback_is_created_with_its_secret_shown_once_then_listed_shown_and_removed(api):
    created = write(api, "POST", "/v1/callbacks", json={"hook": HOOK, "token": "T42",
                                                       "filter": {"provider": "aws", "label": "tenant:acme"}})
    assert created.status_code == 201 and created.json["secret"].startswith("whsec_")
    cid = created.json["callback"]["id"]
    assert created.headers["Location"] == f"/v1/callbacks/{cid}"
    shown = api.get(f"/v1/callbacks/{cid}").json["callback"]
    assert shown["filter"] == {"provider": "aws", "label": "tenant:acme"} and shown["token"] == "T42"
    assert created.json["secret"] not in str(api.get("/v1/callbacks").json)
    assert [c["id"] for c in api.get("/v1/callbacks?scope=filter").json["callbacks"]] == [cid]
    assert api.get("/v1/callbacks?scope=resource").json["callbacks"] == []
    assert write(api, "DELETE", f"/v1/callbacks/{cid}").status_code == 204
    assert api.get(f"/v1/callbacks/{cid}").status_code == 404
    assert write(api, "DELETE", f"/v1/callbacks/{cid}").status_code == 404


def test_a_resource_has_one_callback_set_by_put_and_deleted_with_hook_none(api):
    path = "/v1/resources/aws/vm/i-1/callback"
    assert api.get(path).status_code == 404
    first = write(api, "PUT", f"{path}?hook={HOOK}&token=a")
    assert first.status_code == 201 and first.json["secret"]
    again = write(api, "PUT", f"{path}?hook=http://127.0.0.1:8/other&retrySeconds=60")
    # overwritten: same id; a new hook gets a new secret (the old receiver's must not sign for the new one)
    assert again.status_code == 200 and again.json["secret"] not in (None, first.json["secret"])
    same = write(api, "PUT", f"{path}?hook=http://127.0.0.1:8/other&retrySeconds=60")
    assert same.status_code == 200 and "secret" not in same.json  # the same hook keeps its secret
    assert again.json["callback"]["id"] == first.json["callback"]["id"]
    assert again.json["callback"]["hook"] == "http://127.0.0.1:8/other" and again.json["callback"]["retrySeconds"] == 60
    assert api.get(path).json["callback"]["key"] == "aws/vm/i-1"
    assert write(api, "PUT", f"{path}?hook=none").status_code == 204
    assert write(api, "PUT", f"{path}?hook=none").status_code == 404


@pytest.mark.parametrize("hook, why", [
    ("http://169.254.169.254/latest/meta-data", "link-local"), ("http://10.0.0.1/cb", "not a public address"),
    ("http://metadata.google.internal/cb", "metadata server"), ("ftp://127.0.0.1/cb", "scheme"),
    ("http://no-such-host.invalid/cb", "does not resolve"), ("http://u:p@127.0.0.1/cb", "credentials"),
])
def test_a_hook_that_may_not_be_called_is_refused_at_registration_with_the_reason(api, hook, why):
    for response in (write(api, "POST", "/v1/callbacks", json={"hook": hook}),
                     write(api, "PUT", "/v1/resources/aws/vm/i-1/callback", query_string={"hook": hook})):
        assert response.status_code == 400 and response.json["parameter"] == "hook"
        assert why in response.json["detail"]
    assert api.get("/v1/callbacks").json["callbacks"] == []


# the IPv6 forms carrying a blocked IPv4 address, site-local, a port not allowed; then the older guards
BLOCKED_HOOKS = ["http://[::a9fe:a9fe]/cb", "http://[::127.0.0.1]/cb", "http://[64:ff9b::a9fe:a9fe]/cb",
                 "http://[2002:a9fe:a9fe::]/cb", "http://[fec0::1]/cb", "http://93.184.216.34:6379/"]
OLDER_BLOCKED_HOOKS = ["http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/cb",
                       "http://metadata.google.internal/cb"]


def test_a_blocked_address_is_refused_at_registration(pipeline):
    """Each hook is refused by both registration routes (400 naming the parameter) and, for the forms the
    security review found, by the CLI (one line, exit 1), both with the local stack's rules (loopback hooks
    allowed). Every form of the guard: tests/unit/test_egress.py. (Moved from tests/e2e: issue 41.)"""
    for hook in BLOCKED_HOOKS + OLDER_BLOCKED_HOOKS:
        for response in (write(pipeline.api, "POST", "/v1/callbacks", json={"hook": hook}),
                         write(pipeline.api, "PUT", "/v1/resources/aws/vm/b-1/callback", query_string={"hook": hook})):
            assert response.status_code == 400 and response.json["parameter"] == "hook", (hook, response.text)
    for hook in BLOCKED_HOOKS:
        result = pipeline.cli("callbacks", "add", "--hook", hook, local=True)
        assert result.exit_code == 1 and "hook" in result.stderr and "Traceback" not in result.stderr, hook
    missing = pipeline.cli("callbacks", "show", "nope1", local=True)
    assert missing.exit_code == 1 and "no callback 'nope1'" in missing.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("request_kwargs, parameter", [
    ({"data": "hook=x", "content_type": "application/x-www-form-urlencoded"}, "body"),
    ({"data": "{not json", "content_type": "application/json"}, "body"),
    ({"json": ["a"]}, "body"),
    ({"json": {"hook": HOOK, "colour": "red"}}, "colour"),
    ({"json": {}}, "hook"),
    ({"json": {"hook": HOOK, "filter": {"label": "owner:me"}}}, "filter.label"),
    ({"json": {"hook": HOOK, "retrySeconds": 0}}, "retrySeconds"),
    ({"json": {"hook": HOOK, "token": "x" * 300}}, "token"),
])
def test_a_registration_that_cannot_be_read_is_a_problem_naming_what(api, request_kwargs, parameter):
    response = write(api, "POST", "/v1/callbacks", **request_kwargs)
    assert response.status_code == 400 and response.json["parameter"] == parameter


def test_a_rotation_returns_a_new_secret_and_says_until_when_the_old_one_signs(api):
    created = write(api, "POST", "/v1/callbacks", json={"hook": HOOK}).json
    cid = created["callback"]["id"]
    rotated = write(api, "POST", f"/v1/callbacks/{cid}/rotate?graceSeconds=3600")
    assert rotated.status_code == 200 and rotated.json["secret"] != created["secret"]
    assert rotated.json["callback"]["previousSecretValidUntil"] > timeutil.now_str()
    assert write(api, "POST", "/v1/callbacks/nope/rotate").status_code == 404
    assert write(api, "POST", f"/v1/callbacks/{cid}/rotate?graceSeconds=-1").status_code == 400


class _Receiver(http.server.BaseHTTPRequestHandler):
    got: list[tuple[dict, bytes]] = []

    def do_POST(self):  # noqa: N802 - the library's name
        body = self.rfile.read(int(self.headers["content-length"]))
        _Receiver.got.append((dict(self.headers), body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_test_delivery_is_signed_and_its_outcome_answered(api):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        created = write(api, "POST", "/v1/callbacks", json={
            "hook": f"http://127.0.0.1:{server.server_address[1]}/cb", "token": "T"}).json
        answer = write(api, "POST", f"/v1/callbacks/{created['callback']['id']}/test").json
        assert answer == {"delivered": True, "outcome": "delivered"}  # no status, address, error text or timing
        [(headers, body)] = _Receiver.got
        sent = Webhook(created["secret"]).verify(body, {k.lower(): v for k, v in headers.items()})
        assert sent["test"] is True and sent["token"] == "T" and sent["changes"] == []
        down = write(api, "POST", "/v1/callbacks", json={"hook": HOOK}).json["callback"]["id"]
        failed = write(api, "POST", f"/v1/callbacks/{down}/test").json
        assert failed == {"delivered": False, "outcome": "unreachable"}
    finally:
        server.shutdown()


def test_enable_calls_a_disabled_callback_again(api, firestore):
    cid = write(api, "POST", "/v1/callbacks", json={"hook": HOOK}).json["callback"]["id"]
    firestore.collection("callbacks").document(cid).update({"disabled": "410 Gone", "stats.consecutiveFailures": 4})
    assert api.get(f"/v1/callbacks/{cid}").json["callback"]["disabled"] == "410 Gone"
    enabled = write(api, "POST", f"/v1/callbacks/{cid}/enable").json["callback"]
    assert enabled["disabled"] is None and enabled["stats"]["consecutiveFailures"] == 0


def test_in_production_only_https_hooks_resolving_to_public_addresses_are_accepted(firestore):
    def resolving_to(*addresses):
        return Callbacks(firestore, local_mode=False, resolver=lambda host, port: list(addresses),
                         keys=secretbox.KeySource(Keyring.generate().to_json, "a test's keyring"))
    with pytest.raises(InvalidRequest, match="scheme must be https"):
        resolving_to("93.184.216.34").add("http://hooks.example.com/cb")
    with pytest.raises(InvalidRequest, match="resolves to 127.0.0.1: 127.0.0.1 is a loopback"):
        resolving_to("127.0.0.1").add("https://localtest.me/cb")
    with pytest.raises(InvalidRequest, match="fd00::1"):
        resolving_to("93.184.216.34", "fd00::1").put_resource("aws/vm/i-1", "https://split.example.com/cb")
    shown, secret = resolving_to("93.184.216.34").add("https://hooks.example.com/cb")
    assert secret and shown["hook"] == "https://hooks.example.com/cb"
    with pytest.raises(NotFound):
        resolving_to().show("a/b")
