"""Webhook signing secrets sealed at rest (shared/runtime/secretbox.py): AES-GCM under a keyring that
Firestore readers do not hold; rotation; a function that needs the keyring does not start without it."""

from __future__ import annotations

import base64
import json
import os
import stat

import pytest
from dcm_status_contracts.errors import ConfigError, SecretUnavailable

from shared.callbacks import registration
from shared.runtime import secretbox
from shared.runtime.entrypoint import http_function, pubsub_function
from shared.runtime.secretbox import Keyring, KeySource

SECRET = registration.new_secret()


def test_a_sealed_secret_holds_no_clear_text_names_its_key_and_opens():
    ring = Keyring.generate("k1")
    sealed = ring.seal(SECRET, "f1")
    assert set(sealed) == {"keyId", "box"} and sealed["keyId"] == "k1"
    assert SECRET not in json.dumps(sealed) and SECRET[6:] not in json.dumps(sealed)
    assert ring.open(sealed, "f1") == SECRET
    assert ring.seal(SECRET, "f1")["box"] != sealed["box"]  # a fresh nonce each time


def test_a_box_opens_for_its_own_callback_only_and_an_altered_box_does_not_open():
    ring = Keyring.generate("k1")
    sealed = ring.seal(SECRET, "f1")
    with pytest.raises(SecretUnavailable, match="another callback's"):
        ring.open(sealed, "f2")  # copied onto another callback
    raw = bytearray(base64.b64decode(sealed["box"]))
    raw[-1] ^= 1
    with pytest.raises(SecretUnavailable, match="altered"):
        ring.open({"keyId": "k1", "box": base64.b64encode(bytes(raw)).decode()}, "f1")
    with pytest.raises(SecretUnavailable):
        ring.open({"keyId": "k1", "box": "not base64!"}, "f1")


def test_rotation_new_writes_use_the_primary_any_key_opens_and_a_dropped_key_is_a_clear_error():
    old = Keyring.generate("k1")
    sealed_old = old.seal(SECRET, "f1")
    both = old.with_new_primary("k2")
    assert both.primary == "k2" and both.seal(SECRET, "f1")["keyId"] == "k2"
    assert both.open(sealed_old, "f1") == SECRET  # the old key still opens during the rotation
    new_only = both.without("k1")
    with pytest.raises(SecretUnavailable, match="sealed with key 'k1', which the keyring no longer holds"):
        new_only.open(sealed_old, "f1")
    with pytest.raises(ConfigError, match="primary"):
        both.without("k2")


def test_the_keyring_json_round_trips_and_malformed_ones_are_refused_without_echoing_a_key():
    ring = Keyring.generate("k1").with_new_primary("k2")
    assert Keyring.parse(ring.to_json()) == ring
    short = base64.b64encode(b"x" * 16).decode()
    for text, problem in [("nope", "not JSON"), ('{"primary": "a"}', "expected"),
                          (json.dumps({"primary": "a", "keys": {"a": short}}), "not base64 of 32 bytes"),
                          (json.dumps({"primary": "b", "keys": {"a": base64.b64encode(b"k" * 32).decode()}}),
                           "not one of its keys"),
                          (json.dumps({"primary": ["a"], "keys": {"a": base64.b64encode(b"k" * 32).decode()}}),
                           "not one of its keys")]:
        with pytest.raises(ConfigError, match=problem) as err:
            Keyring.parse(text)
        assert short not in str(err.value)


def test_the_local_key_file_is_made_once_owner_only(tmp_path):
    path = tmp_path / "state" / "callback-keys.json"
    secretbox.ensure_file(path)
    first = path.read_text()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert Keyring.parse(first).primary
    secretbox.ensure_file(path)
    assert path.read_text() == first  # never replaced: that would lose every sealed secret


def test_an_instance_reads_the_ring_once_and_again_for_a_key_it_has_not_seen():
    rings = [Keyring.generate("k1")]
    reads = []
    clock = [0.0]

    def read():
        reads.append(1)
        return rings[-1].to_json()

    source = KeySource(read, "a test", clock=lambda: clock[0])
    sealed_k1 = source.seal(SECRET, "f1")
    assert source.open(sealed_k1, "f1") == SECRET and len(reads) == 1
    rings.append(rings[0].with_new_primary("k2"))  # a rotation made elsewhere (the CLI's rekey)
    sealed_k2 = rings[-1].seal(SECRET, "f1")
    assert source.open(sealed_k2, "f1") == SECRET and len(reads) == 2  # read again at once
    with pytest.raises(SecretUnavailable):
        source.open({"keyId": "gone", "box": sealed_k2["box"]}, "f1")
    with pytest.raises(SecretUnavailable):
        source.open({"keyId": "gone", "box": sealed_k2["box"]}, "f1")
    assert len(reads) == 3  # a missing key re-reads once, not on every delivery
    clock[0] += secretbox.MAX_AGE_SECONDS
    source.seal(SECRET, "f1")
    assert len(reads) == 4  # and a new primary reaches the sealing side within MAX_AGE_SECONDS


def test_a_keyring_that_cannot_be_read_is_a_config_error_naming_where():
    source = KeySource(lambda: (_ for _ in ()).throw(PermissionError("denied")), "Secret Manager projects/p/x")
    with pytest.raises(ConfigError, match="Secret Manager projects/p/x: PermissionError"):
        source.keyring()


# ---- a function that needs the keyring does not start without it ----------------------------------
@pytest.fixture
def production_env(monkeypatch):
    for name in ("DCM_LOCAL_MODE", "K_SERVICE", "PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST",
                 secretbox.KEYS_SECRET_ENV, secretbox.KEYS_FILE_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DCM_PROJECT", "p")
    monkeypatch.setenv("DCM_PUSH_AUDIENCE", "https://dcm-status-notify-123.europe-west1.run.app")
    monkeypatch.setenv("DCM_PUSH_SERVICE_ACCOUNT", "dcm-status-invoker@p.iam.gserviceaccount.com")
    return monkeypatch



def test_notify_and_the_api_do_not_start_without_the_keyring_outside_local_mode(production_env, logged):
    needs = (secretbox.check_configured,)
    with pytest.raises(ConfigError, match=secretbox.KEYS_SECRET_ENV):
        pubsub_function("notify", lambda runtime: None, needs=needs)
    with pytest.raises(ConfigError, match=secretbox.KEYS_SECRET_ENV):
        http_function("api", lambda runtime: None, needs=needs)
    lines = logged()
    assert len(lines) == 2 and all(line["severity"] == "CRITICAL" for line in lines)
    assert lines[0]["message"].startswith("function notify cannot start") and "DCM_CALLBACK_KEYS_FILE" in \
        lines[0]["message"]
    production_env.setenv(secretbox.KEYS_SECRET_ENV, "projects/p/secrets/dcm-callback-keys/versions/latest")
    assert callable(pubsub_function("notify", lambda runtime: None, needs=needs))  # nothing read at start
    assert callable(pubsub_function("ingest", lambda runtime: None))  # a function that needs no keyring


def test_the_functions_entry_points_check_the_keyring():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "functions"
    for name, needs in (("notify", "needs=(secretbox.check_configured,)"),
                        ("api", "needs=(secretbox.check_configured, check_identity_configured)")):  # and its audience
        assert needs in (root / name / "main.py").read_text()
