"""Killed under load, on the emulators (issue 26): upsert's server killed mid-burst comes back on its first
restart (its orphaned gunicorn worker no longer holds the port: infra/local/supervise.py); a worker killed
mid-request loses nothing (the emulator sends a cut push again); a push nobody ever answers is delivered
again after the push deadline, as production does (infra/local/emulators.py, docs/local-stack.md)."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from infra.local import emulators
from infra.local.health import answers_http
from infra.local.supervise import children, listening
from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.e2e

PROVIDERS = ["aws", "azure", "vmware"]  # one lane each into upsert: 2 pushes in flight per lane
RATE = 40.0  # updates/s: upsert busy on every lane


def _sockets(port: int) -> list[tuple[str, int]]:
    """(state, bytes received and not read yet) of each local socket on ``port`` (/proc/net/tcp); for the
    listening socket, the second is its accept backlog."""
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return [(f[3], int(f[4].split(":")[1], 16)) for f in rows if int(f[1].split(":")[1], 16) == port]


def _alive(pid: int) -> bool:
    try:
        return ") Z " not in Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False


def _restarts(e2e, name: str) -> int:
    return {h.component: h.restarts for h in e2e.stack.function_health(e2e.state)}[f"function {name}"]


def _burst(e2e, tag: str, n: int, during) -> dict[str, str]:
    """``n`` updates of ``n`` resources over the three providers at RATE a second; ``during(i)`` after each
    publish. Returns each resource's key and status."""
    reporters = {p: e2e.reporter(p) for p in PROVIDERS}
    wanted, futures, started = {}, [], time.monotonic()
    for i in range(n):
        provider, status = PROVIDERS[i % len(PROVIDERS)], "STOPPED" if i % 2 else "RUNNING"
        futures.append(reporters[provider].publish_now("vm", f"{tag}-{i}", status, "burst"))
        wanted[f"{provider}/vm/{tag}-{i}"] = status
        during(i)
        time.sleep(max(0.0, (i + 1) / RATE - (time.monotonic() - started)))
    for f in futures:
        f.result(timeout=60)
    return wanted


@pytest.mark.timeout(300)
def test_upsert_server_killed_mid_burst_answers_again_on_its_first_restart_and_applies_the_burst(e2e, uid):
    """kill -9 of upsert's gunicorn master with pushes in flight: its worker, orphaned, no longer keeps the
    port (before: every restart failed with EADDRINUSE and the keeper backed off for 30 s and more)."""
    port = e2e.state.functions["upsert"]["port"]
    before = _restarts(e2e, "upsert")
    killed: dict[str, object] = {}

    def kill(i: int) -> None:
        if i == 60:
            wait_until(lambda: any(state == "01" for state, _ in _sockets(port)), 10, interval=0.01,
                       what="pushes in flight on upsert's port")
            server = e2e.stack.server_pid("upsert")
            killed.update(server=server, workers=children(server), at=time.monotonic())
            os.kill(server, signal.SIGKILL)
    wanted = _burst(e2e, f"srvkill-{uid}", 150, kill)
    wait_until(lambda: (server := e2e.stack.server_pid("upsert")) not in (None, killed["server"])
               and listening([server], port) and answers_http(f"127.0.0.1:{port}", timeout=1), 60, interval=0.05,
               what="upsert's new server answering on its port")
    back = time.monotonic() - killed["at"]
    assert killed["workers"] and not any(_alive(w) for w in killed["workers"])  # taken down with it
    assert _restarts(e2e, "upsert") == before + 1  # the first restart bound the port
    for key, status in wanted.items():
        e2e.wait_for_status(key, status, timeout=120)
    print(f"\nupsert server killed mid-burst: answering again after {back:.1f} s; {len(wanted)} updates applied")


