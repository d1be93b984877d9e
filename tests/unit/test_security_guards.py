"""Security guards that already hold (issue 25, "Already holding"), each proven so that removing the
guard fails its test. The threat model they belong to, and which test proves which guard:
docs/security.md.

No emulator here: hooks are called on loopback servers (plain and TLS, certificates made here), push
tokens are real RS256 JWTs signed by a key made here (Google's certificate download replaced by ours).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import io
import logging
import re
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import flask
import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from dcm_status_contracts import timeutil
from dcm_status_contracts.errors import InvalidRequest, Reason, Rejected
from dcm_status_contracts.model import PubSubMessage
from dcm_status_contracts.pubsub_binding import BindingMode, to_message
from dcm_status_contracts.status_report import ReportForm, build_event
from google.auth import crypt
from google.auth import jwt as google_jwt
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
from werkzeug.exceptions import Forbidden

from shared.callbacks import egress, hooks, registration, webhook
from shared.ingest.normalize import normalize_message
from shared.runtime import auth, settings
from shared.runtime.logs import CloudLoggingFormatter

REPO = Path(__file__).resolve().parents[2]
STATIC = REPO / "shared" / "api" / "static"


# ---- hooks: metadata host names and IPv4 spellings -------------------------------------------
@pytest.mark.parametrize("host", ["metadata.google.internal", "METADATA.Google.Internal", "metadata.google.internal.",
                                  "metadata", "Metadata.", "metadata.google.internal:8080"])
def test_metadata_host_names_are_refused_in_any_spelling(host):
    with pytest.raises(InvalidRequest, match="is a metadata server") as refused:
        hooks.parse_hook(f"https://{host}/computeMetadata/v1/instance/service-accounts/default/token",
                            local_mode=False)
    assert refused.value.parameter == "hook"


# Each spelling is what the system resolver (inet_aton) reads it as: no DNS is asked.
IPV4_TRICKS = [
    ("2852039166", "169.254.169.254"),  # decimal
    ("0251.0376.0251.0376", "169.254.169.254"),  # octal
    ("0xa9fea9fe", "169.254.169.254"),  # hex
    ("0xA9.0xFE.0xA9.0xFE", "169.254.169.254"),  # hex per part
    ("169.254.43518", "169.254.169.254"),  # short form a.b.c
    ("169.16689662", "169.254.169.254"),  # short form a.b
    ("0251.254.169.254", "169.254.169.254"),  # mixed octal
    ("2130706433", "127.0.0.1"), ("017700000001", "127.0.0.1"), ("0x7f000001", "127.0.0.1"),
    ("127.1", "127.0.0.1"), ("0x7f.1", "127.0.0.1"), ("0177.1", "127.0.0.1"),
    ("0", "0.0.0.0"), ("10.1", "10.0.0.1"), ("167772161", "10.0.0.1"), ("0x0a000001", "10.0.0.1"),
    ("[::ffff:a9fe:a9fe]", "169.254.169.254"),  # IPv4-mapped IPv6, in hex
]


@pytest.mark.parametrize("host, means", IPV4_TRICKS)
def test_ipv4_spellings_are_judged_as_the_address_they_resolve_to(host, means):
    with pytest.raises(InvalidRequest) as refused:
        egress.vetted_address(f"https://{host}/latest/meta-data/", local_mode=False)
    assert f"resolves to {means}" in refused.value.detail or means in refused.value.detail
    out = egress.post(f"https://{host}/latest/meta-data/", b"{}", {}, 2, local_mode=False)
    assert out.status is None and out.address is None and means in out.error  # nothing was sent


def test_a_public_address_spelled_in_hex_is_the_public_address_not_a_refusal():
    """The control of the test above: the spellings are decoded, not merely refused for looking odd."""
    assert egress.vetted_address("https://0x08080808/cb", local_mode=False) == ("0x08080808", 443, "8.8.8.8")


# ---- hooks: TLS verified, on the vetted address ------------------------------------------------
def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _certificate(subject: str, key, issuer: x509.Name, issuer_key, ca: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(hours=1)))
    if ca:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
                          decipher_only=False), critical=True)
    else:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(subject)]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class _Hook(BaseHTTPRequestHandler):
    got: list[str] = []

    def do_POST(self):  # noqa: N802 - the library's name
        self.rfile.read(int(self.headers["content-length"]))
        _Hook.got.append(self.headers["host"])
        self.send_response(204)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def tls_hook(tmp_path) -> Iterator[tuple[int, Path]]:
    """An HTTPS receiver on loopback whose certificate, for hooks.example, a CA made here signed;
    (its port, the CA's PEM file)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("test CA", ca_key, _name("test CA"), ca_key, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = _certificate("hooks.example", key, ca.subject, ca_key)
    (tmp_path / "ca.pem").write_bytes(_pem(ca))
    (tmp_path / "leaf.pem").write_bytes(_pem(leaf) + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "leaf.pem")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    _Hook.got = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], tmp_path / "ca.pem"
    server.shutdown()
    server.server_close()


