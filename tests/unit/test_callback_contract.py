"""Webhook callbacks: which hooks may be called, the body, and signatures a Standard Webhooks
receiver verifies with the library."""

from __future__ import annotations

import pytest
from standardwebhooks.webhooks import Webhook

from shared.contracts import callback, timeutil
from shared.contracts.errors import InvalidRequest

CHANGE = {"id": "c1", "cursor": "x", "committedAt": "2026-03-01T10:00:00.000000Z", "key": "aws/vm/i-1",
          "changes": [{"attribute": "/status", "old": "PENDING", "new": "RUNNING"}],
          "resource": {"key": "aws/vm/i-1", "status": "RUNNING"}}


@pytest.mark.parametrize("address, why", [
    ("169.254.169.254", "link-local"), ("10.0.0.1", "not a public"), ("192.168.1.5", "not a public"),
    ("172.16.0.1", "not a public"), ("100.64.0.1", "not a public"), ("0.0.0.0", "not a public"),
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("::ffff:127.0.0.1", "loopback"),
    ("::ffff:169.254.169.254", "link-local"), ("fe80::1%eth0", "link-local"), ("fd00:ec2::254", "not a public"),
    ("fc00::1", "not a public"), ("224.0.0.1", "multicast"), ("240.0.0.1", "not a public"),
])
def test_addresses_that_are_not_public_are_refused(address, why):
    assert why in (callback.blocked(address, local_mode=False) or "")


@pytest.mark.parametrize("address", ["8.8.8.8", "2001:4860:4860::8888", "::ffff:8.8.8.8"])
def test_public_addresses_are_allowed(address):
    assert callback.blocked(address, local_mode=False) is None


def test_local_mode_allows_loopback_only():
    assert callback.blocked("127.0.0.1", local_mode=True) is None
    assert callback.blocked("10.0.0.1", local_mode=True) and callback.blocked("169.254.169.254", local_mode=True)


def test_one_blocked_address_among_several_refuses_the_hook():
    with pytest.raises(InvalidRequest, match="resolves to 127.0.0.1"):
        callback.check_addresses("rebind.example", ["93.184.216.34", "127.0.0.1"], local_mode=False)
    with pytest.raises(InvalidRequest, match="does not resolve"):
        callback.check_addresses("nowhere.example", [], local_mode=False)


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
        callback.parse_hook(url, local_mode=local)
    assert err.value.parameter == "hook"


def test_a_hook_names_its_host_and_port():
    assert callback.parse_hook("https://hooks.example.com/cb", local_mode=False) == ("hooks.example.com", 443)
    assert callback.parse_hook("http://127.0.0.1:8099/cb", local_mode=True) == ("127.0.0.1", 8099)


def test_the_body_is_the_trackers_shape_with_id_key_and_time():
    import orjson
    sent = orjson.loads(callback.body(CHANGE, "ABCDEFG42"))
    assert sent == {"id": "c1", "token": "ABCDEFG42", "key": "aws/vm/i-1", "committedAt": CHANGE["committedAt"],
                    "changes": CHANGE["changes"], "resource": CHANGE["resource"]}


def test_a_standard_webhooks_receiver_verifies_the_signature():
    secret = callback.new_secret()
    payload = callback.body(CHANGE, None)
    headers = callback.signed_headers(secret, "c1~cb1", timeutil.now(), payload)
    assert Webhook(secret).verify(payload, headers)["id"] == "c1"
    with pytest.raises(Exception):
        Webhook(callback.new_secret()).verify(payload, headers)


def test_during_a_rotation_a_receiver_with_either_secret_verifies():
    old, new = callback.new_secret(), callback.new_secret()
    payload, at = callback.body(CHANGE, None), timeutil.now()
    headers = {**callback.signed_headers(new, "d1", at, payload),
               "webhook-signature": callback.signatures([new, old], "d1", at, payload)}
    for secret in (old, new):
        Webhook(secret).verify(payload, headers)
