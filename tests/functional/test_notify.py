"""notify: fan a change out to the callbacks that ask for it, deliver each signed, hand a failing
or busy receiver to the retry lane, retry there, disable on 410, give up as callback_exhausted.

On the Firestore emulator; Pub/Sub is faked (what notify would publish is checked) and so is the
HTTP call (``post``), but for the rebinding test, which calls a real receiver on loopback.
"""

from __future__ import annotations

import functools
import http.server
import threading
from datetime import timedelta
from typing import Any

import orjson
import pytest
from dcm_status_contracts import delivery, timeutil
from dcm_status_contracts import deadletter as dl
from dcm_status_contracts.errors import Reason, Rejected, Transient
from dcm_status_contracts.model import PubSubMessage
from standardwebhooks.webhooks import Webhook

from shared.api.callbacks import Callbacks
from shared.callbacks import egress, registration
from shared.callbacks.egress import HookResponse
from shared.callbacks.store import CallbackStore
from shared.notify.deliver import DeliveryOutcome
from shared.notify.handler import Notify
from shared.runtime import secretbox
from shared.runtime.secretbox import Keyring, KeySource
from shared.state.documents import CALLBACKS, DELIVERIES
from tests.fakes import runtime_of
from tests.functional.conftest import PROJECT, bind_all, client_for, post_push
from tests.functional.test_api import seed

HOOK = "http://127.0.0.1:9/hook"
# The keyring the functions use in local mode without a setting: this process's own (shared/runtime/secretbox.py)
KEYS = secretbox.source(None, None, local_mode=True)


class Receiver:
    """A fake ``post``: answers what it is told, in turn, and records every call."""

    def __init__(self, *statuses: int | None):
        self.statuses = list(statuses) or [204]
        self.calls: list[dict[str, Any]] = []

    def __call__(self, url, body, headers, timeout, local_mode, resolver=None, ports=()) -> HookResponse:
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        self.calls.append({"url": url, "body": orjson.loads(body), "raw": body, "headers": dict(headers),
                           "ports": tuple(ports)})
        return HookResponse(status, None if status and 200 <= status < 300 else f"HTTP {status}", "127.0.0.1", 0.01)


@pytest.fixture(scope="module")
def client():
    return client_for("notify")


@pytest.fixture
def settings():
    return runtime_of(DCM_PROJECT=PROJECT).settings


@pytest.fixture
def registry(firestore):
    return Callbacks(firestore, local_mode=True, keys=KEYS)


def notify_with(firestore, publisher, settings, receiver, clock=timeutil.now, keys: KeySource = KEYS) -> Notify:
    return Notify(CallbackStore(firestore), publisher, settings, post=receiver, clock=clock, keys=keys)


def change_message(settings, result) -> PubSubMessage:
    return PubSubMessage(result.change.body, dict(result.change.attributes), "c-1", None, settings.topic_changed)


def as_message(published, message_id: str = "d-1", topic: str | None = None) -> PubSubMessage:
    return PubSubMessage(published.data, published.attributes, message_id, None,
                         topic or published.topic.rsplit("/", 1)[-1])


@pytest.fixture
def changed(firestore, settings):
    """A resource that went PENDING -> RUNNING: the change event upsert announced."""
    seed(firestore, "aws", "vm", "i-1", "PENDING", "2026-03-01T10:00:00Z", "e0", tenant="acme")
    return change_message(settings, seed(firestore, "aws", "vm", "i-1", "RUNNING", "2026-03-01T10:01:00Z", "e1",
                                         tenant="acme"))


def fan_out(firestore, publisher, settings, changed) -> list[PubSubMessage]:
    notify_with(firestore, publisher, settings, Receiver()).fan_out(changed)
    out = [as_message(p, f"d-{n}") for n, p in enumerate(publisher.messages)]
    publisher.messages.clear()
    return out


