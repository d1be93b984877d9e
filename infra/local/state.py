"""The local stack's state and where it keeps its files, under ``$DCM_STATE_DIR`` (default ``.dcm/`` in the
repository): which processes it started (pids, ports) in ``state.json``, their logs, their keepers' pid
files, the chaos flags, the NATS server's files, the functions' spans. ``up`` reads it to start only what
is not running; ``down`` to stop exactly what ``up`` started.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from infra.local.emulators import Process

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PROJECT = "dcm-local"


def default_state_dir() -> Path:
    return Path(os.environ.get("DCM_STATE_DIR") or REPO_ROOT / ".dcm")


@dataclass(frozen=True)
class StackPaths:
    """Where a stack keeps its files, all under ``state_dir`` (``under``)."""

    state_dir: Path
    state_file: Path  # what the stack started: state.json
    log_dir: Path  # one log per process (or keeper)
    run_dir: Path  # the keepers' pid files (infra/local/supervise.py)
    outage_flag: Path  # chaos: while it exists, the Firestore fault proxy cuts the functions off Firestore
    pubsub_outage_flag: Path  # chaos: while it exists, the NATS ingress's Pub/Sub is cut off
    callback_keys: Path  # the webhook signing secrets' keyring (DCM_CALLBACK_KEYS_FILE; Secret Manager in production)
    nats_dir: Path  # the NATS server's configuration, passwords (0600) and JetStream data
    trace_dir: Path  # the functions' spans, JSON lines (dcm-status trace EVENT_ID)

    @classmethod
    def under(cls, state_dir: Path) -> "StackPaths":
        return cls(state_dir, state_dir / "state.json", state_dir / "logs", state_dir / "run",
                   state_dir / "firestore-outage", state_dir / "pubsub-outage", state_dir / "callback-keys.json",
                   state_dir / "nats", state_dir / "traces")

    def log(self, name: str) -> Path:
        """The log of the process (or keeper) ``name``."""
        return self.log_dir / f"{name}.log"

    def pidfile(self, name: str) -> Path:
        """Where the keeper of ``name`` writes its server's pid."""
        return self.run_dir / f"{name}.pid"


@dataclass
class StackState:
    """What a running stack started (mutable: ``up`` records each process as it starts it)."""

    project: str
    pubsub: dict
    firestore: dict
    functions: dict = field(default_factory=dict)
    providers: list = field(default_factory=list)
    firestore_proxy: dict | None = None
    nats: dict | None = None  # nats-server's keeper (pid) and client port
    nats_http_port: int | None = None  # nats-server's monitoring port (/healthz)
    nats_ingress: dict | None = None  # the NATS ingress worker's keeper (pid) and health port
    pubsub_proxy: dict | None = None  # chaos: between the NATS ingress and Pub/Sub (outage tests)

    def processes(self) -> list[Process]:
        procs = [Process(**self.pubsub), Process(**self.firestore)]
        procs += [Process(**f) for f in self.functions.values()]
        procs += [Process(**p) for p in (self.firestore_proxy, self.nats, self.nats_ingress, self.pubsub_proxy) if p]
        return procs

    @property
    def nats_url(self) -> str | None:
        return f"nats://127.0.0.1:{self.nats['port']}" if self.nats else None

    @property
    def pubsub_host(self) -> str:
        return Process(**self.pubsub).host

    @property
    def firestore_host(self) -> str:
        return Process(**self.firestore).host

    @property
    def functions_firestore_host(self) -> str:
        """Where the functions reach Firestore: through the fault proxy when there is one."""
        return Process(**self.firestore_proxy).host if self.firestore_proxy else self.firestore_host


def load_state(paths: StackPaths) -> StackState | None:
    """The state a stack saved, if any."""
    if not paths.state_file.exists():
        return None
    return StackState(**json.loads(paths.state_file.read_text()))


def save_state(paths: StackPaths, state: StackState) -> None:
    paths.state_dir.mkdir(parents=True, exist_ok=True)
    paths.state_file.write_text(json.dumps(asdict(state), indent=2))
