"""Webhook callbacks: which hooks may be called, the body, and signatures a Standard Webhooks
receiver verifies with the library."""

from __future__ import annotations

import pytest
from dcm_status_contracts import timeutil
from dcm_status_contracts.errors import InvalidRequest
from standardwebhooks.webhooks import Webhook

from shared.callbacks import hooks, registration, webhook
from shared.runtime.secretbox import Keyring

CHANGE = {"id": "c1", "cursor": "x", "committedAt": "2026-03-01T10:00:00.000000Z", "key": "aws/vm/i-1",
          "provider": "aws", "resourceType": "vm", "newStatus": "RUNNING",
          "changes": [{"attribute": "/status", "old": "PENDING", "new": "RUNNING"}],
          "resource": {"key": "aws/vm/i-1", "status": "RUNNING", "metadata": {"tenant": "acme"}}}
AT = timeutil.parse("2026-03-01T10:00:00Z")


@pytest.mark.parametrize("address, why", [
    ("169.254.169.254", "link-local"), ("10.0.0.1", "not a public"), ("192.168.1.5", "not a public"),
    ("172.16.0.1", "not a public"), ("100.64.0.1", "not a public"), ("0.0.0.0", "not a public"),
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("::ffff:127.0.0.1", "loopback"),
    ("::ffff:169.254.169.254", "link-local"), ("fe80::1%eth0", "link-local"), ("fd00:ec2::254", "not a public"),
    ("fc00::1", "not a public"), ("224.0.0.1", "multicast"), ("240.0.0.1", "not a public"),
])
def test_addresses_that_are_not_public_are_refused(address, why):
    assert why in (hooks.blocked(address, local_mode=False) or "")


@pytest.mark.parametrize("address", ["8.8.8.8", "2001:4860:4860::8888", "::ffff:8.8.8.8"])
def test_public_addresses_are_allowed(address):
    assert hooks.blocked(address, local_mode=False) is None


def test_local_mode_allows_loopback_only():
    assert hooks.blocked("127.0.0.1", local_mode=True) is None
    assert hooks.blocked("10.0.0.1", local_mode=True) and hooks.blocked("169.254.169.254", local_mode=True)


def test_one_blocked_address_among_several_refuses_the_hook():
    with pytest.raises(InvalidRequest, match="resolves to 127.0.0.1"):
        hooks.check_addresses("rebind.example", ["93.184.216.34", "127.0.0.1"], local_mode=False)
    with pytest.raises(InvalidRequest, match="does not resolve"):
        hooks.check_addresses("nowhere.example", [], local_mode=False)


@pytest.mark.parametrize("url, local, problem", [
    ("http://example.com/cb", False, "scheme must be https"),
    ("ftp://example.com/cb", True, "scheme must be https or http"),
    ("https://user:pw@example.com/cb", False, "no credentials"),
    ("https://metadata.google.internal/computeMetadata/v1/", False, "metadata server"),
    ("https:///cb", False, "no host"),
    ("https://example.com:99999/", False, "not a URL"),
    ("", False, "absolute URL"),
])
def test_hooks_that_may_not_be_called_are_refused_with_the_reason(url, local, problem):
    with pytest.raises(InvalidRequest, match=problem) as err:
        hooks.parse_hook(url, local_mode=local)
    assert err.value.parameter == "hook"


def test_a_hook_names_its_host_and_port():
    assert hooks.parse_hook("https://hooks.example.com/cb", local_mode=False) == ("hooks.example.com", 443)
    assert hooks.parse_hook("http://127.0.0.1:8099/cb", local_mode=True) == ("127.0.0.1", 8099)


def test_the_body_is_the_trackers_shape_with_id_key_and_time():
    import orjson
    sent = orjson.loads(webhook.body(CHANGE, "ABCDEFG42"))
    assert sent == {"id": "c1", "token": "ABCDEFG42", "key": "aws/vm/i-1", "cursor": "x",
                    "committedAt": CHANGE["committedAt"], "changes": CHANGE["changes"],
                    "resource": CHANGE["resource"]}


def test_a_standard_webhooks_receiver_verifies_the_signature():
    secret = registration.new_secret()
    payload = webhook.body(CHANGE, None)
    headers = webhook.signed_headers([secret], "c1~cb1", timeutil.now(), payload)
    assert Webhook(secret).verify(payload, headers)["id"] == "c1"
    with pytest.raises(Exception):
        Webhook(registration.new_secret()).verify(payload, headers)


