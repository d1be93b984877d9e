"""The local stack: emulators, one functions-framework server per function,
and the topology of ``infra/topology.yaml`` created on the Pub/Sub emulator.

Wiring is the production wiring: push subscriptions to each function with
``/projects/P/topics/T`` in the endpoint path, retry and dead-letter policies,
ordering where declared. State (pids, ports) lives in ``$DCM_STATE_DIR``
(default ``.dcm/`` in the repository), so ``up`` is idempotent and ``down``
stops exactly what ``up`` started.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1
from google.protobuf import duration_pb2

from infra import emulators
from infra.emulators import Process
from infra.topology import SubscriptionSpec, Topology, load

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PROJECT = "dcm-local"


_OUR_COMMANDS = (b"pubsub-emulator", b"firestore-emulator", b"functions-framework", b"infra.faultproxy")


def _is_ours(pid: int) -> bool:
    """Whether pid is one of the processes a stack starts (checked on its command line)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return any(marker in cmdline for marker in _OUR_COMMANDS)


def default_state_dir() -> Path:
    return Path(os.environ.get("DCM_STATE_DIR") or REPO_ROOT / ".dcm")


@dataclass
class StackState:
    project: str
    pubsub: dict
    firestore: dict
    functions: dict = field(default_factory=dict)
    providers: list = field(default_factory=list)
    firestore_proxy: dict | None = None

    def processes(self) -> list[Process]:
        procs = [Process(**self.pubsub), Process(**self.firestore)]
        procs += [Process(**f) for f in self.functions.values()]
        if self.firestore_proxy:
            procs.append(Process(**self.firestore_proxy))
        return procs

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


# Message ordering as the local stack creates it: off, on the emulator.
#
# The Pub/Sub emulator has a bug production Pub/Sub does not: when it dead-letters a message from a
# subscription with ordering enabled (a poison message, a Firestore outage longer than the retry
# schedule), it throws in OrderedMessageBacklog and that subscription never pushes again, silently.
# Ordering is an optimisation here, not a guarantee anything relies on: upsert orders by sequence,
# event time and publication, and its writes are conditional, so a resource ends right in any
# delivery order (tests/e2e). Production keeps the declared ordering (one in-flight update per
# resource, fewer write conflicts); the local stack trades it for a pipeline that survives a poison
# message as production does (tests/e2e/test_reliability.py).
EMULATOR_MESSAGE_ORDERING = False


