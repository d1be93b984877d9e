"""How the local stack declares delivery on the Pub/Sub emulator (infra/local/stack.py) and keeps its function
servers running (infra/local/supervise.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from infra.local.wiring import backoff_window, emulator_delivery_attempts
from infra.local.state import REPO_ROOT
from infra.topology import load


def _spec(**changes):
    spec = next(s for s in load().subscriptions if s.push == "upsert")
    return dataclasses.replace(spec, **changes)


@pytest.mark.parametrize("minimum, maximum, attempts, window, local", [
    (1, 10, 5, 15, 16),     # the declared default: 1 + 2 + 4 + 8 s
    (1, 1, 5, 4, 5),        # a flat 1 s schedule is what the emulator does anyway: never fewer attempts
    (10, 600, 5, 150, 100),  # longer than 100 redeliveries: capped at Pub/Sub's maximum
    (1, 10, 8, 45, 46),     # 1 + 2 + 4 + 8 + 10 + 10 + 10
])
def test_emulator_redeliveries_span_the_declared_back_off_schedule(minimum, maximum, attempts, window, local):
    spec = _spec(minimum_backoff=minimum, maximum_backoff=maximum, max_delivery_attempts=attempts)
    assert backoff_window(spec) == window
    assert emulator_delivery_attempts(spec) == local


def _keeper(tmp_path, script: str):
    pidfile = tmp_path / "f.pid"
    proc = subprocess.Popen([sys.executable, "-m", "infra.local.supervise", "--name", "f", "--pidfile", str(pidfile),
                             "--", sys.executable, "-c", script], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    return proc, pidfile


def _wait_pid(pidfile, not_this=None, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid = int(pidfile.read_text())
            if pid != not_this:
                return pid
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    pytest.fail("the keeper did not (re)start its server")


def test_a_killed_server_is_restarted_and_a_stopped_keeper_stops_it(tmp_path):
    proc, pidfile = _keeper(tmp_path, "import time; time.sleep(60)")
    try:
        first = _wait_pid(pidfile)
        os.kill(first, signal.SIGKILL)
        second = _wait_pid(pidfile, not_this=first)
        assert (tmp_path / "f.restarts").read_text().strip() == "1"
        os.killpg(proc.pid, signal.SIGTERM)  # what `down` does: the keeper's group
        out, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    records = [json.loads(line) for line in out.splitlines()]  # one JSON line per record
    assert [r["severity"] for r in records] == ["INFO", "WARNING", "INFO"]
    assert "killed by SIGKILL" in records[1]["message"] and records[1]["restarts"] == 1
    with pytest.raises(ProcessLookupError):
        os.kill(second, 0)
    assert not pidfile.exists()


def test_a_server_that_keeps_dying_young_is_restarted_with_growing_delays(tmp_path):
    proc, _ = _keeper(tmp_path, "raise SystemExit(3)")
    time.sleep(2.5)  # restarts after 0.5 s, 1 s, 2 s: three at most, not a spin
    os.killpg(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    warnings = [json.loads(line) for line in out.splitlines() if '"WARNING"' in line]
    assert 2 <= len(warnings) <= 3
    assert "exited with status 3" in warnings[0]["message"]
    delays = [w["message"].rsplit("restarting in ", 1)[1] for w in warnings]
    assert delays == ["0.5 s", "1.0 s", "2.0 s"][:len(delays)]


# A server like gunicorn's master: binds the port, forks a worker that holds the listening socket (and,
# here, shrugs SIGTERM off), answers each connection with its own pid. Started again while a dead master's
# worker still holds the port, it cannot bind and exits 98 (EADDRINUSE), as functions-framework does.
_MASTER = """
import os, signal, socket, sys, time
port, workers = int(sys.argv[1]), sys.argv[2]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", port))
except OSError:
    sys.exit(98)
s.listen(16)
worker = os.fork()
if worker == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(1)
with open(workers, "a") as f:
    f.write(f"{worker}\\n")
while True:
    c, _ = s.accept()
    c.sendall(str(os.getpid()).encode())
    c.close()
