"""Start and stop the official Pub/Sub and Firestore emulators.

Each runs in its own process group (killing the gcloud wrapper would leave the
Java child behind), on a free port; readiness means *our* process is alive and
answers on that port.

The Pub/Sub emulator pushes with ``java.net.HttpURLConnection`` and sets the
subscription's ack deadline as the *connect* timeout only: a push that is
accepted and never answered is waited for forever, and its message is never
delivered again (measured: no redelivery 40 s into a push with a 10 s ack
deadline; docs/local-stack.md). Production Pub/Sub uses the ack deadline as the
push request's timeout and redelivers. ``start("pubsub", ..., push_timeout=S)``
gives the emulator's JVM that timeout (``sun.net.client.defaultReadTimeout``,
the JDK's default for connections that set none).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import requests

DEFAULT_SDK_ROOTS = ("/usr/lib/google-cloud-sdk", "/usr/share/google-cloud-sdk", "/opt/google-cloud-sdk")
APT_PACKAGES = ("google-cloud-cli-pubsub-emulator", "google-cloud-cli-firestore-emulator")


class EmulatorError(RuntimeError):
    pass


def sdk_root() -> Path:
    env = os.environ.get("CLOUDSDK_ROOT_DIR")
    candidates = [env] if env else []
    candidates += list(DEFAULT_SDK_ROOTS)
    for c in candidates:
        if c and (Path(c) / "platform").is_dir():
            return Path(c)
    gcloud = shutil.which("gcloud")
    if gcloud:
        out = subprocess.run([gcloud, "info", "--format=value(installation.sdk_root)"],
                             capture_output=True, text=True, timeout=60)
        if out.returncode == 0 and out.stdout.strip():
            return Path(out.stdout.strip())
    raise EmulatorError("Google Cloud SDK not found: run 'make install' (installs "
                        + " ".join(APT_PACKAGES) + ")")


def launch_command(kind: str, port: int) -> list[str]:
    root = sdk_root()
    if kind == "pubsub":
        script = root / "platform/pubsub-emulator/bin/cloud-pubsub-emulator"
        args = [str(script), "--host=127.0.0.1", f"--port={port}"]
    elif kind == "firestore":
        script = root / "platform/cloud-firestore-emulator/cloud_firestore_emulator"
        args = [str(script), "start", "--host=127.0.0.1", f"--port={port}"]
    else:
        raise ValueError(kind)
    if not script.exists():
        raise EmulatorError(f"{kind} emulator missing at {script}: run 'make install' "
                            f"(apt-get install {' '.join(APT_PACKAGES)})")
    return args


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Process:
    pid: int
    port: int

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except OSError:
            return False
        try:  # a zombie child is not alive
            waited, _ = os.waitpid(self.pid, os.WNOHANG)
            return waited == 0
        except ChildProcessError:
            return True

    def stop(self, timeout: float = 3.0) -> None:
        stop_all([self], timeout)

    def terminate(self) -> bool:
        """SIGTERM to its process group; False when there is none left to stop."""
        try:
            os.killpg(self.pid, signal.SIGTERM)
        except OSError:
            return False
        return True

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.pid, signal.SIGKILL)


def stop_all(processes: Iterable[Process], timeout: float = 3.0) -> None:
    """Stop these together: each is sent SIGTERM, all are given one grace period (not one each, in turn:
    a stack's fifteen processes took 15-26 s to stop one by one), then what is still alive is killed."""
    stopping = [p for p in processes if p.terminate()]
    _wait_gone(stopping, timeout)
    for p in stopping:
        p.kill()
    _wait_gone(stopping, 1.0)  # SIGKILL is not instant: what restarts on the same port waits for it


def _wait_gone(processes: list[Process], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(p.alive() for p in processes):
        time.sleep(0.05)


def reachable(host: str, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections at ``host`` ("name:port")."""
    name, _, port = host.rpartition(":")
    try:
        socket.create_connection((name or "localhost", int(port)), timeout=timeout).close()
        return True
    except (OSError, ValueError):
        return False


def spawn(args: list[str], log_path: Path, env: dict[str, str] | None = None, cwd: str | None = None) -> int:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, start_new_session=True)
    return proc.pid


def wait_http(proc: Process, what: str, log_path: Path, timeout: float = 60.0, path: str = "/") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
            raise EmulatorError(f"{what} exited during start-up; log {log_path}:\n{tail}")
        try:
            requests.get(f"http://{proc.host}{path}", timeout=1)
            return
        except requests.RequestException:
            time.sleep(0.1)
    proc.stop()
    raise EmulatorError(f"{what} not ready on {proc.host} after {timeout:.0f}s; log {log_path}")


# The emulators' heaps. The Firestore emulator keeps every version of every document it was ever sent
# (measured: 5,000 updates of one 2 KB document grow its live heap by 18 MB, as much as 5,000 such
# documents), so its heap grows with all that a stack ever wrote, not with what it holds: an e2e stack
# passed 512 MB after about 10 minutes of the tier, then spent its CPU collecting and answered
# "Java heap space" (queries past their deadline, 503s, tests waiting minutes). 2 GB holds a whole
# e2e tier's writes with room; the JVM takes it only as it needs it.
HEAP = {"firestore": "-Xmx2g", "pubsub": "-Xmx512m"}
# ... but for a stack that writes more than an e2e tier: `make reliability`'s 10,000-message burst with the sweep
# ticking over 10,000 resources filled 2 GB (measured 2026-11-29: old generation full, 160 full collections,
# 840 s of them, every read past its deadline). Its stack asks for this one (``LocalStack(heaps=...)``).
LARGE_HEAP = {"firestore": "-Xmx6g"}
# How their JVMs run: a test stack's emulators live minutes on a machine the tests share. The serial
# collector and the first (quick) compiler only: the same Firestore workload (6,000 writes, 15 sweep
# ticks at 3,000 resources, 750 gets; start-up included) took 29-32 s of CPU with the JVM's defaults
# (G1, both compilers), 22-24 s with these; an idle Firestore emulator 1.3 s a minute instead of 2.1.
JIT_AND_GC = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def java_options(base: str | None, push_timeout: float | None = None, kind: str = "pubsub",
                 heap: str | None = None) -> str:
    """The emulator JVM's options: ``base`` (or ``heap``, else the kind's, ``HEAP``, and ``JIT_AND_GC``), and
    the push request timeout if given."""
    options = base or f"{heap or HEAP[kind]} {JIT_AND_GC}"
    if push_timeout:
        options += f" -Dsun.net.client.defaultReadTimeout={int(push_timeout * 1000)}"
    return options


def start(kind: str, log_dir: Path, port: int | None = None, push_timeout: float | None = None) -> Process:
    """Start emulator ``kind``; ``push_timeout`` (Pub/Sub): seconds after which an unanswered push fails
    and its message is delivered again, as production does at the subscription's ack deadline."""
    proc = launch(kind, log_dir, port, push_timeout)
    wait_ready(proc, kind, log_dir)
    return proc


def launch(kind: str, log_dir: Path, port: int | None = None, push_timeout: float | None = None,
           heap: str | None = None) -> Process:
    """Start emulator ``kind`` without waiting for it (``wait_ready``): the two JVMs boot side by side;
    ``heap``: its JVM's heap option, if not the kind's (``HEAP``)."""
    port = port or free_port()
    env = dict(os.environ)
    env["JAVA_TOOL_OPTIONS"] = java_options(env.get("JAVA_TOOL_OPTIONS"), push_timeout, kind, heap)
    return Process(spawn(launch_command(kind, port), log_dir / f"{kind}-emulator.log", env), port)


def wait_ready(proc: Process, kind: str, log_dir: Path) -> None:
    wait_http(proc, f"{kind} emulator", log_dir / f"{kind}-emulator.log")


# Wiping the emulator takes time with what it holds: after the reliability burst (11,483 messages: their ledger
# entries, resources, transitions) it took more than 30 s on a quiet machine, and the run ended there.
RESET_TIMEOUT = 180.0


def reset_firestore(host: str, project: str) -> None:
    requests.delete(f"http://{host}/emulator/v1/projects/{project}/databases/(default)/documents",
                    timeout=RESET_TIMEOUT).raise_for_status()


def export_firestore(host: str, project: str, directory: Path) -> Path:
    """Export every document of the emulator into ``directory`` in the managed export's format (what
    ``gcloud firestore export`` writes); returns its ``.overall_export_metadata`` file. The rehearsal of
    docs/operations.md#restore: the emulator has no backups or restore (its admin API answers 404)."""
    directory.mkdir(parents=True, exist_ok=True)
    requests.post(f"http://{host}/emulator/v1/projects/{project}:export", timeout=60,
                  json={"database": f"projects/{project}/databases/(default)",
                        "export_directory": str(directory)}).raise_for_status()
    [metadata] = sorted(directory.glob("*/*.overall_export_metadata"))[-1:]
    return metadata


def import_firestore(host: str, project: str, metadata: Path) -> None:
    """Import an export into the running emulator, as ``gcloud firestore import`` does: a document of the
    export overwrites the one of the same path; documents the export does not hold are left alone."""
    requests.post(f"http://{host}/emulator/v1/projects/{project}:import", timeout=60,
                  json={"database": f"projects/{project}/databases/(default)",
                        "export_directory": str(metadata)}).raise_for_status()
