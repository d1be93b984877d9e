"""Webhook signing secrets sealed at rest: AES-256-GCM (the ``cryptography`` package) under a key
that Firestore readers do not hold.

The keyring is JSON, ``{"primary": "<key id>", "keys": {"<key id>": "<base64 of 32 random bytes>", ...}}``:
in production the payload of a Secret Manager secret version (``DCM_CALLBACK_KEYS_SECRET``, e.g.
``projects/P/secrets/dcm-callback-keys/versions/latest``, which only notify and the api may read),
locally the file ``DCM_CALLBACK_KEYS_FILE`` (the local stack creates it under its state directory,
mode 0600). A sealed secret is ``{"keyId", "box"}``: ``box`` is base64 of a 12-byte random nonce and
the ciphertext with its tag; the callback's id is the associated data, so a box copied onto another
callback does not open. A new secret is sealed with the primary key; any key of the ring opens.

Rotation (docs/callbacks.md): add a key and make it primary, ``dcm-status callbacks rekey`` (every
secret re-sealed with the primary, clear ones from before encryption included), then drop the old key.
An instance reads the ring once and keeps it for ``MAX_AGE_SECONDS`` (so a new primary reaches every
instance within that time, without a redeploy); it reads it at once when a stored secret names a key
it has not seen (a rotation made elsewhere), and for a key still missing at most every ``REFRESH_SECONDS``.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from dcm_status_contracts.errors import ConfigError, SecretUnavailable

from shared.runtime.logs import get_logger

KEYS_SECRET_ENV = "DCM_CALLBACK_KEYS_SECRET"
KEYS_FILE_ENV = "DCM_CALLBACK_KEYS_FILE"
KEY_BYTES = 32
NONCE_BYTES = 12
REFRESH_SECONDS = 30.0
MAX_AGE_SECONDS = 300.0
log = get_logger("secretbox")


def _aad(context: str) -> bytes:
    return f"dcm-status/callback-secret/{context}".encode()


@dataclass(frozen=True)
class Keyring:
    """The keys that seal and open signing secrets: ``primary`` seals, every one opens."""

    primary: str
    keys: Mapping[str, bytes]

    @classmethod
    def parse(cls, text: str | bytes, where: str = "the keyring") -> "Keyring":
        """From its JSON; ConfigError saying what is wrong (never echoing a key)."""
        shape = '{"primary": KEY_ID, "keys": {KEY_ID: BASE64_OF_32_BYTES, ...}}'
        try:
            doc = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where} is not JSON ({type(exc).__name__}); expected {shape}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("keys"), dict) or not doc["keys"]:
            raise ConfigError(f"{where}: expected {shape}")
        keys = {}
        for key_id, encoded in doc["keys"].items():
            try:
                raw = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else b""
            except (binascii.Error, ValueError):
                raw = b""
            if len(raw) != KEY_BYTES or not key_id:
                raise ConfigError(f"{where}: key {key_id!r} is not base64 of {KEY_BYTES} bytes")
            keys[str(key_id)] = raw
        if not isinstance(doc.get("primary"), str) or doc["primary"] not in keys:
            raise ConfigError(f"{where}: primary {str(doc.get('primary'))[:64]!r} is not one of its keys "
                              f"({', '.join(sorted(keys))})")
        return cls(doc["primary"], keys)

    @classmethod
    def generate(cls, key_id: str | None = None) -> "Keyring":
        """A ring of one new random key (primary)."""
        key_id = key_id or new_key_id()
        return cls(key_id, {key_id: secrets.token_bytes(KEY_BYTES)})

    def to_json(self) -> str:
        return json.dumps({"primary": self.primary,
                           "keys": {k: base64.b64encode(v).decode() for k, v in self.keys.items()}}, indent=2)

    def with_new_primary(self, key_id: str | None = None) -> "Keyring":
        """This ring plus a new random key, made primary (rotation's first step)."""
        key_id = key_id or new_key_id()
        if key_id in self.keys:
            raise ConfigError(f"the keyring already has a key {key_id!r}")
        return Keyring(key_id, {**self.keys, key_id: secrets.token_bytes(KEY_BYTES)})

    def without(self, key_id: str) -> "Keyring":
        """This ring without ``key_id`` (rotation's last step, after a rekey); never the primary."""
        if key_id == self.primary:
            raise ConfigError(f"{key_id!r} is the primary key: make another primary first")
        if key_id not in self.keys:
            raise ConfigError(f"the keyring has no key {key_id!r}")
        return Keyring(self.primary, {k: v for k, v in self.keys.items() if k != key_id})

    def seal(self, clear: str, context: str) -> dict[str, str]:
        """``clear`` sealed with the primary key, bound to ``context`` (the callback's id)."""
        nonce = secrets.token_bytes(NONCE_BYTES)
        box = nonce + AESGCM(self.keys[self.primary]).encrypt(nonce, clear.encode(), _aad(context))
        return {"keyId": self.primary, "box": base64.b64encode(box).decode()}

    def open(self, sealed: Mapping[str, str], context: str) -> str:
        """The clear secret, or SecretUnavailable saying why not (never the secret itself)."""
        key_id = str(sealed.get("keyId"))
        key = self.keys.get(key_id)
        if key is None:
            raise SecretUnavailable(f"sealed with key {key_id[:64]!r}, which the keyring no longer holds "
                                    f"(it holds {', '.join(sorted(self.keys))}): rotate the callback's secret, "
                                    "or put the key back")
        try:
            box = base64.b64decode(str(sealed.get("box")), validate=True)
            return AESGCM(key).decrypt(box[:NONCE_BYTES], box[NONCE_BYTES:], _aad(context)).decode()
        except (InvalidTag, binascii.Error, ValueError, UnicodeDecodeError):
            raise SecretUnavailable(f"does not open with key {key_id!r}: altered, or another callback's") from None


def new_key_id() -> str:
    return time.strftime("k%Y%m%d-", time.gmtime()) + secrets.token_hex(3)


class KeySource:
    """Where an instance's keyring comes from (``read`` returns its JSON), read once and kept; read
    again when a stored secret names a key the kept ring lacks, at most every ``REFRESH_SECONDS``."""

    def __init__(self, read: Callable[[], bytes | str], where: str, clock: Callable[[], float] = time.monotonic):
        self._read, self.where, self._clock = read, where, clock
        self._lock = threading.Lock()
        self._ring: Keyring | None = None
        self._read_at = float("-inf")
        self._missing: set[str] = set()  # key ids asked for that the ring lacked

    def _load(self) -> Keyring:
        try:
            text = self._read()
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure to read is the same misconfiguration
            raise ConfigError(f"cannot read the webhook secrets' keyring from {self.where}: "
                              f"{type(exc).__name__}: {str(exc)[:200]}") from None
        ring = Keyring.parse(text, self.where)
        self._ring, self._read_at = ring, self._clock()
        return ring

    def keyring(self) -> Keyring:
        with self._lock:
            if self._ring is None:
                return self._load()
            if self._clock() - self._read_at >= MAX_AGE_SECONDS:
                self._reload("it is older than %d s" % MAX_AGE_SECONDS)
            return self._ring

    def _reload(self, why: str) -> None:
        """Read the ring again (the lock held); on failure keep the one held, and say so."""
        try:
            self._load()
        except ConfigError as exc:
            self._read_at = self._clock()  # not again at once
            log.warning("keyring not read again (%s): %s", why, exc)

    def seal(self, clear: str, context: str) -> dict[str, str]:
        return self.keyring().seal(clear, context)

    def open(self, sealed: Mapping[str, str], context: str) -> str:
        ring = self.keyring()
        key_id = str(sealed.get("keyId"))
        if key_id not in ring.keys:
            with self._lock:
                if key_id not in self._missing or self._clock() - self._read_at >= REFRESH_SECONDS:
                    self._missing.add(key_id)
                    self._reload(f"a secret is sealed with key {key_id[:64]!r}, not in it")
                ring = self._ring or ring
        return ring.open(sealed, context)


def file_source(path: str | Path) -> KeySource:
    return KeySource(Path(path).read_bytes, f"the file {path}")


def secret_manager_source(version: str) -> KeySource:
    def read() -> bytes:
        from google.cloud import secretmanager  # only notify and the api need it, and only here

        return secretmanager.SecretManagerServiceClient().access_secret_version(name=version).payload.data

    return KeySource(read, f"Secret Manager {version}")


_SOURCES: dict[tuple[str, str], KeySource] = {}
_SOURCES_LOCK = threading.Lock()


def source(secret: str | None, file: str | None, local_mode: bool) -> KeySource:
    """The instance's keyring source (one per process and setting): the Secret Manager version
    ``secret``, else the file ``file``; in local mode with neither (tests in one process), a ring
    made for this process. ConfigError outside local mode with neither: the function cannot start."""
    if secret:
        where = ("secret", secret)
    elif file:
        where = ("file", file)
    elif local_mode:
        where = ("process", "")
    else:
        raise ConfigError(f"the webhook signing secrets' keyring is not configured: set {KEYS_SECRET_ENV} "
                          f"(a Secret Manager secret version, e.g. projects/P/secrets/dcm-callback-keys/versions/"
                          f"latest) or {KEYS_FILE_ENV} (docs/callbacks.md)")
    with _SOURCES_LOCK:
        if where not in _SOURCES:
            if where[0] == "secret":
                _SOURCES[where] = secret_manager_source(where[1])
            elif where[0] == "file":
                _SOURCES[where] = file_source(where[1])
            else:
                ring = Keyring.generate("process")
                _SOURCES[where] = KeySource(ring.to_json, "this process's own keyring (local mode, no setting)")
        return _SOURCES[where]


def from_env(env: Mapping[str, str] | None = None, local_mode: bool = False) -> KeySource:
    env = os.environ if env is None else env
    return source(env.get(KEYS_SECRET_ENV) or None, env.get(KEYS_FILE_ENV) or None, local_mode)


def write_file(path: str | Path, ring: Keyring) -> None:
    """Write the keyring file, readable by its owner only (0600), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(ring.to_json())
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def ensure_file(path: str | Path) -> Path:
    """The keyring file at ``path``, created with one new key (mode 0600) if it is missing."""
    path = Path(path)
    if not path.exists():
        write_file(path, Keyring.generate())
    return path


def describe(ring: Keyring) -> dict[str, Any]:
    """What may be shown of a ring: its key ids, never a key."""
    return {"primary": ring.primary, "keys": sorted(ring.keys)}


def for_settings(settings: Any) -> KeySource:
    """The keyring source a function's settings name (``Settings.callback_keys_secret``/``_file``)."""
    return source(settings.callback_keys_secret, settings.callback_keys_file, settings.local_mode)


def check_configured(settings: Any) -> None:
    """ConfigError unless the settings say where the keyring is (outside local mode): notify and the api
    refuse to start without it (shared/runtime/entrypoint.py ``check_startup``). Nothing is read here."""
    if not settings.local_mode and not (settings.callback_keys_secret or settings.callback_keys_file):
        source(None, None, False)  # raises the ConfigError that says what to set
