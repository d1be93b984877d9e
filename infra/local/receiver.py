"""A webhook receiver on loopback, as a consumer would write one: every delivery verified with the
``standardwebhooks`` library, answered as scripted (statuses in turn, or a hang). The demo, the
e2e tests and the callback benchmark receive with it."""

from __future__ import annotations

import http.server
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from standardwebhooks.webhooks import Webhook, WebhookVerificationError


@dataclass
class Received:
    body: dict[str, Any]
    headers: dict[str, str]
    verified: bool
    at: float  # time.time() on arrival
    status: int | None  # what it was answered (None: it hung)


@dataclass
class Hook:
    """What one path answers: ``statuses`` in turn (the last one repeats); ``hang`` holds every
    request until it is set."""

    secret: str | None = None
    statuses: list[int] = field(default_factory=lambda: [204])
    hang: threading.Event | None = None
    got: list[Received] = field(default_factory=list)

    def next_status(self) -> int:
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]

    def bodies(self, verified_only: bool = True) -> list[dict[str, Any]]:
        return [r.body for r in self.got if r.verified or not verified_only]


class Receiver:
    def __init__(self) -> None:
        self.hooks: dict[str, Hook] = {}
        self._lock = threading.Lock()
        receiver = self

        class CallbackRequestHandler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - the library's name
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                receiver._handle(self, raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), CallbackRequestHandler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def hook(self, path: str, **behaviour: Any) -> Hook:
        with self._lock:
            self.hooks[path.lstrip("/")] = Hook(**behaviour)
            return self.hooks[path.lstrip("/")]

    def _handle(self, request: http.server.BaseHTTPRequestHandler, raw: bytes) -> None:
        hook = self.hooks.get(request.path.lstrip("/"))
        headers = {k.lower(): v for k, v in request.headers.items()}
        if hook is None:
            request.send_response(404)
            request.send_header("content-length", "0")
            request.end_headers()
            return
        verified = False
        if hook.secret:
            try:
                Webhook(hook.secret).verify(raw, headers)
                verified = True
            except WebhookVerificationError:
                verified = False
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = {"unreadable": raw[:200].decode(errors="replace")}
        if hook.hang is not None:
            hook.got.append(Received(body, headers, verified, time.time(), None))
            hook.hang.wait(120)
            return  # the caller has given up by now; answer nothing
        status = hook.next_status()
        hook.got.append(Received(body, headers, verified, time.time(), status))
        request.send_response(status)
        request.send_header("content-length", "0")
        request.end_headers()

    def close(self) -> None:
        for hook in self.hooks.values():
            if hook.hang is not None:
                hook.hang.set()
        self.server.shutdown()
        self.server.server_close()
