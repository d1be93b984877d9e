"""Keep one local function server running: restart it on its port when it dies.

The local stack starts every functions-framework server under this keeper
(``python -m infra.local.supervise --name upsert --pidfile F -- functions-framework ...``).
gunicorn respawns a dead worker, but nothing respawned a dead server: a
``kill -9`` left the function gone until the next ``up``, and Pub/Sub pushes
failing meanwhile. The keeper is the process group leader: stopping the group
(``down``) stops both, and a SIGTERM to the keeper is passed on and not
answered with a restart.

A dead server takes its workers with it. gunicorn's workers are the server's
children; when the server (their master) dies, they do not: a worker serves the
requests it holds and keeps the listening socket open for up to gunicorn's
graceful timeout (30 s), and every restart meanwhile fails with ``[Errno 98]
Address already in use`` (measured: a ``kill -9`` of the upsert server under
load left the function down for more than 30 s). So the keeper is a *child
subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``): the dead server's orphans become
the keeper's children, and before each restart the keeper ends them all
(SIGTERM, a short grace for the requests they hold, then SIGKILL) and reaps
them. Everything stays in the keeper's process group, so stopping that group
(``down``) still stops everything at once, as before. (``SO_REUSEPORT`` would let
the new server bind beside the orphan, which would still take a share of new
connections it never accepts; ``PR_SET_PDEATHSIG`` would have to be set inside
each gunicorn worker after its fork, which functions-framework gives no hook for.)

Each start and exit is one JSON line in the function's log; the server's pid
is written to ``--pidfile`` so that an operator (or a test) can find it, and
after each restart their count beside it (``.restarts``). This module is also
that protocol's other side: the command line that starts a keeper
(``keeper_command``) and the reading of its files (``server_pid``, ``restart_count``).
Restarts back off from 0.5 s to 10 s while the server keeps dying young
(it lived less than 30 s), so a server that cannot start does not spin.

``--tick TOPIC --every SECONDS``: the keeper also publishes a tick to TOPIC every SECONDS, the local
stand-in for the Cloud Scheduler job that drives a scheduled function (the sweep) in production.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

FIRST_DELAY, MAX_DELAY, HEALTHY_AFTER = 0.5, 10.0, 30.0
ORPHAN_GRACE = 1.0  # seconds a dead server's workers get to answer what they hold, before SIGKILL
PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


# ---- the protocol, as the stack uses it ---------------------------------------------------
def keeper_command(name: str, command: list[str], pidfile: Path, tick: tuple[str, float] | None = None) -> list[str]:
    """``command`` under a keeper that restarts it when it dies, its pid in ``pidfile`` (its restarts counted
    afresh); ``tick``: (topic, seconds), the keeper's timer for a scheduled function."""
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    restarts_file(pidfile).unlink(missing_ok=True)
    ticking = ["--tick", tick[0], "--every", str(tick[1])] if tick else []
    return [sys.executable, "-m", "infra.local.supervise", "--name", name, "--pidfile", str(pidfile), *ticking,
            "--", *command]


def restarts_file(pidfile: Path) -> Path:
    return pidfile.with_suffix(".restarts")


def server_pid(pidfile: Path) -> int | None:
    """The pid of the server a keeper runs now (it restarts it under another pid), or None."""
    try:
        return int(pidfile.read_text())
    except (OSError, ValueError):
        return None


def restart_count(pidfile: Path) -> int:
    """How often the keeper has restarted its server since it was started."""
    try:
        return int(restarts_file(pidfile).read_text())
    except (OSError, ValueError):
        return 0


# ---- the keeper -----------------------------------------------------------------------------
def _log(severity: str, message: str, **fields: object) -> None:
    record = {"severity": severity, "message": message, "logger": "infra.local.supervise",
              "time": datetime.now(timezone.utc).isoformat(), **fields}
    print(json.dumps(record), flush=True)


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