def test_during_a_rotation_a_receiver_with_either_secret_verifies():
    old, new = registration.new_secret(), registration.new_secret()
    payload, at = webhook.body(CHANGE, None), timeutil.now()
    headers = webhook.signed_headers([new, old], "d1", at, payload)
    for secret in (old, new):
        Webhook(secret).verify(payload, headers)


def registered(scope=registration.Scope.FILTER, **kw) -> registration.Callback:
    return registration.Callback(id="f1", hook="https://hooks.example.com/cb", scope=scope, created_at="2026-03-01T00:00:00Z",
                             secrets=(registration.SigningSecret(registration.new_secret()),), **kw)


@pytest.mark.parametrize("where, matched", [
    ({}, True), ({"provider": "aws"}, True), ({"provider": "azure"}, False), ({"type": "vm"}, True),
    ({"type": "disk"}, False), ({"status": "RUNNING"}, True), ({"status": "STOPPED"}, False),
    ({"label": "tenant:acme"}, True), ({"label": "tenant:other"}, False), ({"label": "region:eu"}, False),
    ({"provider": "aws", "status": "STOPPED"}, False),
])
def test_a_filter_callback_is_sent_the_changes_its_filter_matches(where, matched):
    assert registered(filter=registration.Filter.of(where)).matches(CHANGE) is matched


def test_a_resource_callback_is_sent_its_resources_changes_only():
    assert registered(registration.Scope.RESOURCE, key="aws/vm/i-1").matches(CHANGE)
    assert not registered(registration.Scope.RESOURCE, key="aws/vm/i-2").matches(CHANGE)


@pytest.mark.parametrize("where, problem", [
    ({"colour": "red"}, "unknown field 'colour'"), ({"label": "owner:me"}, "LABEL one of"),
    ({"status": ""}, "1 to 256"), ({"provider": 7}, "1 to 256"), ("aws", "expected an object"),
])
def test_a_filter_that_cannot_be_read_is_refused(where, problem):
    with pytest.raises(InvalidRequest, match=problem):
        registration.Filter.of(where)


def test_a_callback_survives_its_stored_form_and_never_shows_its_secrets():
    cb = registered(filter=registration.Filter.of({"provider": "aws", "label": "tenant:acme"}), token="t",
                    retry_seconds=60)
    ring = Keyring.generate()
    cb = cb.sealed(ring.seal)  # stored sealed only (shared/runtime/secretbox.py)
    assert registration.SECRET_PREFIX not in str(cb.to_doc())
    assert registration.Callback.from_doc("f1", cb.to_doc()).opened(ring.open, AT)[0] == cb
    shown = registration.public("f1", {**cb.to_doc(), "stats": {"delivered": 3}})
    assert cb.secrets[0].value not in str(shown) and "secrets" not in shown
    assert shown["stats"]["delivered"] == 3 and shown["stats"]["consecutiveFailures"] == 0
    assert shown["filter"] == {"provider": "aws", "label": "tenant:acme"}


def test_a_rotation_keeps_the_old_secret_signing_for_its_grace_only():
    cb = registered()
    old = cb.secrets[0].value
    rotated, new = cb.rotated(AT, grace_seconds=3600)
    assert rotated.signing_secrets(AT) == [new, old]
    assert rotated.signing_secrets(timeutil.parse("2026-03-01T11:00:01Z")) == [new]
    again, newest = rotated.rotated(AT, grace_seconds=3600)
    assert again.signing_secrets(AT) == [newest, new]  # only the current secret gets a grace
    immediate, only = cb.rotated(AT, grace_seconds=0)
    assert immediate.signing_secrets(AT) == [only]


def test_a_resource_has_one_callback_id_and_bad_settings_are_refused():
    assert registration.resource_callback_id("aws/vm/i-1") == registration.resource_callback_id("aws/vm/i-1")
    assert registration.resource_callback_id("aws/vm/i-1") != registration.resource_callback_id("aws/vm/i-2")
    with pytest.raises(InvalidRequest, match="retrySeconds"):
        registration.check_retry_seconds(0)
    with pytest.raises(InvalidRequest, match="retrySeconds"):
        registration.check_retry_seconds(True)
    assert registration.check_retry_seconds(None) == registration.DEFAULT_RETRY_SECONDS
    assert registration.check_retry_seconds(60.0) == 60
    with pytest.raises(InvalidRequest, match="retrySeconds"):
        registration.check_retry_seconds(60.5)
    with pytest.raises(InvalidRequest, match="token"):
        registration.check_token("x" * 300)