def one_delivery(firestore, publisher, settings, registry, changed, *statuses: int, **registration: Any):
    """aws/vm/i-1's callback (registered here), the one delivery its change makes, a receiver answering
    ``statuses`` in turn, and notify calling it: (callback as shown, its secret, message, receiver, notify)."""
    shown, secret = registry.put_resource("aws/vm/i-1", HOOK, **registration)
    [message] = fan_out(firestore, publisher, settings, changed)
    receiver = Receiver(*statuses)
    return shown, secret, message, receiver, notify_with(firestore, publisher, settings, receiver)


def test_a_change_is_fanned_out_to_each_callback_that_asks_for_it(firestore, publisher, settings, registry, changed):
    mine, _ = registry.put_resource("aws/vm/i-1", HOOK, token="T42")
    acme, _ = registry.add(HOOK, {"label": "tenant:acme", "status": "RUNNING"})
    registry.add(HOOK, {"provider": "azure"})
    off, _ = registry.add(HOOK, {})
    CallbackStore(firestore).disable(off["id"], "test")
    sent = fan_out(firestore, publisher, settings, changed)
    assert sorted(m.attributes["callbackId"] for m in sent) == sorted([mine["id"], acme["id"]])
    d = delivery.from_message(sent[0])
    assert d.change["key"] == "aws/vm/i-1" and d.change["cursor"] and d.change["committedAt"]
    assert {"attribute": "/status", "old": "PROVISIONING", "new": "RUNNING"} in d.change["changes"]
    assert all(m.topic == settings.topic_callbacks for m in sent)


def test_a_late_change_is_not_sent(firestore, publisher, settings, registry):
    registry.add(HOOK, {})
    seed(firestore, "aws", "vm", "i-9", "RUNNING", "2026-03-01T10:01:00Z", "n1")
    late = seed(firestore, "aws", "vm", "i-9", "PENDING", "2026-03-01T10:00:00Z", "n0")
    assert late.change is not None  # announced, marked late
    assert fan_out(firestore, publisher, settings, change_message(settings, late)) == []


def test_a_delivery_is_signed_sent_once_and_counted(firestore, publisher, settings, registry, changed):
    shown, secret, message, receiver, notify = one_delivery(firestore, publisher, settings, registry, changed, 204,
                                                            token="T42")
    assert notify.first_lane(message) is DeliveryOutcome.DELIVERED
    [call] = receiver.calls
    assert Webhook(secret).verify(call["raw"], call["headers"])["token"] == "T42"
    assert call["headers"]["webhook-id"] == message.attributes["deliveryId"]
    assert call["body"]["changes"] and call["body"]["cursor"]
    stats = registry.show(shown["id"])["stats"]
    assert stats["delivered"] == 1 and stats["consecutiveFailures"] == 0 and stats["lastStatus"] == 204
    assert firestore.collection(DELIVERIES).document(message.attributes["deliveryId"]).get().exists
    assert notify.retry_lane(message) is DeliveryOutcome.ALREADY_DELIVERED and len(receiver.calls) == 1


def test_a_failing_receiver_is_handed_to_the_retry_lane_and_skipped_while_it_fails(
        firestore, publisher, settings, registry, changed):
    shown, _, message, receiver, notify = one_delivery(firestore, publisher, settings, registry, changed,
                                                       500)
    assert notify.first_lane(message) is DeliveryOutcome.HANDED_OFF
    [handed] = publisher.messages
    assert handed.topic.endswith(settings.topic_callbacks_retry) and handed.data == message.data
    assert registry.show(shown["id"])["stats"]["consecutiveFailures"] == 1
    assert notify.first_lane(message) is DeliveryOutcome.HANDED_OFF and len(receiver.calls) == 1  # no call
    with pytest.raises(Transient, match="HTTP 500"):
        notify.retry_lane(message)  # Pub/Sub's back-off brings it again
    receiver.statuses = [204]
    assert notify.retry_lane(message) is DeliveryOutcome.DELIVERED
    stats = registry.show(shown["id"])["stats"]
    assert stats["consecutiveFailures"] == 0 and stats["failedAttempts"] == 2 and stats["delivered"] == 1