def become_subreaper() -> bool:
    """Have the orphans of this process's descendants re-parented to it (Linux), not to init."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux: orphans go to init, as before
        return False


def children(of: int | None = None) -> list[int]:
    """The pids of the living children of process ``of`` (default: this one, whose children are a dead
    server's orphans once it is a subreaper; of a gunicorn server: its workers)."""
    me, found = of or os.getpid(), []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()  # state, ppid, ...
        except (OSError, IndexError):  # gone meanwhile
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def listening(pids: list[int], port: int) -> bool:
    """Whether one of ``pids`` holds the socket listening on local TCP ``port`` (/proc/net/tcp, /proc/PID/fd):
    whether a restarted server, not what its predecessor left behind, is what answers there."""
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    inodes = {f"socket:[{f[9]}]" for f in rows if f[3] == "0A" and int(f[1].split(":")[1], 16) == port}
    for pid in pids:
        try:
            if any(os.readlink(fd.path) in inodes for fd in os.scandir(f"/proc/{pid}/fd")):
                return True
        except OSError:  # gone, or not ours to look into
            continue
    return False


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def _reap(timeout: float) -> bool:
    """Reap exited children until none is left (True) or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


def end_orphans(grace: float = ORPHAN_GRACE) -> list[int]:
    """End what the dead server left behind (its workers, holding its port): SIGTERM, ``grace`` seconds to
    answer the requests they hold, then SIGKILL; all reaped. Returns their pids."""
    orphans = children()
    if not orphans:
        _reap(0)
        return []
    _signal_all(orphans, signal.SIGTERM)
    if not _reap(grace):
        _signal_all(children(), signal.SIGKILL)
        _reap(5.0)
    return orphans


def keep(name: str, command: list[str], pidfile: Path) -> int:
    stopping = False
    child: subprocess.Popen | None = None

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    become_subreaper()
    restarts, young = 0, 0
    while not stopping:
        started = time.monotonic()
        child = subprocess.Popen(command)
        pidfile.write_text(f"{child.pid}\n")
        _log("INFO", f"function server {name} started", pid=child.pid, restarts=restarts)
        code = child.wait()
        orphans = end_orphans()
        if orphans:
            _log("WARNING", f"function server {name} left {len(orphans)} process(es) behind: ended",
                 pid=child.pid, orphans=orphans)
        if stopping:
            break
        lived = time.monotonic() - started
        young = 0 if lived >= HEALTHY_AFTER else young + 1
        delay = min(MAX_DELAY, FIRST_DELAY * 2 ** max(0, young - 1))
        restarts += 1
        _log("WARNING", f"function server {name} {_exit_reason(code)} after {lived:.1f} s; "
                        f"restarting in {delay:.1f} s", pid=child.pid, restarts=restarts)
        restarts_file(pidfile).write_text(f"{restarts}\n")
        time.sleep(delay)
    pidfile.unlink(missing_ok=True)
    return 0


def tick(topic: str, every: float) -> None:
    """Publish a tick to ``topic`` every ``every`` seconds, for as long as the keeper lives (a daemon thread)."""
    import threading

    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()

    def run() -> None:
        while True:
            time.sleep(every)
            try:
                publisher.publish(topic, json.dumps({"tick": datetime.now(timezone.utc).isoformat()}).encode()
                                  ).result(timeout=10)
            except Exception as exc:  # the emulator is down or restarting: the next tick tries again
                _log("WARNING", f"tick to {topic} not published: {exc!r}")

    threading.Thread(target=run, name="tick", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--pidfile", required=True, type=Path)
    parser.add_argument("--tick", help="a topic path to publish a tick to, every --every seconds")
    parser.add_argument("--every", type=float, default=60.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to keep running")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if args.tick:
        tick(args.tick, args.every)
    return keep(args.name, command, args.pidfile)


if __name__ == "__main__":
    sys.exit(main())
