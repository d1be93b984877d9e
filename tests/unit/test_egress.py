"""Calling a hook: a real HTTP server on loopback, the resolver faked to play DNS tricks."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from shared.callbacks import egress


class Receiver(BaseHTTPRequestHandler):
    answers: list[int] = []
    got: list[tuple[str, dict[str, str], bytes]] = []
    delay = 0.0

    def do_POST(self):  # noqa: N802 - the library's name
        body = self.rfile.read(int(self.headers["content-length"]))
        Receiver.got.append((self.path, dict(self.headers), body))
        time.sleep(Receiver.delay)
        status = Receiver.answers.pop(0) if Receiver.answers else 204
        self.send_response(status)
        if status in (301, 302, 307):
            self.send_header("location", "http://169.254.169.254/latest/meta-data/")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver() -> Iterator[int]:
    Receiver.answers, Receiver.got, Receiver.delay = [], [], 0.0
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_a_hook_is_called_with_its_host_header_and_the_body(receiver):
    out = egress.post(f"http://localhost:{receiver}/cb?x=1", b'{"a":1}', {"webhook-id": "d1"}, 5, local_mode=True,
                      resolver=lambda host, port: ["127.0.0.1"])
    assert out.ok and out.status == 204 and out.address == "127.0.0.1"
    [(path, headers, body)] = Receiver.got
    assert path == "/cb?x=1" and body == b'{"a":1}' and headers["host"] == f"localhost:{receiver}"
    assert headers["webhook-id"] == "d1"


def test_a_redirect_is_a_failure_and_is_not_followed(receiver):
    Receiver.answers = [302]
    out = egress.post(f"http://127.0.0.1:{receiver}/cb", b"{}", {}, 5, local_mode=True)
    assert not out.ok and out.status == 302 and out.error == "HTTP 302" and len(Receiver.got) == 1


def test_410_says_the_callback_is_gone(receiver):
    Receiver.answers = [410]
    assert egress.post(f"http://127.0.0.1:{receiver}/", b"{}", {}, 5, local_mode=True).gone


def test_a_receiver_that_hangs_is_a_timeout_failure(receiver):
    Receiver.delay = 3.0
    out = egress.post(f"http://127.0.0.1:{receiver}/", b"{}", {}, 0.3, local_mode=True)
    assert out.status is None and "Timeout" in out.error and out.seconds < Receiver.delay  # not waited out


def test_loopback_is_refused_outside_local_mode_and_nothing_is_sent(receiver):
    out = egress.post(f"https://127.0.0.1:{receiver}/", b"{}", {}, 5, local_mode=False)
    assert out.status is None and "loopback" in out.error and not Receiver.got


def test_a_name_resolving_to_a_blocked_address_is_refused_at_delivery():
    """DNS rebinding: the name was public at registration, resolves to the metadata server now."""
    out = egress.post("https://hooks.example.com/cb", b"{}", {}, 5, local_mode=False,
                      resolver=lambda host, port: ["169.254.169.254"])
    assert out.status is None and "hooks.example.com resolves to 169.254.169.254" in out.error


def test_the_address_vetted_is_the_address_connected_to(receiver):
    """Resolved once: a resolver answering differently on a second call is never asked again."""
    answers = iter([["127.0.0.1"], ["10.0.0.1"]])
    out = egress.post(f"http://rebind.test:{receiver}/", b"{}", {}, 5, local_mode=True,
                      resolver=lambda host, port: next(answers))
    assert out.ok and out.address == "127.0.0.1"


# ---- issue 25 item 5: IPv6 forms that carry an IPv4 address, reserved and site-local ranges, ports ----
EMBEDDED = [  # each refused at registration and at delivery, the IPv4 it carries named
    ("::a9fe:a9fe", "IPv4-compatible, carrying 169.254.169.254"),
    ("::127.0.0.1", "IPv4-compatible, carrying 127.0.0.1"),
    ("64:ff9b::a9fe:a9fe", "NAT64, carrying 169.254.169.254"),
    ("64:ff9b::10.0.0.1", "NAT64, carrying 10.0.0.1"),
    ("2002:a9fe:a9fe::", "6to4, carrying 169.254.169.254"),
    ("2002:7f00:1::1", "6to4, carrying 127.0.0.1"),
    ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "Teredo, carrying 10.0.0.1"),  # client 10.0.0.1 (obfuscated)
    ("::ffff:a9fe:a9fe", "IPv4-mapped, carrying 169.254.169.254"),
]
RANGES = [
    ("fec0::1", "site-local"), ("64:ff9b:1::a9fe:a9fe", "reserved"), ("::8.8.8.8", "IPv4-compatible"),
    ("100::1", "not a public"), ("2001:db8::1", "not a public"), ("240.0.0.1", "reserved"),
    ("255.255.255.255", "not a public"), ("ff02::1", "multicast"),
]


@pytest.mark.parametrize("address, why", EMBEDDED + RANGES)
def test_embedded_ipv4_reserved_and_site_local_addresses_are_refused_at_registration(address, why):
    url = f"https://[{address}]/cb" if ":" in address else f"https://{address}/cb"
    with pytest.raises(egress.InvalidRequest) as refused:  # the system resolver: a literal needs no DNS
        egress.vetted_address(url, local_mode=False)
    assert why in refused.value.detail and refused.value.parameter == "hook"
    with pytest.raises(egress.InvalidRequest, match=why.split(",")[0]):  # under a name, too
        egress.vetted_address("https://hooks.example.com/cb", False, lambda host, port: ["93.184.216.34", address])


@pytest.mark.parametrize("address, why", EMBEDDED + RANGES)
def test_embedded_ipv4_reserved_and_site_local_addresses_are_refused_at_delivery(address, why):
    """Registered while the name was public; at delivery it resolves to the form: nothing is sent."""
    out = egress.post("https://hooks.example.com/cb", b"{}", {}, 5, local_mode=False,
                      resolver=lambda host, port: [address])
    assert out.status is None and out.address is None and why.split(",")[0] in out.error
    assert out.category is egress.CallOutcome.BLOCKED_ADDRESS  # no connection was made (address None)


@pytest.mark.parametrize("address", ["::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1", "2001:4860:4860::8888"])
def test_an_ipv6_form_carrying_a_public_ipv4_address_is_allowed(address):
    """The control: the forms are decoded and judged, not refused for their shape."""
    assert egress.vetted_address("https://hooks.example.com/cb", False, lambda host, port: [address])[2] == address


def test_only_port_443_unless_configured():
    public = lambda host, port: ["93.184.216.34"]  # noqa: E731
    for url in ("https://hooks.example.com:8443/cb", "https://hooks.example.com:22/", "https://hooks.example.com:80/"):
        with pytest.raises(egress.InvalidRequest, match="port .* is not allowed") as refused:
            egress.vetted_address(url, False, public)
        assert refused.value.parameter == "hook"
    assert egress.vetted_address("https://hooks.example.com/cb", False, public)[1] == 443
    assert egress.vetted_address("https://hooks.example.com:8443/cb", False, public, ports=(8443,))[1] == 8443
    out = egress.post("https://hooks.example.com:6379/", b"{}", {}, 5, local_mode=False, resolver=public)
    assert out.category is egress.CallOutcome.BLOCKED_ADDRESS and "port 6379" in out.error


def test_local_mode_allows_any_port_on_loopback_only():
    assert egress.vetted_address("http://127.0.0.1:8099/cb", True)[1] == 8099
    assert egress.vetted_address("http://hooks.example.com/cb", True, lambda h, p: ["93.184.216.34"])[1] == 80
    with pytest.raises(egress.InvalidRequest, match="port 8099"):
        egress.vetted_address("http://hooks.example.com:8099/cb", True, lambda h, p: ["93.184.216.34"])


def test_each_failure_is_a_category(receiver, tmp_path):
    local = dict(local_mode=True)
    Receiver.answers = [500, 302]
    assert egress.post(f"http://127.0.0.1:{receiver}/", b"{}", {}, 5, **local).category is \
        egress.CallOutcome.REFUSED_BY_RECEIVER
    assert egress.post(f"http://127.0.0.1:{receiver}/", b"{}", {}, 5, **local).category is \
        egress.CallOutcome.REFUSED_BY_RECEIVER
    assert egress.post(f"http://127.0.0.1:{receiver}/", b"{}", {}, 5, **local).category is egress.CallOutcome.DELIVERED
    assert egress.post(f"https://127.0.0.1:{receiver}/", b"{}", {}, 5, **local).category is \
        egress.CallOutcome.TLS_ERROR  # a TLS handshake with a plain HTTP server
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    assert egress.post(f"http://127.0.0.1:{port}/", b"{}", {}, 5, **local).category is egress.CallOutcome.UNREACHABLE
    assert egress.post("https://nowhere.invalid/", b"{}", {}, 5, False, lambda h, p: []).category is \
        egress.CallOutcome.UNREACHABLE
    Receiver.delay = 1.0
    assert egress.post(f"http://127.0.0.1:{receiver}/", b"{}", {}, 0.2, **local).category is egress.CallOutcome.TIMEOUT


def test_an_error_text_never_holds_the_hooks_path_or_query():
    hook = "https://hooks.example.com/t/SECRET-PATH?token=SECRET-Q"
    scrubbed = egress.scrub(f"failed calling {hook}; POST /t/SECRET-PATH?token=SECRET-Q; ?token=SECRET-Q", hook)
    assert "SECRET" not in scrubbed and "hooks.example.com" in scrubbed


def test_more_ports_are_a_setting_and_a_malformed_one_stops_the_function():
    from dcm_status_contracts.errors import ConfigError

    from shared.runtime import settings

    assert settings.from_env({"DCM_PROJECT": "p"}).hook_ports == ()
    assert settings.from_env({"DCM_PROJECT": "p", "DCM_HOOK_PORTS": "8443, 9443"}).hook_ports == (8443, 9443)
    for bad in ("https", "0", "70000", "8443;22"):
        with pytest.raises(ConfigError, match="DCM_HOOK_PORTS"):
            settings.from_env({"DCM_PROJECT": "p", "DCM_HOOK_PORTS": bad})