def test_a_receiver_not_known_to_be_fast_is_called_once_at_a_time_in_either_lane(
        firestore, publisher, settings, registry, changed):
    shown, _, message, receiver, notify = one_delivery(firestore, publisher, settings, registry, changed,
                                                       204)
    assert notify.calls.admit(shown["id"])  # a call under way (a receiver that hangs)
    assert notify.first_lane(message) is DeliveryOutcome.HANDED_OFF and receiver.calls == []
    with pytest.raises(Transient, match="under way"):  # nor in the retry lane: raised back, no call
        notify.retry_lane(message)
    assert receiver.calls == []
    notify.calls.done(shown["id"], None)
    assert notify.first_lane(message) is DeliveryOutcome.DELIVERED  # fast: now it may be called 8 at once
    assert all(notify.calls.admit(shown["id"]) for _ in range(8)) and not notify.calls.admit(shown["id"])


def test_410_disables_the_callback_and_its_later_deliveries_are_dropped(firestore, publisher, settings, registry,
                                                                      changed):
    shown, _, message, receiver, notify = one_delivery(firestore, publisher, settings, registry, changed,
                                                       410)
    assert notify.first_lane(message) is DeliveryOutcome.DISABLED
    assert "410" in registry.show(shown["id"])["disabled"]
    assert notify.retry_lane(message) is DeliveryOutcome.DROPPED and len(receiver.calls) == 1
    registry.enable(shown["id"])
    receiver.statuses = [204]
    assert notify.retry_lane(message) is DeliveryOutcome.DELIVERED


def test_a_removed_callbacks_deliveries_are_dropped(firestore, publisher, settings, registry, changed):
    shown, _ = registry.put_resource("aws/vm/i-1", HOOK)
    [message] = fan_out(firestore, publisher, settings, changed)
    registry.remove(shown["id"])
    receiver = Receiver(204)
    assert notify_with(firestore, publisher, settings, receiver).first_lane(message) is DeliveryOutcome.DROPPED
    assert receiver.calls == []


def test_a_failure_after_the_retry_period_is_callback_exhausted_and_a_replay_starts_it_again(
        firestore, publisher, settings, registry, changed):
    shown, _ = registry.put_resource("aws/vm/i-1", HOOK, retry_seconds=60)
    [message] = fan_out(firestore, publisher, settings, changed)
    later = lambda: timeutil.now() + timedelta(seconds=61)  # noqa: E731
    notify = notify_with(firestore, publisher, settings, Receiver(503), clock=later)
    with pytest.raises(Rejected) as err:
        notify.retry_lane(message)
    assert err.value.reason is Reason.CALLBACK_EXHAUSTED and err.value.key == "aws/vm/i-1"
    assert err.value.detail["lastStatus"] == 503 and err.value.detail["callback"] == shown["id"]
    assert registry.show(shown["id"])["stats"]["exhausted"] == 1
    replayed = PubSubMessage(message.data, {**message.attributes, dl.REPLAYED_AT: timeutil.format(later())},
                             "d-2", None, settings.topic_callbacks_retry)
    with pytest.raises(Transient):  # a new period from the replay: retried, not given up
        notify.retry_lane(replayed)


def test_through_the_entry_point_a_retry_is_a_500_and_exhausted_is_dead_lettered_with_why(
        client, firestore, publisher, settings, registry, changed):
    registry.put_resource("aws/vm/i-1", HOOK, retry_seconds=60)  # port 9 on loopback: connection refused
    [message] = fan_out(firestore, publisher, settings, changed)
    retry_topic = settings.topic_callbacks_retry
    assert post_push(client, retry_topic, message.data, dict(message.attributes)).status_code == 500
    d = delivery.from_message(message)
    old = delivery.Delivery(d.callback_id, d.change, timeutil.format(timeutil.now() - timedelta(seconds=61)))
    data, attributes = old.to_message()
    assert post_push(client, retry_topic, data, attributes).status_code == 200
    [dead] = [m for m in publisher.messages if m.topic.endswith(settings.topic_deadletter)]
    assert dead.attributes[dl.REASON] == "callback_exhausted" and dead.data == data
    assert dead.attributes[dl.SOURCE_TOPIC] == retry_topic and dead.attributes[dl.PROVIDER] == "aws"
    assert "Connection" in orjson.loads(dead.attributes[dl.DETAIL])["lastError"]