class LocalStack:
    def __init__(self, state_dir: Path | None = None, project: str = DEFAULT_PROJECT):
        self.state_dir = state_dir or default_state_dir()
        self.project = project
        self.state_file = self.state_dir / "state.json"
        self.log_dir = self.state_dir / "logs"
        self.outage_flag = self.state_dir / "firestore-outage"

    # ---- state -------------------------------------------------------------
    def load_state(self) -> StackState | None:
        if not self.state_file.exists():
            return None
        return StackState(**json.loads(self.state_file.read_text()))

    def _save(self, state: StackState) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps(asdict(state), indent=2))

    def running(self) -> StackState | None:
        """The running stack, if every process is alive and it runs every declared function."""
        state = self.load_state()
        if state and all(p.alive() for p in state.processes()) and set(state.functions) == set(load().functions):
            return state
        return None

    def topology(self, state: StackState) -> Topology:
        return load(state.providers)

    def client_env(self, state: StackState) -> dict[str, str]:
        """Environment for a client of this stack (CLI, tests, providers)."""
        return {"DCM_PROJECT": state.project, "GOOGLE_CLOUD_PROJECT": state.project,
                "PUBSUB_EMULATOR_HOST": state.pubsub_host, "FIRESTORE_EMULATOR_HOST": state.firestore_host,
                **self.topology(state).env()}

    # ---- up / down -----------------------------------------------------------
    def up(self, providers: Iterable[str] | None = None, chaos: bool = False) -> StackState:
        wanted = list(providers) if providers else list(load().providers)
        state = self.running()
        if state is None:
            self.down()
            state = self._start(wanted, chaos)
        else:
            state.providers = sorted(set(state.providers) | set(wanted))
            self._save(state)
        self.apply_topology(state)
        return state

    def _start(self, providers: list[str], chaos: bool) -> StackState:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.outage_flag.unlink(missing_ok=True)
        started: list[Process] = []
        try:
            pubsub = emulators.start("pubsub", self.log_dir)
            started.append(pubsub)
            firestore = emulators.start("firestore", self.log_dir)
            started.append(firestore)
            state = StackState(self.project, asdict(pubsub), asdict(firestore), providers=sorted(set(providers)))
            if chaos:
                proxy = self._start_proxy(firestore)
                started.append(proxy)
                state.firestore_proxy = asdict(proxy)
            self._save(state)
            for name in load(providers).functions:
                proc = self._start_function(name, state)
                started.append(proc)
                state.functions[name] = asdict(proc)
                self._save(state)
            for name, f in state.functions.items():
                log_path = self.log_dir / f"{name}.log"
                emulators.wait_http(Process(**f), f"function {name}", log_path)
            return state
        except BaseException:
            for p in started:
                p.stop()
            self.state_file.unlink(missing_ok=True)
            raise

    def _start_proxy(self, firestore: Process) -> Process:
        port = emulators.free_port()
        log_path = self.log_dir / "firestore-proxy.log"
        pid = emulators.spawn([sys.executable, "-m", "infra.faultproxy", "--listen", str(port),
                               "--target", firestore.host, "--flag", str(self.outage_flag)],
                              log_path, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, cwd=str(REPO_ROOT))
        proc = Process(pid, port)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                import socket
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return proc
            except OSError:
                time.sleep(0.05)
        raise emulators.EmulatorError("firestore fault proxy did not start")

    def function_env(self, state: StackState) -> dict[str, str]:
        passed = ("DCM_SCHEMAS_DIR", "DCM_LEDGER_TTL_DAYS", "DCM_MAX_EVENT_BYTES", "DCM_DEADLETTER_TTL_DAYS")
        env = {k: v for k, v in os.environ.items()
               if k in passed or not k.startswith(("DCM_", "PUBSUB_", "FIRESTORE_"))}
        env.update(self.client_env(state))
        env.update({
            "FIRESTORE_EMULATOR_HOST": state.functions_firestore_host,
            "DCM_LOCAL_MODE": "1",  # no OIDC tokens on the emulator; never set in production
            "PYTHONPATH": str(REPO_ROOT),
            "PYTHONUNBUFFERED": "1",
            "THREADS": os.environ.get("DCM_FUNCTION_THREADS", "16"),
        })
        return env

    def _start_function(self, name: str, state: StackState, port: int | None = None) -> Process:
        port = port or emulators.free_port()
        ff = Path(sys.executable).parent / "functions-framework"
        cmd = [str(ff) if ff.exists() else "functions-framework", "--target", name,
               "--source", str(REPO_ROOT / "functions" / name / "main.py"),
               "--signature-type", "cloudevent", "--host", "127.0.0.1", "--port", str(port)]
        pid = emulators.spawn(cmd, self.log_dir / f"{name}.log", env=self.function_env(state),
                              cwd=str(REPO_ROOT))
        return Process(pid, port)

    def restart_function(self, state: StackState, name: str) -> None:
        """Restart one function server on its port (e.g. to load a newly added schema)."""
        Process(**state.functions[name]).stop()
        proc = self._start_function(name, state, port=state.functions[name]["port"])
        log_path = self.log_dir / f"{name}.log"
        state.functions[name] = asdict(proc)
        self._save(state)
        emulators.wait_http(proc, f"function {name}", log_path)

    def down(self) -> bool:
        state = self.load_state()
        if state is None:
            return False
        for p in reversed(state.processes()):
            if _is_ours(p.pid):  # a stale state file may name pids the system has reused since
                p.stop()
        self.state_file.unlink(missing_ok=True)
        self.outage_flag.unlink(missing_ok=True)
        return True

    # ---- topology ------------------------------------------------------------
    def push_endpoint(self, state: StackState, spec: SubscriptionSpec) -> str:
        port = state.functions[spec.push]["port"]
        return f"http://127.0.0.1:{port}/projects/{state.project}/topics/{spec.topic}"

    def apply_topology(self, state: StackState) -> Topology:
        """Create every topic and subscription the declaration names (idempotent)."""
        topo = self.topology(state)
        os.environ["PUBSUB_EMULATOR_HOST"] = state.pubsub_host
        publisher = pubsub_v1.PublisherClient()
        subscriber = pubsub_v1.SubscriberClient()
        try:
            for t in topo.topics:
                try:
                    publisher.create_topic(name=publisher.topic_path(state.project, t.name))
                except gexc.AlreadyExists:
                    pass
            dlq_path = publisher.topic_path(state.project, topo.deadletter_topic)
            for s in topo.subscriptions:
                request = {
                    "name": subscriber.subscription_path(state.project, s.name),
                    "topic": publisher.topic_path(state.project, s.topic),
                    "ack_deadline_seconds": s.ack_deadline_seconds,
                    "enable_message_ordering": s.enable_message_ordering and EMULATOR_MESSAGE_ORDERING,
                    "message_retention_duration": duration_pb2.Duration(seconds=s.message_retention),
                    "retry_policy": {"minimum_backoff": duration_pb2.Duration(seconds=s.minimum_backoff),
                                     "maximum_backoff": duration_pb2.Duration(seconds=s.maximum_backoff)},
                }
                if s.push:
                    request["push_config"] = {"push_endpoint": self.push_endpoint(state, s)}
                if s.dead_letter:
                    request["dead_letter_policy"] = {"dead_letter_topic": dlq_path,
                                                     "max_delivery_attempts": s.max_delivery_attempts}
                if s.filter:
                    request["filter"] = s.filter
                try:
                    subscriber.create_subscription(request=request)
                except gexc.AlreadyExists:
                    pass
        finally:
            subscriber.close()
        return topo

    def add_provider(self, name: str) -> StackState:
        state = self.running()
        if state is None:
            raise RuntimeError("the local stack is not running: dcm-status up")
        if name not in state.providers:
            state.providers = sorted(set(state.providers) | {name})
            self._save(state)
        self.apply_topology(state)
        return state

    # ---- chaos ---------------------------------------------------------------
    def set_firestore_outage(self, down: bool) -> None:
        if down:
            self.outage_flag.touch()
        else:
            self.outage_flag.unlink(missing_ok=True)
