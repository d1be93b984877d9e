"""Keep one local function server running: restart it on its port when it dies.

The local stack starts every functions-framework server under this keeper
(``python -m infra.supervise --name upsert --pidfile F -- functions-framework ...``).
gunicorn respawns a dead worker, but nothing respawned a dead server: a
``kill -9`` left the function gone until the next ``up``, and Pub/Sub pushes
failing meanwhile. The keeper is the process group leader: stopping the group
(``down``) stops both, and a SIGTERM to the keeper is passed on and not
answered with a restart.

Each start and exit is one JSON line in the function's log; the server's pid
is written to ``--pidfile`` so that an operator (or a test) can find it.
Restarts back off from 0.5 s to 10 s while the server keeps dying young
(it lived less than 30 s), so a server that cannot start does not spin.

``--tick TOPIC --every SECONDS``: the keeper also publishes a tick to TOPIC every SECONDS, the local
stand-in for the Cloud Scheduler job that drives a scheduled function (the sweep) in production.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

FIRST_DELAY, MAX_DELAY, HEALTHY_AFTER = 0.5, 10.0, 30.0


def _log(severity: str, message: str, **fields: object) -> None:
    record = {"severity": severity, "message": message, "logger": "infra.supervise",
              "time": datetime.now(timezone.utc).isoformat(), **fields}
    print(json.dumps(record), flush=True)


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


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
    restarts, young = 0, 0
    while not stopping:
        started = time.monotonic()
        child = subprocess.Popen(command)
        pidfile.write_text(f"{child.pid}\n")
        _log("INFO", f"function server {name} started", pid=child.pid, restarts=restarts)
        code = child.wait()
        if stopping:
            break
        lived = time.monotonic() - started
        young = 0 if lived >= HEALTHY_AFTER else young + 1
        delay = min(MAX_DELAY, FIRST_DELAY * 2 ** max(0, young - 1))
        restarts += 1
        _log("WARNING", f"function server {name} {_exit_reason(code)} after {lived:.1f} s; "
                        f"restarting in {delay:.1f} s", pid=child.pid, restarts=restarts)
        pidfile.with_suffix(".restarts").write_text(f"{restarts}\n")
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
