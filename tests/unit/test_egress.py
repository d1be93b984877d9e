"""Calling a hook: a real HTTP server on loopback, the resolver faked to play DNS tricks."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from shared.runtime import egress


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
    Receiver.delay = 2.0
    out = egress.post(f"http://127.0.0.1:{receiver}/", b"{}", {}, 0.3, local_mode=True)
    assert out.status is None and "Timeout" in out.error and out.seconds < 1.5


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