@pytest.mark.timeout(300)
def test_upsert_worker_killed_mid_request_loses_nothing(e2e, uid):
    """The worker frozen (SIGSTOP) while pushes of the burst are in it, unanswered, then kill -9: gunicorn
    respawns it, the emulator sends every cut push again, and every update is applied."""
    port = e2e.state.functions["upsert"]["port"]
    frozen: dict[str, int] = {}

    def freeze(i: int) -> None:
        if i == 30:
            frozen["worker"] = children(e2e.stack.server_pid("upsert"))[0]
            os.kill(frozen["worker"], signal.SIGSTOP)
    wanted = _burst(e2e, f"wkrkill-{uid}", 90, freeze)
    try:  # requests of ours held by the frozen worker: bytes it has not read, or connections not accepted
        wait_until(lambda: any(waiting for _, waiting in _sockets(port)), 90, what="pushes held by the worker")  # a busy machine pushes late
    finally:
        os.kill(frozen["worker"], signal.SIGKILL)
    server = e2e.stack.server_pid("upsert")
    wait_until(lambda: [w for w in children(server) if w != frozen["worker"]], 30, what="a new worker")
    for key, status in wanted.items():
        e2e.wait_for_status(key, status, timeout=120)


class _HoldFirst:
    """A push endpoint that holds the first ``held`` requests open, unanswered (a hung handler, a frozen
    worker), and answers the next ones 204; records the message id of each request."""

    def __init__(self, held: int) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.to_hold = held
        self.deliveries: list[tuple[str, float]] = []  # (message id, when)
        self.held: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            while len(body) < length:
                body += conn.recv(65536)
            with self.lock:
                self.deliveries.append((json.loads(body)["message"]["messageId"], time.monotonic()))
                hold = len(self.held) < self.to_hold
                if hold:
                    self.held.append(conn)  # never answered, never closed
            if not hold:
                conn.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                conn.close()
        except (OSError, ValueError, StopIteration):
            conn.close()

    def delivered(self, message_id: str) -> list[float]:
        with self.lock:
            return [at for mid, at in self.deliveries if mid == message_id]

    def close(self) -> None:
        self.server.close()
        for conn in self.held:
            conn.close()


PUSH_TIMEOUT = 8  # seconds: this test's own emulator, so that it waits seconds, not the stack's 60


@pytest.fixture
def short_push_emulator(tmp_path) -> Iterator[str]:
    """A Pub/Sub emulator of its own, started as the stack starts its (emulators.start) but with a push
    deadline of PUSH_TIMEOUT seconds; yields its host."""
    proc = emulators.start("pubsub", tmp_path, push_timeout=PUSH_TIMEOUT)
    try:
        yield proc.host
    finally:
        proc.stop()


@pytest.mark.timeout(120)
def test_pushes_never_answered_are_delivered_again_after_the_push_deadline(short_push_emulator, monkeypatch):
    """Two pushes that never return take both of a subscription's in-flight slots on the emulator: it used
    to wait for them forever (its ack deadline is only a connect timeout), so neither message, nor any later
    one, was delivered again. Now each push fails at the push deadline (the stack gives it the longest ack
    deadline, as production times a push out at the ack deadline: tests/unit/test_local_wiring.py) and
    both messages are delivered again."""
    from google.cloud import pubsub_v1

    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", short_push_emulator)
    endpoint = _HoldFirst(held=2)
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    name, project = f"hold-{uuid.uuid4().hex[:8]}", "dcm-push-deadline"
    topic = publisher.topic_path(project, name)
    subscription = subscriber.subscription_path(project, name)
    publisher.create_topic(name=topic)
    subscriber.create_subscription(request={
        "name": subscription, "topic": topic, "ack_deadline_seconds": 10,
        "push_config": {"push_endpoint": f"http://127.0.0.1:{endpoint.port}/projects/{project}/topics/{name}"}})
    try:
        ids = [publisher.publish(topic, f"held-{i}".encode()).result(timeout=30) for i in range(2)]
        wait_until(lambda: all(len(endpoint.delivered(i)) >= 2 for i in ids), PUSH_TIMEOUT + 30, interval=0.5,
                   what="both unanswered pushes to be delivered again")
        again = [endpoint.delivered(i)[1] - endpoint.delivered(i)[0] for i in ids]
        print(f"\nunanswered pushes delivered again after {min(again):.1f}-{max(again):.1f} s "
              f"(push deadline {PUSH_TIMEOUT} s)")
    finally:
        subscriber.close()
        publisher.stop()
        endpoint.close()