def test_a_hook_whose_certificate_no_trusted_ca_signed_is_not_called(tls_hook):
    port, _ = tls_hook
    out = egress.post(f"https://hooks.example:{port}/cb", b"{}", {}, 5, True, lambda host, p: ["127.0.0.1"])
    assert out.status is None and "CERTIFICATE_VERIFY_FAILED" in out.error and _Hook.got == []


def test_a_hook_is_verified_against_its_own_host_name_on_the_vetted_address(tls_hook, monkeypatch):
    """With the CA trusted: the certificate names hooks.example, the connection goes to the address
    vetted (127.0.0.1), the name checked and sent (SNI, Host) is the hook's. Another name is refused."""
    port, ca = tls_hook
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))  # OpenSSL's default trust store, read when a context loads it
    good = egress.post(f"https://hooks.example:{port}/cb", b"{}", {}, 5, True, lambda host, p: ["127.0.0.1"])
    assert good.ok and good.address == "127.0.0.1" and _Hook.got == [f"hooks.example:{port}"]
    other = egress.post(f"https://other.example:{port}/cb", b"{}", {}, 5, True, lambda host, p: ["127.0.0.1"])
    assert other.status is None and "doesn't match 'hooks.example'" in other.error
    assert len(_Hook.got) == 1


class _Plain(BaseHTTPRequestHandler):
    got: list[tuple[str, dict[str, str]]] = []

    def do_POST(self):  # noqa: N802 - the library's name
        self.rfile.read(int(self.headers["content-length"]))
        _Plain.got.append((self.requestline, {k.lower(): v for k, v in self.headers.items()}))
        self.send_response(204)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("tail", ["/cb\r\nX-Injected: 1", "/cb%0d%0aX-Injected:%201",
                                  "/a b?x=1 HTTP/1.1\r\nX-Injected: 1\r\n\r\n"])
def test_a_hook_url_cannot_add_a_header_or_a_request_line(tail):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Plain)
    _Plain.got = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        egress.post(f"http://hooks.example:{server.server_address[1]}{tail}", b"{}", {}, 5, True,
                    lambda host, p: ["127.0.0.1"])
    finally:
        server.shutdown()
        server.server_close()
    assert len(_Plain.got) == 1  # sent, as one request
    for line, headers in _Plain.got:
        assert "x-injected" not in headers and line.count(" HTTP/1.1") == 1 and line.endswith(" HTTP/1.1")


# ---- signing secrets and signatures ------------------------------------------------------------
def test_a_signing_secret_is_32_bytes_from_the_secrets_module(monkeypatch):
    secret = registration.new_secret()
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[len("whsec_"):])) == 32
    assert len({registration.new_secret() for _ in range(200)}) == 200
    asked = []
    monkeypatch.setattr(registration.secrets, "token_bytes", lambda n: asked.append(n) or bytes(range(n)))
    assert registration.new_secret() == "whsec_" + base64.b64encode(bytes(range(32))).decode() and asked == [32]


def _sign_by_hand(secret: str, msg_id: str, timestamp: str, body: bytes) -> str:
    key = base64.b64decode(secret[len("whsec_"):])
    return "v1," + base64.b64encode(hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256)
                                    .digest()).decode()


def test_the_signature_is_hmac_sha256_over_id_dot_timestamp_dot_body():
    secret, at, body = registration.new_secret(), timeutil.now(), b'{"id":"c1","changes":[]}'
    headers = webhook.signed_headers([secret], "c1.cb1", at, body)
    assert headers["webhook-timestamp"] == str(int(at.timestamp()))
    assert headers["webhook-signature"] == _sign_by_hand(secret, "c1.cb1", headers["webhook-timestamp"], body)