def test_a_broken_delivery_message_is_rejected_as_malformed_internal(firestore, publisher, settings):
    notify = notify_with(firestore, publisher, settings, Receiver())
    for data in (b"not json", b'{"version": "2.0"}', orjson.dumps({"version": "1.0", "callbackId": "x",
                                                                  "change": {"id": "c"}})):
        with pytest.raises(Rejected) as err:
            notify(PubSubMessage(data, {}, "m", None, settings.topic_callbacks))
        assert err.value.reason is Reason.MALFORMED_INTERNAL
    with pytest.raises(Rejected, match="reads no topic"):
        notify(PubSubMessage(b"{}", {}, "m", None, "dcm-status-normalized-aws"))


class _Recorder(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_POST(self):  # noqa: N802 - the library's name
        _Recorder.hits.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_in_production_a_hook_that_now_resolves_to_loopback_is_never_called(firestore, publisher, settings,
                                                                             changed):
    """DNS rebinding: registered while the name resolved to a public address, then it points at us."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        public = Callbacks(firestore, local_mode=False, resolver=lambda host, p: ["93.184.216.34"], keys=KEYS,
                           hook_ports=(port,))
        shown, _ = public.put_resource("aws/vm/i-1", f"https://hooks.example.com:{port}/cb")
        [message] = fan_out(firestore, publisher, settings, changed)
        rebound = functools.partial(egress.post, resolver=lambda host, p: ["127.0.0.1"])
        production = runtime_of(DCM_PROJECT=PROJECT, DCM_LOCAL_MODE="0").settings
        notify = Notify(CallbackStore(firestore), publisher, production, post=rebound, keys=KEYS)
        assert notify.first_lane(message) is DeliveryOutcome.HANDED_OFF
        assert _Recorder.hits == []
        assert "loopback" in public.show(shown["id"])["stats"]["lastError"]
    finally:
        server.shutdown()


# ---- issue 25 item 9: signing secrets sealed at rest ------------------------------------------------
def stored(firestore, callback_id: str) -> dict[str, Any]:
    return firestore.collection(CALLBACKS).document(callback_id).get().to_dict()


def test_the_stored_callback_holds_no_clear_secret_and_deliveries_still_verify(
        firestore, publisher, settings, registry, changed):
    shown, secret, message, receiver, notify = one_delivery(firestore, publisher, settings, registry, changed, 204)
    doc = stored(firestore, shown["id"])
    assert registration.SECRET_PREFIX not in orjson.dumps(doc).decode() and secret[6:] not in orjson.dumps(doc).decode()
    assert [sorted(s) for s in doc["secrets"]] == [["box", "expiresAt", "keyId"]]
    _, rotated = registry.rotate(shown["id"], 3600)  # the new and the previous secret: both sealed
    doc = stored(firestore, shown["id"])
    assert len(doc["secrets"]) == 2 and registration.SECRET_PREFIX not in orjson.dumps(doc).decode()
    assert notify.first_lane(message) is DeliveryOutcome.DELIVERED
    [call] = receiver.calls
    for either in (secret, rotated):  # a Standard Webhooks receiver holding either verifies
        Webhook(either).verify(call["raw"], call["headers"])


def legacy_callback(firestore, secret: str) -> str:
    """A filter callback as stored before encryption: its secret in clear."""
    firestore.collection(CALLBACKS).document("flegacy").set({
        "hook": HOOK, "scope": "filter", "createdAt": "2026-01-01T00:00:00Z", "token": None, "key": None,
        "filter": {}, "retrySeconds": 60, "disabled": None, "secrets": [{"value": secret, "expiresAt": None}]})
    return "flegacy"


def test_a_key_rotation_reseals_every_secret_then_the_old_key_is_dropped(firestore, publisher, settings, changed):
    """Add a key and make it primary, rekey, drop the old key: every delivery still verifies, and a
    secret stored in clear before encryption is read, then sealed by the rekey."""
    old = Keyring.generate("k1")
    registry = Callbacks(firestore, local_mode=True, keys=KeySource(old.to_json, "k1 only"))
    shown, secret = registry.put_resource("aws/vm/i-1", HOOK)
    legacy_secret = registration.new_secret()
    legacy = legacy_callback(firestore, legacy_secret)
    messages = fan_out(firestore, publisher, settings, changed)
    assert len(messages) == 2
    both = old.with_new_primary("k2")
    done = CallbackStore(firestore).rekey(both, timeutil.now())
    assert (done.primary, done.callbacks, done.resealed, done.unavailable) == ("k2", 2, 2, ())
    for cid in (shown["id"], legacy):
        doc = stored(firestore, cid)
        assert [s["keyId"] for s in doc["secrets"]] == ["k2"] and registration.SECRET_PREFIX not in orjson.dumps(doc).decode()
    new_only = both.without("k1")
    receiver = Receiver(204)
    notify = notify_with(firestore, publisher, settings, receiver, keys=KeySource(new_only.to_json, "k2 only"))
    assert [notify.first_lane(m) for m in messages] == [DeliveryOutcome.DELIVERED] * 2
    secrets_of = {shown["id"]: secret, legacy: legacy_secret}
    for m, call in zip(messages, receiver.calls):
        Webhook(secrets_of[m.attributes["callbackId"]]).verify(call["raw"], call["headers"])
    assert CallbackStore(firestore).rekey(new_only, timeutil.now()).resealed == 0  # nothing left to do


def test_a_clear_secret_from_before_encryption_still_signs(firestore, publisher, settings, changed):
    legacy_secret = registration.new_secret()
    legacy_callback(firestore, legacy_secret)
    [message] = fan_out(firestore, publisher, settings, changed)
    receiver = Receiver(204)
    delivered = notify_with(firestore, publisher, settings, receiver).first_lane(message)
    assert delivered is DeliveryOutcome.DELIVERED
    Webhook(legacy_secret).verify(receiver.calls[0]["raw"], receiver.calls[0]["headers"])


def test_a_secret_sealed_with_a_dropped_key_is_dead_lettered_never_sent_nor_retried(
        client, firestore, publisher, settings, changed, tmp_path):
    old = Keyring.generate("k1")
    registry = Callbacks(firestore, local_mode=True, keys=KeySource(old.to_json, "k1 only"))
    shown, _ = registry.put_resource("aws/vm/i-1", HOOK)
    [message] = fan_out(firestore, publisher, settings, changed)
    dropped = Keyring.generate("k2")  # k1 dropped before this callback was rekeyed
    receiver = Receiver(204)
    notify = notify_with(firestore, publisher, settings, receiver, keys=KeySource(dropped.to_json, "k2 only"))
    with pytest.raises(Rejected) as err:
        notify.retry_lane(message)
    assert err.value.reason is Reason.CALLBACK_SECRET_UNAVAILABLE and "no longer holds" in err.value.message
    assert receiver.calls == [] and "no longer holds" in registry.show(shown["id"])["stats"]["lastError"]
    # through the entry point: acked and dead-lettered (replayable), not a 500 that Pub/Sub retries for days
    path = tmp_path / "callback-keys.json"
    secretbox.write_file(path, dropped)
    bind_all(runtime_of(publisher=publisher, firestore=firestore, DCM_PROJECT=PROJECT, DCM_CALLBACK_KEYS_FILE=str(path)))
    assert post_push(client, settings.topic_callbacks_retry, message.data, dict(message.attributes)).status_code == 200
    [dead] = [m for m in publisher.messages if m.topic.endswith(settings.topic_deadletter)]
    assert dead.attributes[dl.REASON] == "callback_secret_unavailable" and dead.data == message.data


# ---- issue 25 item 10, notify's half: the hook's path and query and the token never leave the callback --
def test_a_dead_letter_of_exhausted_deliveries_never_holds_the_hooks_path_query_or_token(
        client, firestore, publisher, settings, registry, changed, capsys):
    hook = "http://127.0.0.1:9/hooks/SECRET-PATH?key=SECRET-QUERY"
    shown, _ = registry.put_resource("aws/vm/i-1", hook, token="SECRET-TOKEN", retry_seconds=60)
    [message] = fan_out(firestore, publisher, settings, changed)
    d = delivery.from_message(message)
    old = delivery.Delivery(d.callback_id, d.change, timeutil.format(timeutil.now() - timedelta(seconds=61)))
    data, attributes = old.to_message()
    capsys.readouterr()
    assert post_push(client, settings.topic_callbacks_retry, data, attributes).status_code == 200
    [dead] = [m for m in publisher.messages if m.topic.endswith(settings.topic_deadletter)]
    assert dead.attributes[dl.REASON] == "callback_exhausted"
    detail = orjson.loads(dead.attributes[dl.DETAIL])
    assert detail["hook"] == "http://127.0.0.1:9/\u2026" and detail["callback"] == shown["id"]
    logs = capsys.readouterr()
    for text in (orjson.dumps(dead.attributes).decode(), dead.data.decode(), logs.out, logs.err):
        assert "SECRET" not in text
    assert "SECRET" not in str(registry.show(shown["id"])["stats"])


def test_notify_calls_a_hook_on_the_ports_its_settings_allow(firestore, publisher, registry, changed):
    settings = runtime_of(DCM_PROJECT=PROJECT, DCM_HOOK_PORTS="8443").settings
    _, _, message, receiver, notify = one_delivery(firestore, publisher, settings, registry, changed, 204)
    assert notify.first_lane(message) is DeliveryOutcome.DELIVERED and receiver.calls[0]["ports"] == (8443,)


@pytest.mark.parametrize("address", ["::a9fe:a9fe", "::127.0.0.1", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::",
                                     "fec0::1"])
def test_in_production_a_hook_now_resolving_to_an_ipv6_form_of_a_blocked_address_is_never_called(
        firestore, publisher, changed, address):
    public = Callbacks(firestore, local_mode=False, resolver=lambda host, p: ["93.184.216.34"], keys=KEYS)
    shown, _ = public.put_resource("aws/vm/i-1", "https://hooks.example.com/cb")
    settings = runtime_of(DCM_PROJECT=PROJECT).settings
    [message] = fan_out(firestore, publisher, settings, changed)
    rebound = functools.partial(egress.post, resolver=lambda host, p: [address])
    production = runtime_of(DCM_PROJECT=PROJECT, DCM_LOCAL_MODE="0").settings
    notify = Notify(CallbackStore(firestore), publisher, production, post=rebound, keys=KEYS)
    assert notify.first_lane(message) is DeliveryOutcome.HANDED_OFF
    assert f"resolves to {address}" in public.show(shown["id"])["stats"]["lastError"]


@pytest.fixture(scope="module")
def api_client():
    return client_for("api", signature_type="http")


def test_the_api_registers_a_hook_on_a_port_only_when_its_settings_allow_it(api_client, firestore):
    hook, headers = {"hook": "http://93.184.216.34:6379/cb"}, {"DCM-Request": "1"}
    refused = api_client.post("/v1/callbacks", json=hook, headers=headers)
    assert refused.status_code == 400 and "port 6379 is not allowed" in refused.json["detail"]
    bind_all(runtime_of(firestore=firestore, DCM_PROJECT=PROJECT, DCM_HOOK_PORTS="6379"))
    assert api_client.post("/v1/callbacks", json=hook, headers=headers).status_code == 201


def test_the_webhook_call_is_a_child_span_of_the_delivery_and_the_receiver_gets_no_trace_header(
        firestore, publisher, settings, registry, changed, spans):
    from shared.runtime import tracing

    _, _, message, receiver, notify = one_delivery(firestore, publisher, settings, registry, changed, 204)
    with tracing.continuing("notify", message.attributes, edge=False) as delivery:
        notify.first_lane(message)
    [webhook] = spans("webhook")
    assert webhook.parent.span_id == delivery.get_span_context().span_id
    assert webhook.attributes["http.response.status_code"] == 204 and webhook.attributes["dcm.outcome"] == "delivered"
    hook = webhook.attributes["dcm.hook"]
    assert hook.endswith(":9/…") and "?" not in hook, "scheme, host and port only: no path, no query"
    assert not {k.lower() for k in receiver.calls[0]["headers"]} & {"traceparent", "tracestate"}
