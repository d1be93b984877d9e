"""What the ingress tells its health check (``GET /healthz`` on ``$PORT``): connected, lag, last error.

Cloud Run probes it (the service runs with one instance at least); the local stack's ``dcm-status status``
reads it. It answers 200 while the ingress is connected to NATS and reading, 503 otherwise, with the
same JSON either way. It carries counts and the last error's text, never a credential.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from dcm_status_contracts import timeutil

from shared.nats_ingress.route import Inbound

HEALTH_PATH = "/healthz"


class IngressHealth:
    """The ingress's live counters, shared by its loop and its health server (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: dict[str, Any] = {"connected": False, "lag": None, "ackPending": None, "forwarded": 0,
                                       "deadLettered": 0, "retried": 0, "lastError": None, "lastErrorAt": None,
                                       "lastSequence": None}

    def _update(self, **values: Any) -> None:
        with self._lock:
            self._state.update(values)

    def connected(self, up: bool) -> None:
        self._update(connected=up)

    def lag(self, pending: int, ack_pending: int, by_provider: dict[str, dict[str, int]] | None = None) -> None:
        self._update(lag=pending, ackPending=ack_pending, **({"providers": by_provider} if by_provider else {}))

    def forwarded(self, message: Inbound) -> None:
        with self._lock:
            self._state["forwarded"] += 1
            self._state["lastSequence"] = message.stream_sequence

    def dead_lettered(self, message: Inbound) -> None:
        with self._lock:
            self._state["deadLettered"] += 1
            self._state["lastSequence"] = message.stream_sequence

    def failed(self, error: str) -> None:
        with self._lock:
            self._state["retried"] += 1
            self._state["lastError"] = error[:500]
            self._state["lastErrorAt"] = timeutil.now_str()

    def error(self, error: str) -> None:
        self._update(lastError=error[:500], lastErrorAt=timeutil.now_str())

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"status": "ok" if self._state["connected"] else "disconnected", **self._state}


def serve(health: IngressHealth, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    """Answer ``GET /healthz`` on ``port`` from a daemon thread; returns the server (``shutdown()`` ends it)."""

    class HealthRequestHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.split("?", 1)[0] not in (HEALTH_PATH, "/"):
                self._answer(404, {"title": "Not found", "status": 404})
                return
            snapshot = health.snapshot()
            self._answer(200 if snapshot["connected"] else 503, snapshot)

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            payload = orjson.dumps(body)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:  # probes every few seconds: not one log line each
            pass

    server = ThreadingHTTPServer((host, port), HealthRequestHandler)
    threading.Thread(target=server.serve_forever, name="healthz", daemon=True).start()
    return server