"""


def _answer(port: int) -> int | None:
    """The pid of the server answering on port (None: refused, or nobody answering)."""
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as c:
            return int(c.recv(32) or 0) or None
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        return ") Z " not in open(f"/proc/{pid}/stat").read()  # a zombie is dead
    except OSError:
        return False


def test_a_killed_server_takes_its_workers_with_it_and_the_restart_binds_its_port(tmp_path):
    """kill -9 of a server whose worker holds the listening socket (gunicorn under load): the keeper ends
    the orphaned worker and the restarted server answers on the same port. Before, the restart failed with
    EADDRINUSE for as long as the worker lived, and the keeper backed off."""
    from infra.local.emulators import free_port

    port, workers = free_port(), tmp_path / "workers"
    script = tmp_path / "master.py"
    script.write_text(_MASTER)
    pidfile = tmp_path / "f.pid"
    proc = subprocess.Popen([sys.executable, "-m", "infra.local.supervise", "--name", "f", "--pidfile", str(pidfile),
                             "--", sys.executable, str(script), str(port), str(workers)], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        first = _wait_pid(pidfile)
        _wait_for(lambda: _answer(port) == first, "the first server to answer")
        orphan = int(workers.read_text().split()[0])
        os.kill(first, signal.SIGKILL)
        second = _wait_pid(pidfile, not_this=first)
        _wait_for(lambda: _answer(port) == second, "the restarted server to answer on its port")
        assert not _alive(orphan)
        assert (tmp_path / "f.restarts").read_text().strip() == "1"  # restarted once: the first try bound
        current = int(workers.read_text().split()[-1])
        os.killpg(proc.pid, signal.SIGTERM)  # `down`: the keeper's group; its worker shrugs SIGTERM off
        out, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not _alive(current) and not _alive(second)
    left = [json.loads(line) for line in out.splitlines() if "left" in line]
    assert left[0]["orphans"] == [orphan] and "ended" in left[0]["message"]


def _wait_for(predicate, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_the_emulator_waits_for_a_push_as_long_as_production_does():
    """The Pub/Sub emulator's push has no request timeout of its own (a push never answered stranded its
    message): its JVM gets the longest push subscription's ack deadline, production's push request timeout."""
    from infra.local.emulators import JIT_AND_GC, java_options
    from infra.local.wiring import push_timeout

    topology = load()
    longest = max(s.ack_deadline_seconds for s in topology.subscriptions if s.push)
    assert push_timeout(topology) == longest
    slow = dataclasses.replace(_spec(), ack_deadline_seconds=longest + 60)
    pulled = dataclasses.replace(_spec(), push=None, ack_deadline_seconds=longest + 600)
    assert push_timeout(dataclasses.replace(topology, subscriptions=(*topology.subscriptions, slow, pulled))) \
        == longest + 60  # pull subscriptions have no push to time out
    assert java_options(None, 60) == f"-Xmx512m {JIT_AND_GC} -Dsun.net.client.defaultReadTimeout=60000"
    assert java_options("-Xmx256m", 60.5) == "-Xmx256m -Dsun.net.client.defaultReadTimeout=60500"
    assert java_options("-Xmx256m") == "-Xmx256m"


def test_the_firestore_emulator_gets_a_heap_for_every_version_it_keeps():
    """The Firestore emulator keeps every version of every document: at 512 MB an e2e stack ran out of heap
    mid-tier (queries past their deadline, 503s); its JVM gets 2 GB, Pub/Sub's keeps 512 MB."""
    from infra.local.emulators import JIT_AND_GC, java_options

    assert java_options(None, kind="firestore") == f"-Xmx2g {JIT_AND_GC}"
    assert java_options(None, kind="firestore", heap="-Xmx6g") == f"-Xmx6g {JIT_AND_GC}"  # the reliability stack's
    assert java_options(None, 60, kind="pubsub") == f"-Xmx512m {JIT_AND_GC} -Dsun.net.client.defaultReadTimeout=60000"
    assert java_options("-Xmx4g", kind="firestore") == "-Xmx4g"  # an operator's JAVA_TOOL_OPTIONS wins