@pytest.mark.parametrize("tamper", ["id", "timestamp", "body"])
def test_changing_the_id_the_timestamp_or_the_body_breaks_the_signature(tamper):
    secret, at, body = registration.new_secret(), timeutil.now(), b'{"id":"c1","changes":[]}'
    headers = webhook.signed_headers([secret], "c1.cb1", at, body)
    Webhook(secret).verify(body, headers)
    if tamper == "id":
        headers = {**headers, "webhook-id": "c2.cb1"}
    elif tamper == "timestamp":
        headers = {**headers, "webhook-timestamp": str(int(at.timestamp()) - 1)}
    else:
        body = body.replace(b"c1", b"c2")
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body, headers)


def test_during_a_rotations_grace_a_delivery_verifies_with_the_old_and_the_new_secret():
    now = timeutil.now()
    cb = registration.Callback(id="f1", hook="https://hooks.example/cb", scope=registration.Scope.FILTER,
                           created_at=timeutil.format(now), secrets=(registration.SigningSecret(registration.new_secret()),))
    old = cb.secrets[0].value
    rotated, new = cb.rotated(now, grace_seconds=3600)
    body = b'{"id":"c1"}'
    headers = webhook.signed_headers(rotated.signing_secrets(now), "c1.f1", now, body)
    for secret in (old, new):
        Webhook(secret).verify(body, headers)
    after = now + datetime.timedelta(seconds=3601)
    headers = webhook.signed_headers(rotated.signing_secrets(after), "c1.f1", now, body)
    Webhook(new).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(body, headers)


# ---- push authentication: real tokens, the Terraform settings ----------------------------------
AUDIENCE = "https://dcm-status-ingest-abc123-ew.a.run.app"  # DCM_PUSH_AUDIENCE = the function's URL (terraform)
INVOKER = "dcm-status-push@p.iam.gserviceaccount.com"  # DCM_PUSH_SERVICE_ACCOUNT = the push invoker (terraform)
TERRAFORM_SETTINGS = settings.from_env({"DCM_PROJECT": "p", "DCM_PUSH_AUDIENCE": AUDIENCE,
                                        "DCM_PUSH_SERVICE_ACCOUNT": INVOKER})


