"""Security guards that already hold (issue 25, "Already holding"), through the functions on the
Firestore emulator (functions-framework's test client; Pub/Sub faked). Each fails if its guard is
removed. The threat model and which test proves which guard: docs/security.md.
"""

from __future__ import annotations

from urllib.parse import quote

import orjson
import pytest
from dcm_status_contracts.model import PubSubMessage
from standardwebhooks.webhooks import Webhook

from shared.api.callbacks import Callbacks
from shared.callbacks.egress import HookResponse
from shared.callbacks.store import CallbackStore
from shared.notify.deliver import DeliveryOutcome
from shared.notify.handler import Notify
from tests.fakes import runtime_of
from tests.functional.conftest import PROJECT, SHAPES, bind_all, client_for
from tests.functional.test_api import seed

HOOK = "http://127.0.0.1:9/hook"  # nothing listens: a failing receiver



def _has_cors(headers) -> list[str]:
    return [k for k in headers.keys() if k.lower().startswith("access-control-")]


# ---- no CORS -----------------------------------------------------------------------------------
EVIL = {"Origin": "https://evil.example"}
PREFLIGHT = {**EVIL, "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "content-type, authorization"}


@pytest.mark.parametrize("method, path, headers", [
    ("GET", "/", EVIL), ("GET", "/assets/app.js", EVIL), ("GET", "/v1/openapi.json", EVIL),
    ("GET", "/v1/resources", EVIL), ("GET", "/v1/resources/aws/vm/i-1", EVIL), ("GET", "/v1/summary", EVIL),
    ("GET", "/v1/changes", EVIL), ("GET", "/v1/callbacks", EVIL), ("GET", "/v1/deadletters", EVIL),
    ("GET", "/v1/nothing", EVIL), ("GET", "/v1/resources?pageSize=0", EVIL),
    ("OPTIONS", "/v1/resources", PREFLIGHT), ("OPTIONS", "/v1/callbacks", PREFLIGHT),
    ("OPTIONS", "/v1/callbacks/f0123456789abcdef/rotate", PREFLIGHT), ("OPTIONS", "/", PREFLIGHT),
    ("OPTIONS", "/v1/resources/aws/vm/i-1/callback", {**PREFLIGHT, "Access-Control-Request-Method": "PUT"}),
    ("POST", "/v1/callbacks", {**EVIL, "Content-Type": "text/plain"}),
])
def test_no_api_answer_carries_cors_headers(api, firestore, method, path, headers):
    """A page on another origin may send simple requests, but never read an answer or pass a preflight."""
    seed(firestore, "aws", "vm", "i-1", "RUNNING", "2026-03-01T10:00:00Z", "e1")
    response = api.client.open(path, method=method, headers=headers)
    assert not _has_cors(response.headers), (response.status_code, dict(response.headers))
    if method == "OPTIONS":
        assert response.status_code >= 400  # no preflight succeeds


def test_the_live_stream_carries_no_cors_headers(api):
    response = api.client.get("/v1/changes/stream", headers=EVIL)
    assert response.status_code == 200 and not _has_cors(response.headers)
    response.close()


# ---- query filters are values ----------------------------------------------------------------
INJECTED = "acme' OR '1'='1"


@pytest.fixture
def tricky_fleet(firestore):
    seed(firestore, "aws", "vm", "i-1", "RUNNING", "2026-03-01T10:00:00Z", "e1", tenant="acme")
    seed(firestore, "aws", "vm", "i-2", "STOPPED", "2026-03-01T10:00:01Z", "e2", tenant=INJECTED)
    seed(firestore, "azure", "vm", "w-1", "RUNNING", "2026-03-01T10:00:02Z", "e3", tenant="zeta")


def keys(api, query: str) -> list[str]:
    response = api.get("/v1/resources?" + query)
    assert response.status_code == 200, response.json
    return sorted(r["key"] for r in response.json["resources"])


@pytest.mark.parametrize("query, expected", [
    ("provider=" + quote('aws" OR provider != "'), []),
    ("provider=" + quote("aws' || '1'='1"), []),
    ("status=" + quote("RUNNING' OR '1'='1"), []),
    ("status=" + quote('RUNNING" || true || "'), []),
    ("type=" + quote("vm' OR type != '"), []),
    ("status=" + quote("!= null"), []),
    ("label=" + quote("tenant:" + INJECTED), ["aws/vm/i-2"]),  # the value with quotes is a value: it matches itself
    ("label=" + quote("tenant:acme"), ["aws/vm/i-1"]),
    ("q=" + quote("i-*"), []), ("q=" + quote(".*"), []), ("q=" + quote("%"), []), ("q=" + quote("' OR ''='"), []),
    ("q=i-", ["aws/vm/i-1", "aws/vm/i-2"]),
    ("provider=aws", ["aws/vm/i-1", "aws/vm/i-2"]),  # the control
])
def test_a_filter_value_with_quotes_or_operators_is_a_value_not_syntax(api, tricky_fleet, query, expected):
    assert keys(api, query) == expected


@pytest.mark.parametrize("label", ["metadata.tenant:acme", "tenant.x:acme", "__name__:aws~vm~i-1", "status:RUNNING",
                                   "tenant` OR 1:acme"])
def test_a_label_name_is_one_of_the_known_labels_never_a_field_path(api, tricky_fleet, label):
    response = api.get("/v1/resources?label=" + quote(label))
    assert response.status_code == 400 and response.json["parameter"] == "label"


def test_feed_and_dead_letter_filters_are_values(api, tricky_fleet):
    assert api.get("/v1/changes?status=RUNNING").json["changes"]  # the control
    for name in ("provider", "type", "status"):
        assert api.get(f"/v1/changes?{name}=" + quote("x' OR '1'='1")).json["changes"] == []
    assert api.get("/v1/deadletters?provider=" + quote("x' OR '1'='1")).json["total"] == 0


# ---- page sizes capped -----------------------------------------------------------------------
@pytest.mark.parametrize("path, parameter", [
    ("/v1/resources?pageSize=501", "pageSize"), ("/v1/resources?pageSize=100000", "pageSize"),
    ("/v1/resources/aws/vm/i-1/history?pageSize=501", "pageSize"),
    ("/v1/changes?limit=1001", "limit"), ("/v1/changes?last=501", "last"),
])
def test_a_page_larger_than_the_cap_is_refused(api, path, parameter):
    response = api.get(path)
    assert response.status_code == 400 and response.json["parameter"] == parameter


@pytest.mark.parametrize("path", ["/v1/resources?pageSize=500", "/v1/changes?limit=1000", "/v1/changes?last=500"])
def test_the_largest_page_is_accepted(api, path):
    assert api.get(path).status_code == 200


# ---- signing secrets: shown once, then nowhere -----------------------------------------------
class Receiver:
    """A fake ``post`` answering ``status``, recording what it was sent."""

    def __init__(self, status: int | None = 204):
        self.status = status
        self.calls: list[tuple[bytes, dict[str, str]]] = []

    def __call__(self, url, body, headers, timeout, local_mode, *args, **kwargs) -> HookResponse:
        self.calls.append((body, dict(headers)))
        ok = self.status is not None and 200 <= self.status < 300
        return HookResponse(self.status, None if ok else f"HTTP {self.status}", "127.0.0.1", 0.01)


def _changed(firestore, notify_settings) -> PubSubMessage:
    seed(firestore, "aws", "vm", "i-1", "PENDING", "2026-03-01T10:00:00Z", "e0", tenant="acme")
    result = seed(firestore, "aws", "vm", "i-1", "RUNNING", "2026-03-01T10:01:00Z", "e1", tenant="acme")
    return PubSubMessage(result.change.body, dict(result.change.attributes), "c-1", None,
                         notify_settings.topic_changed)


@pytest.fixture(scope="module")
def notify_client():
    return client_for("notify")


def test_no_signing_secret_in_any_answer_message_or_log(api, notify_client, firestore, publisher, logged):
    bind_all(runtime_of(publisher=publisher, firestore=firestore, DCM_PROJECT=PROJECT, DCM_FEED_SETTLE_SECONDS="0"))
    registry = Callbacks(firestore, local_mode=True)
    shown, first = registry.put_resource("aws/vm/i-1", HOOK, token="T")
    filtered, other = registry.add(HOOK, {"provider": "aws"})
    _, rotated = registry.rotate(shown["id"], 3600)
    secrets = [first, other, rotated]
    assert all(s.startswith("whsec_") for s in secrets)
    texts: list[str] = [orjson.dumps(shown).decode(), orjson.dumps(filtered).decode()]
    # notify: fan out, deliver (delivered, failed, given up), every message it publishes
    notify_settings = runtime_of(DCM_PROJECT=PROJECT).settings
    notify = Notify(CallbackStore(firestore), publisher, notify_settings, post=Receiver(204))
    notify.fan_out(_changed(firestore, notify_settings))
    deliveries = [PubSubMessage(m.data, m.attributes, f"d-{n}", None, notify_settings.topic_callbacks)
                  for n, m in enumerate(publisher.messages) if m.topic.endswith(notify_settings.topic_callbacks)]
    assert len(deliveries) == 2
    assert notify.first_lane(deliveries[0]) is DeliveryOutcome.DELIVERED
    failing = Notify(CallbackStore(firestore), publisher, notify_settings, post=Receiver(500))
    assert failing.first_lane(deliveries[1]) is DeliveryOutcome.HANDED_OFF
    old = orjson.loads(deliveries[1].data)
    old["firstAttemptAt"] = "2026-01-01T00:00:00.000000Z"  # its retry period is over: dead-lettered
    assert SHAPES["push"](notify_client, notify_settings.topic_callbacks_retry, orjson.dumps(old),
                          dict(deliveries[1].attributes), "d-old").status_code == 200
    assert publisher.on("dcm-status-deadletter"), "the exhausted delivery was dead-lettered"
    # the api's answers (the callbacks' stats now hold the failures)
    for path in ("/v1/callbacks", f"/v1/callbacks/{shown['id']}", f"/v1/callbacks/{filtered['id']}",
                 "/v1/resources/aws/vm/i-1/callback", "/v1/callbacks?scope=resource", "/v1/deadletters",
                 "/v1/changes", "/v1/resources/aws/vm/i-1"):
        texts.append(api.get(path).get_data(as_text=True))
    texts.append(orjson.dumps(registry.test(shown["id"])).decode())  # a failed test delivery's answer
    for m in publisher.messages:
        texts.append(m.data.decode(errors="replace") + orjson.dumps(m.attributes).decode())
    texts.append(logged.text())
    assert "callback delivered" in logged.text()  # the capture works
    everything = "\n".join(texts)
    assert "whsec_" not in everything
    for secret in secrets:
        assert secret[len("whsec_"):] not in everything


def test_a_rotated_callbacks_deliveries_verify_with_the_old_and_the_new_secret(firestore, publisher):
    registry = Callbacks(firestore, local_mode=True)
    shown, old = registry.put_resource("aws/vm/i-1", HOOK)
    _, new = registry.rotate(shown["id"], 3600)
    notify_settings = runtime_of(DCM_PROJECT=PROJECT).settings
    receiver = Receiver(204)
    notify = Notify(CallbackStore(firestore), publisher, notify_settings, post=receiver)
    notify.fan_out(_changed(firestore, notify_settings))
    [published] = publisher.messages
    message = PubSubMessage(published.data, published.attributes, "d-1", None, notify_settings.topic_callbacks)
    assert notify.first_lane(message) is DeliveryOutcome.DELIVERED
    [(body, headers)] = receiver.calls
    assert Webhook(old).verify(body, headers)["key"] == "aws/vm/i-1"
    assert Webhook(new).verify(body, headers)["key"] == "aws/vm/i-1"
