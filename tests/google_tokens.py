"""Google ID tokens and IAP assertions signed by keys a test makes (no network): a "Google" that signs them, the
keys the api's verifier is handed instead of Google's certificates, and an impostor with keys of its own."""

from __future__ import annotations

import base64
import datetime
import functools
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from google.auth import crypt
from google.auth import jwt as google_jwt

API_URL = "https://dcm-status-api-123456789.europe-west1.run.app"  # DCM_API_AUDIENCE, as terraform sets it
IAP_AUDIENCE = "/projects/123456789/global/backendServices/987654321"  # DCM_API_IAP_AUDIENCE
GOOGLE_ISSUER = "https://accounts.google.com"
IAP_ISSUER = "https://cloud.google.com/iap"


def _pem_private(key: Any) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _self_signed(key: Any) -> str:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test signer")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


@dataclass(frozen=True)
class Signer:
    """One signing key: RS256 with a certificate (as Google's ID tokens), or ES256 with a public key (as IAP's)."""

    kid: str
    algorithm: str
    private_pem: bytes
    public_pem: str

    @classmethod
    def rsa(cls, kid: str) -> "Signer":
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return cls(kid, "RS256", _pem_private(key), _self_signed(key))

    @classmethod
    def es256(cls, kid: str) -> "Signer":
        key = ec.generate_private_key(ec.SECP256R1())
        public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo).decode()
        return cls(kid, "ES256", _pem_private(key), public)

    def sign(self, claims: dict[str, Any], kid: str | None = None) -> str:
        signer = _crypt_signer(self.algorithm, self.private_pem, kid or self.kid)
        return google_jwt.encode(signer, {k: v for k, v in claims.items() if v is not None}).decode()


@functools.cache
def _crypt_signer(algorithm: str, private_pem: bytes, kid: str) -> crypt.Signer:
    """A key loaded once: loading a 2048-bit RSA key checks it, 54 ms of CPU, once per token before (a third of
    tests/functional/test_api_security.py's CPU)."""
    return (crypt.RSASigner if algorithm == "RS256" else crypt.ES256Signer).from_string(private_pem, kid)


@dataclass
class Google:
    """The signer of ID tokens and IAP assertions, and the keys it publishes (what the verifier is handed)."""

    id_key: Signer = field(default_factory=lambda: Signer.rsa("google-1"))
    iap_key: Signer = field(default_factory=lambda: Signer.es256("iap-1"))
    fetches: int = 0

    def keys(self) -> dict[str, str]:
        self.fetches += 1
        return {self.id_key.kid: self.id_key.public_pem}

    def iap_keys(self) -> dict[str, str]:
        self.fetches += 1
        return {self.iap_key.kid: self.iap_key.public_pem}

    @staticmethod
    def claims(email: str, **changed: Any) -> dict[str, Any]:
        now = int(time.time())
        return {"iss": GOOGLE_ISSUER, "aud": API_URL, "azp": "1234", "sub": "1234", "email": email,
                "email_verified": True, "iat": now - 10, "exp": now + 3600, **changed}

    def id_token(self, email: str, signer: Signer | None = None, **changed: Any) -> str:
        return (signer or self.id_key).sign(self.claims(email, **changed))

    def iap_assertion(self, email: str, signer: Signer | None = None, **changed: Any) -> str:
        now = int(time.time())
        claims = {"iss": IAP_ISSUER, "aud": IAP_AUDIENCE, "sub": "accounts.google.com:1234", "email": email,
                  "iat": now - 10, "exp": now + 600, **changed}
        return (signer or self.iap_key).sign(claims)


def unsigned(claims: dict[str, Any]) -> str:
    """A token with ``alg: none``, as a forger writes it: the claims it likes and no signature."""
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(orjson.dumps(value)).decode().rstrip("=")
    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}.x"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