def _rsa_key_and_cert() -> tuple[bytes, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = _certificate("google", key, _name("google"), key)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    return pem, _pem(cert).decode()


GOOGLE_KEY, GOOGLE_CERT = _rsa_key_and_cert()
OTHER_KEY, _ = _rsa_key_and_cert()


def _token(key: bytes = GOOGLE_KEY, **claims) -> str:
    now = int(time.time())
    payload = {"iss": "https://accounts.google.com", "aud": AUDIENCE, "email": INVOKER, "email_verified": True,
               "sub": "1234", "iat": now - 10, "exp": now + 3600, **claims}
    payload = {k: v for k, v in payload.items() if v is not None}
    return google_jwt.encode(crypt.RSASigner.from_string(key, "kid-1"), payload).decode()


def _unsigned() -> str:
    header = base64.urlsafe_b64encode(b'{"alg":"none","typ":"JWT","kid":"kid-1"}').rstrip(b"=")
    now = int(time.time())
    body = base64.urlsafe_b64encode(orjson.dumps({"iss": "https://accounts.google.com", "aud": AUDIENCE,
                                                  "email": INVOKER, "email_verified": True, "iat": now,
                                                  "exp": now + 3600})).rstrip(b"=")
    return (header + b"." + body + b".").decode()


@pytest.fixture
def google_certs(monkeypatch):
    monkeypatch.setattr(auth._CERTS, "get", lambda: {"kid-1": GOOGLE_CERT})


def _push(token: str, host: str = "dcm-status-ingest-abc123-ew.a.run.app") -> None:
    app = flask.Flask("push")
    with app.test_request_context("/projects/p/topics/dcm-status-ingress-aws", base_url=f"https://{host}",
                                  headers={"Authorization": f"Bearer {token}"}):
        auth.verify_push_request(TERRAFORM_SETTINGS)


def test_a_real_push_token_with_the_terraform_settings_is_accepted(google_certs):
    _push(_token())  # the control: what Pub/Sub sends passes


@pytest.mark.parametrize("why, token", [
    ("wrong audience", lambda: _token(aud="https://attacker.example")),
    ("another function's audience", lambda: _token(aud="https://dcm-status-api-abc123-ew.a.run.app")),
    ("wrong account", lambda: _token(email="someone@gmail.com")),
    ("another service account", lambda: _token(email="dcm-status-api@p.iam.gserviceaccount.com")),
    ("email not verified", lambda: _token(email_verified=False)),
    ("wrong issuer", lambda: _token(iss="https://attacker.example")),
    ("expired", lambda: _token(iat=int(time.time()) - 7200, exp=int(time.time()) - 3600)),
    ("signed by another key", lambda: _token(OTHER_KEY)),
    ("unsigned (alg none)", _unsigned),
])
def test_push_auth_rejects_a_real_token_that_is_wrong(google_certs, why, token):
    with pytest.raises(Forbidden):
        _push(token())


def test_the_request_host_does_not_choose_the_audience_when_it_is_configured(google_certs):
    """A token minted for another URL, sent with that URL as Host, is still refused."""
    with pytest.raises(Forbidden):
        _push(_token(aud="https://attacker.example"), host="attacker.example")


# ---- provider isolation ------------------------------------------------------------------------
def _on_aws_topic(source: str, binary: bool = False) -> PubSubMessage:
    event = build_event("aws", "vm", "i-1", "RUNNING", event_id="e-1", time="2026-11-22T10:00:00Z",
                        form=ReportForm.CURRENT, source=source)
    data, attrs = to_message(event, BindingMode.BINARY if binary else BindingMode.STRUCTURED)
    return PubSubMessage(data, attrs, "m-1", "2026-11-22T10:00:00Z", "dcm-status-ingress-aws")


@pytest.mark.parametrize("source, why", [
    ("dcm/providers/azure", "names provider 'azure'"), ("/dcm/providers/azure", "names provider 'azure'"),
    ("dcm/providers/azure/vm/i-1", "names provider 'azure'"), ("dcm/providers/vmware", "names provider 'vmware'"),
    ("dcm/platform/reconcile", "the platform's own"), ("dcm/platform/freshness", "the platform's own"),
    ("/dcm/platform/reconcile", "the platform's own"), ("//dcm/platform/anything", "the platform's own"),
])
@pytest.mark.parametrize("binary", [False, True])
def test_a_provider_may_not_use_another_providers_or_the_platforms_source(source, why, binary):
    with pytest.raises(Rejected, match=re.escape(why)) as refused:
        normalize_message(_on_aws_topic(source, binary), settings.from_env())
    assert refused.value.reason is Reason.PROVIDER_MISMATCH


def test_a_provider_may_use_its_own_dcm_source():
    """The control: the isolation check refuses others, not the form."""
    assert normalize_message(_on_aws_topic("dcm/providers/aws"), settings.from_env()).event_source == "dcm/providers/aws"


# ---- logs: one JSON line, whatever the text ----------------------------------------------------
def test_a_log_entry_is_one_json_line_with_cr_and_lf_kept_inside_its_strings():
    forged = 'x"}\r\n{"severity":"ERROR","message":"forged"}\n'
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(CloudLoggingFormatter())
    logger = logging.getLogger("dcm-test-security-logs")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            raise ValueError("line one\nline two\r\n" + forged)
        except ValueError:
            logger.exception("refused %s", forged, extra={"labels": {"provider": forged}, "hook": forged,
                                                          "detail": {"nested": forged}, "obj": ValueError(forged)})
    finally:
        logger.removeHandler(handler)
    written = stream.getvalue()
    assert written.endswith("\n") and written.count("\n") == 1 and "\r" not in written
    entry = orjson.loads(written)
    assert entry["message"] == f"refused {forged}" and entry["hook"] == forged
    assert entry["logging.googleapis.com/labels"] == {"provider": forged}
    assert entry["detail"] == {"nested": forged} and entry["obj"] == forged
    assert "line one\nline two\r\n" in entry["stack_trace"]


# ---- the dashboard -----------------------------------------------------------------------------
HTML_SINKS = re.compile(r"\.(innerHTML|outerHTML|insertAdjacentHTML)\b|document\.write(ln)?\s*\(|\beval\s*\(|"
                        r"new\s+Function\s*\(")


def test_the_dashboard_never_parses_text_as_html():
    """Data reaches the page as text (textContent, attributes, DOM nodes), never through an HTML parser."""
    files = sorted(p for p in STATIC.iterdir() if p.suffix in (".js", ".html"))
    assert [p.name for p in files] and any(p.suffix == ".js" for p in files)
    for path in files:
        code = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("//"))
        found = HTML_SINKS.findall(code)
        assert not found, f"{path.relative_to(REPO)} uses {found}"
