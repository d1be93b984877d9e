"""The local stack: emulators, one functions-framework server per function,
and the topology of ``infra/topology.yaml`` created on the Pub/Sub emulator.

Wiring is the production wiring: push subscriptions to each function with
``/projects/P/topics/T`` in the endpoint path and dead-letter policies; where
the emulator has a delivery bug (ordering, back-off) the stack declares the
nearest thing that works and says why (``emulator_delivery_attempts``).
State (pids, ports) lives in ``$DCM_STATE_DIR`` (default ``.dcm/`` in the
repository), so ``up`` is idempotent and ``down`` stops exactly what ``up``
started.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Mapping

import requests
from google.api_core import exceptions as gexc

from infra import nats_accounts
from infra.local import emulators, natsserver
from infra.local.emulators import Process
from infra.topology import SubscriptionSpec, Topology, load, read

if TYPE_CHECKING:  # Pub/Sub's client and the keyring's cipher are loaded by the steps that use them
    from google.cloud import pubsub_v1

    from shared.runtime import secretbox

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PROJECT = "dcm-local"
# What a local stack runs differently from production, unless the shell that starts it says otherwise.
LOCAL_SETTINGS = {
    # the aggregates' snapshots (shared/state/snapshots.py, docs/api.md): the summary every 30 s (its ~60
    # counts: 2 s of emulator CPU at 3,000 resources), the accounting every 5 minutes (counting the ledger
    # took the emulator 5 s of CPU a tick on a test stack: `dcm-status stats` counts live whenever asked)
    "DCM_SUMMARY_EVERY_SECONDS": "30",
    "DCM_STATS_EVERY_SECONDS": "300",
    # the freshness deadline's index ranges (production: 360, docs/scale.md): one. The emulator scans the
    # collection once for each value of an "in": at 3,000 resources a 5 s tick's stale query cost 0.9-1.2 s of
    # its CPU with 30 ranges, 0.22 s with one. The ranges' merge is tested at 360: tests/functional/test_sweep.py
    "DCM_STALE_SHARDS": "1",
    # upsert reads the callbacks' summary on every change (production caches it 10 s): a callback is sent
    # the very next change after its registration, as the e2e tests expect (docs/callbacks.md)
    "DCM_CALLBACK_VIEW_TTL": "0",
    # the rate card /v1/usage may price with (?rates=example): the repository's example card
    "DCM_RATE_CARDS": f"example={REPO_ROOT / 'examples' / 'rates.yaml'}",
}


_OUR_COMMANDS = (b"pubsub-emulator", b"firestore-emulator", b"functions-framework", b"infra.local.faultproxy",
                 b"infra.local.supervise", b"nats-server", b"functions.nats_ingress")


@contextlib.contextmanager
def _admin(state: StackState) -> Iterator[tuple[pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient]]:
    """Clients of the stack's Pub/Sub emulator, to declare or remove topics and subscriptions."""
    from google.cloud import pubsub_v1

    os.environ["PUBSUB_EMULATOR_HOST"] = state.pubsub_host
    subscriber = pubsub_v1.SubscriberClient()
    try:
        yield pubsub_v1.PublisherClient(), subscriber
    finally:
        subscriber.close()


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


# How the local stack declares delivery on the Pub/Sub emulator, and why it differs from production.
#
# The emulator has two delivery bugs production Pub/Sub does not (measured 2026-11-22, emulator 0.8.20;
# docs/local-stack.md):
# 1. Dead-lettering from a subscription with message ordering enabled throws in OrderedMessageBacklog
#    and that subscription never pushes again, silently.
# 2. With a retry policy (exponential back-off), once more than one message is failing, every one of
#    them is pushed 2-3 times (at ~0 s, ~1 s, ~4 s) and then never again: neither redelivered nor
#    dead-lettered. A Firestore outage longer than a few seconds, or a function server that dies
#    mid-burst, strands every update in flight. Without a retry policy the emulator redelivers a failed
#    push after ~1 s, counts every attempt and dead-letters at max_delivery_attempts, for 300 failing
#    messages as for one (500s and refused connections alike).
# So, on the emulator only: ordering off (upsert orders by sequence, event time and publication, and its
# writes are conditional, so a resource ends right in any delivery order: tests/e2e), no retry policy,
# and enough ~1 s redeliveries to span the declared back-off schedule (1 s -> 10 s over 5 attempts is a
# 15 s window: 16 attempts). Production (Terraform) keeps the declaration as written.
EMULATOR_MESSAGE_ORDERING = False
EMULATOR_REDELIVERY_SECONDS = 1.0
PUBSUB_MAX_DELIVERY_ATTEMPTS = 100  # Pub/Sub's documented upper bound


def backoff_window(spec: SubscriptionSpec) -> float:
    """Seconds between a message's first and last delivery under the declared exponential back-off."""
    delay, total = float(spec.minimum_backoff), 0.0
    for _ in range(spec.max_delivery_attempts - 1):
        total += min(delay, spec.maximum_backoff)
        delay *= 2
    return total


def emulator_delivery_attempts(spec: SubscriptionSpec) -> int:
    """The attempts whose ~1 s redeliveries span the same window as the declared schedule (never fewer)."""
    spanning = 1 + math.ceil(backoff_window(spec) / EMULATOR_REDELIVERY_SECONDS)
    return min(PUBSUB_MAX_DELIVERY_ATTEMPTS, max(spec.max_delivery_attempts, spanning))


def push_timeout(topology: Topology) -> int:
    """Seconds the emulator waits for a push's answer before it fails it and delivers the message again:
    production's push request timeout, the subscription's ack deadline. The emulator has one for all (a
    JVM setting, infra/local/emulators.py): the longest push subscription's, so no push production would wait
    for is cut sooner."""
    return max((s.ack_deadline_seconds for s in topology.subscriptions if s.push), default=60)


class Condition(enum.StrEnum):
    UP = "up"
    DOWN = "down"
    RESTARTING = "restarting"  # its keeper is alive, its server not answering (yet)
    UNSUPERVISED = "unsupervised"  # its server answers, its keeper is gone: nothing would restart it
    OUTAGE = "outage (chaos)"  # the Firestore fault proxy is cutting Firestore off


@dataclass(frozen=True)
class Health:
    component: str
    where: str
    status: Condition
    restarts: int = 0
    detail: str = ""  # the NATS ingress: its lag (pending messages) and last error


def production_only(topology: Topology) -> list[str]:
    """What the declaration deploys in production only and this stack skips, one line each (`dcm-status up`)."""
    return [f"export {e.name}: {e.topic} -> BigQuery {e.dataset}.{e.table}: production only, skipped here (the "
            "emulator has no BigQuery subscriptions; terraform/exports.tf)" for e in topology.exports]


def answers_http(host: str, timeout: float = 2.0) -> bool:
    """Whether something answers HTTP at ``host`` (host:port), whatever the status."""
    try:
        requests.get(f"http://{host}/", timeout=timeout)
        return True
    except requests.RequestException:
        return False


def _probe(proc: Process) -> Condition:
    """UP when the process is alive and answers HTTP on its port."""
    return Condition.UP if proc.alive() and answers_http(proc.host) else Condition.DOWN


class LocalStack:
    def __init__(self, state_dir: Path | None = None, project: str = DEFAULT_PROJECT):
        self.state_dir = state_dir or default_state_dir()
        self.project = project
        self.state_file = self.state_dir / "state.json"
        self.log_dir = self.state_dir / "logs"
        self.outage_flag = self.state_dir / "firestore-outage"
        # the webhook signing secrets' keyring (DCM_CALLBACK_KEYS_FILE; Secret Manager in production)
        self.callback_keys = self.state_dir / "callback-keys.json"
        self.nats_dir = self.state_dir / "nats"  # the server's configuration, passwords (0600), JetStream data
        self.pubsub_outage_flag = self.state_dir / "pubsub-outage"  # chaos: the NATS ingress's Pub/Sub cut off
        self.trace_dir = self.state_dir / "traces"  # the functions' spans, JSON lines (dcm-status trace EVENT_ID)
        self.repo_root = REPO_ROOT
        self._providers_changed = False  # by this `up`: the NATS ingress is started again to know them
        self._ingress_stale = False  # its environment changed (a Pub/Sub fault proxy): started again

    def callback_keys_source(self) -> secretbox.KeySource:
        """The keyring the stack's notify and api seal and open signing secrets with (made if missing)."""
        from shared.runtime import secretbox

        return secretbox.source(None, str(self.callback_keys_file()), True)

    def callback_keys_file(self) -> Path:
        """The keyring's file, mode 0600, made once."""
        from shared.runtime import secretbox

        return secretbox.ensure_file(self.callback_keys)

    # ---- state -------------------------------------------------------------
    def load_state(self) -> StackState | None:
        if not self.state_file.exists():
            return None
        return StackState(**json.loads(self.state_file.read_text()))

    def _save(self, state: StackState) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps(asdict(state), indent=2))

    def running(self) -> StackState | None:
        """The running stack, if both emulators are alive (its data is there; a function may be down)."""
        state = self.load_state()
        if state and Process(**state.pubsub).alive() and Process(**state.firestore).alive():
            return state
        return None

    def pidfile(self, name: str) -> Path:
        return self.state_dir / "run" / f"{name}.pid"

    def server_pid(self, name: str) -> int | None:
        """The pid of function `name`'s server (its keeper restarts it under another pid)."""
        try:
            return int(self.pidfile(name).read_text())
        except (OSError, ValueError):
            return None

    def health(self, state: StackState) -> list[Health]:
        """Every process of the stack: alive, answering, restarted how often."""
        rows = [Health("pubsub-emulator", state.pubsub_host, _probe(Process(**state.pubsub))),
                Health("firestore-emulator", state.firestore_host, _probe(Process(**state.firestore)))]
        if state.firestore_proxy:
            proxy = Process(**state.firestore_proxy)
            status = ((Condition.OUTAGE if self.firestore_outage() else Condition.UP) if proxy.alive()
                      else Condition.DOWN)
            rows.append(Health("firestore-proxy", proxy.host, status))
        return rows + self.function_health(state) + self.nats_health(state)

    def function_health(self, state: StackState) -> list[Health]:
        rows = []
        for name in self.topology(state).functions:
            f = state.functions.get(name)
            if f is None:
                rows.append(Health(f"function {name}", "-", Condition.DOWN))
                continue
            keeper = Process(**f)
            if keeper.alive():
                status = Condition.UP if answers_http(keeper.host) else Condition.RESTARTING
            else:
                status = Condition.UNSUPERVISED if answers_http(keeper.host) else Condition.DOWN
            rows.append(Health(f"function {name}", f"http://{keeper.host}", status, self._restarts(name)))
        return rows

    def nats_health(self, state: StackState) -> list[Health]:
        """nats-server and the NATS ingress: alive, answering, restarted how often; the ingress's lag."""
        if not state.nats:
            return []
        server = self._kept_health(natsserver.NATS_SERVER, state.nats_url, state.nats,
                                   f"127.0.0.1:{state.nats_http_port}")
        if not state.nats_ingress:
            return [server, Health(natsserver.NATS_INGRESS, "-", Condition.DOWN)]
        host = Process(**state.nats_ingress).host
        ingress = self._kept_health(natsserver.NATS_INGRESS, f"http://{host}/healthz", state.nats_ingress, host)
        if ingress.status is Condition.UP:
            ingress = dataclasses.replace(ingress, detail=natsserver.describe(natsserver.ingress_report(host)))
        return [server, ingress]

    def _kept_health(self, name: str, where: str, keeper: dict, probe: str) -> Health:
        """A process under a keeper: UP (kept, answering), RESTARTING, UNSUPERVISED (answering, no keeper), DOWN."""
        answers = answers_http(probe)
        if Process(**keeper).alive():
            status = Condition.UP if answers else Condition.RESTARTING
        else:
            status = Condition.UNSUPERVISED if answers else Condition.DOWN
        return Health(name, where, status, self._restarts(name))

    def nats_credentials(self, state: StackState, provider: str) -> nats_accounts.Identity | None:
        """The NATS identity of ``provider`` on this stack (None: not a provider of it)."""
        if provider not in state.providers:
            return None
        return natsserver.credentials(self, state).provider(provider)

    def unwell_functions(self, state: StackState) -> list[Health]:
        """The functions not up and supervised."""
        return [h for h in self.function_health(state) if h.status is not Condition.UP]

    def _restarts(self, name: str) -> int:
        try:
            return int(self.pidfile(name).with_suffix(".restarts").read_text())
        except (OSError, ValueError):
            return 0

    def topology(self, state: StackState) -> Topology:
        return load(state.providers)

    def client_env(self, state: StackState) -> dict[str, str]:
        """Environment for a client of this stack (CLI, tests, providers)."""
        return {"DCM_PROJECT": state.project, "GOOGLE_CLOUD_PROJECT": state.project,
                "PUBSUB_EMULATOR_HOST": state.pubsub_host, "FIRESTORE_EMULATOR_HOST": state.firestore_host,
                **self.topology(state).env()}

    # ---- up / down -----------------------------------------------------------
    def up(self, providers: Iterable[str] | None = None, chaos: bool = False) -> StackState:
        """Start what is not running; restart only what died (the emulators' data survives a dead function)."""
        wanted = list(providers) if providers else list(load().providers)
        state = self.running()
        if state is None:
            self.down()
            state = self._start(wanted, chaos)
        else:
            self._providers_changed = bool(set(wanted) - set(state.providers))
            state.providers = sorted(set(state.providers) | set(wanted))
            self._save(state)
            if chaos and not state.firestore_proxy:  # the functions move behind a proxy; the data stays
                state.firestore_proxy = asdict(self._start_proxy(Process(**state.firestore)))
                self._save(state)
                self.restart_functions(state, list(state.functions))
            if chaos and state.nats and not state.pubsub_proxy:  # the NATS ingress moves behind one to Pub/Sub
                state.pubsub_proxy = asdict(self._start_proxy(Process(**state.pubsub), flag=self.pubsub_outage_flag,
                                                              name="pubsub-proxy"))
                self._save(state)
                self._ingress_stale = True  # started again, with the proxy in its environment
            self._revive(state)
        self.apply_topology(state)
        return state

    def _revive(self, state: StackState) -> None:
        if state.firestore_proxy and not Process(**state.firestore_proxy).alive():
            proxy = self._start_proxy(Process(**state.firestore), port=state.firestore_proxy["port"])
            state.firestore_proxy = asdict(proxy)
            self._save(state)
        if state.pubsub_proxy and not Process(**state.pubsub_proxy).alive():
            state.pubsub_proxy = asdict(self._start_proxy(Process(**state.pubsub), port=state.pubsub_proxy["port"],
                                                          flag=self.pubsub_outage_flag, name="pubsub-proxy"))
            self._save(state)
        self._revive_nats(state)
        for name in load(state.providers).functions:
            f = state.functions.get(name)
            if f is None or not Process(**f).alive():
                if f is not None:
                    Process(**f).stop()  # its server may outlive a killed keeper: stop the whole group
                self._launch(name, state, port=f["port"] if f else None)

    def _revive_nats(self, state: StackState) -> None:
        """nats-server and the ingress, when the topology declares NATS: started if missing or dead."""
        if self.topology(state).nats is None:
            return
        if not state.nats or not Process(**state.nats).alive():
            if state.nats:
                Process(**state.nats).stop()
            natsserver.start_server(self, state, fresh=not state.nats)
            self._save(state)
        elif self._providers_changed:
            natsserver.reload(self, state)  # providers added by this `up`
        natsserver.declare_stream(self, state)
        if not state.nats_ingress or not Process(**state.nats_ingress).alive() or self._providers_changed \
                or self._ingress_stale:
            natsserver.start_ingress(self, state)
            self._save(state)

    def _start(self, providers: list[str], chaos: bool) -> StackState:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.outage_flag.unlink(missing_ok=True)
        self.pubsub_outage_flag.unlink(missing_ok=True)
        started: list[Process] = []
        try:
            pubsub = emulators.launch("pubsub", self.log_dir, push_timeout=push_timeout(load(providers)))
            started.append(pubsub)
            firestore = emulators.launch("firestore", self.log_dir)
            started.append(firestore)
            emulators.wait_ready(pubsub, "pubsub", self.log_dir)
            emulators.wait_ready(firestore, "firestore", self.log_dir)
            state = StackState(self.project, asdict(pubsub), asdict(firestore), providers=sorted(set(providers)))
            if chaos:
                proxy = self._start_proxy(firestore)
                started.append(proxy)
                state.firestore_proxy = asdict(proxy)
                if load(providers).nats:
                    pubsub_proxy = self._start_proxy(pubsub, flag=self.pubsub_outage_flag, name="pubsub-proxy")
                    started.append(pubsub_proxy)
                    state.pubsub_proxy = asdict(pubsub_proxy)
            self._save(state)
            for name in load(providers).functions:
                proc = self._start_function(name, state)
                started.append(proc)
                state.functions[name] = asdict(proc)
                self._save(state)
            for name, f in state.functions.items():
                emulators.wait_http(Process(**f), f"function {name}", self.log_dir / f"{name}.log")
            self._providers_changed = False
            self._revive_nats(state)
            return state
        except BaseException:
            emulators.stop_all(started + [Process(**p) for p in (state.nats, state.nats_ingress) if p and p["pid"]])
            self.state_file.unlink(missing_ok=True)
            raise

    def _start_proxy(self, firestore: Process, port: int | None = None, flag: Path | None = None,
                     name: str = "firestore-proxy") -> Process:
        """A fault proxy in front of ``firestore`` (or Pub/Sub, for the NATS ingress), cut while ``flag`` exists."""
        port = port or emulators.free_port()
        log_path = self.log_dir / f"{name}.log"
        pid = emulators.spawn([sys.executable, "-m", "infra.local.faultproxy", "--listen", str(port),
                               "--target", firestore.host, "--flag", str(flag or self.outage_flag)],
                              log_path, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, cwd=str(REPO_ROOT))
        proc = Process(pid, port)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if emulators.reachable(proc.host, timeout=0.5):
                return proc
            time.sleep(0.05)
        raise emulators.EmulatorError(f"{name} (fault proxy) did not start")

    def function_env(self, state: StackState) -> dict[str, str]:
        passed = ("DCM_SCHEMAS_DIR", "DCM_LEDGER_TTL_DAYS", "DCM_MAX_EVENT_BYTES", "DCM_DEADLETTER_TTL_DAYS",
                  "DCM_FEED_SETTLE_SECONDS", "DCM_STREAM_SECONDS",
                  "DCM_HOOK_TIMEOUT_SECONDS", "DCM_CALLBACK_CONCURRENCY", "DCM_TRACE_SAMPLE_RATIO")
        env = {k: v for k, v in os.environ.items()
               if k in passed or not k.startswith(("DCM_", "PUBSUB_", "FIRESTORE_"))}
        env.update(self.client_env(state))
        # topology.yaml's provider profiles and freshness, unless this shell says otherwise (e.g. a
        # provider with a deadline of seconds, to watch NotReported locally: docs/lifecycle.md)
        env.update({k: os.environ[k] for k in ("DCM_PROVIDER_PROFILES", "DCM_FRESHNESS") if k in os.environ})
        env.update({k: os.environ.get(k) or local for k, local in LOCAL_SETTINGS.items()})
        env.update({
            "FIRESTORE_EMULATOR_HOST": state.functions_firestore_host,
            "DCM_LOCAL_MODE": "1",  # no OIDC tokens on the emulator; never set in production
            "DCM_CALLBACK_KEYS_FILE": str(self.callback_keys_file()),
            "PYTHONPATH": str(REPO_ROOT),
            "PYTHONUNBUFFERED": "1",
            "THREADS": os.environ.get("DCM_FUNCTION_THREADS", "16"),
            # every span to a file of its process under the state directory (docs/tracing.md), exported in
            # batches every 200 ms (OpenTelemetry's own setting; 5 s by default): `dcm-status trace` soon after
            "DCM_TRACE_EXPORTER": "file",
            "DCM_TRACE_DIR": str(self.trace_dir),
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        })
        return env

    def _start_function(self, name: str, state: StackState, port: int | None = None, source: Path | None = None,
                        extra_env: Mapping[str, str] | None = None) -> Process:
        """Start function `name`'s server under its keeper (infra/local/supervise.py), which restarts it on its port.
        ``source``: a module other than functions/NAME/main.py defining ``name`` (the bench's minimal handlers)."""
        port = port or emulators.free_port()
        ff = Path(sys.executable).parent / "functions-framework"
        signature = "http" if name in self.topology(state).http_functions else "cloudevent"
        server = [str(ff) if ff.exists() else "functions-framework", "--target", name,
                  "--source", str(source or REPO_ROOT / "functions" / name / "main.py"),
                  "--signature-type", signature, "--host", "127.0.0.1", "--port", str(port)]
        keeper = self.keeper_command(name, [])[:-1]  # the options, then the tick's, then "--" and the server
        doc = read()
        spec = doc["functions"].get(name) or {}
        if spec.get("schedule"):  # Cloud Scheduler's job in production; the keeper's timer here
            key = next(s["topic"] for s in doc["subscriptions"] if s.get("push") == name)  # the topic it is pushed
            topic = f"projects/{state.project}/topics/{self.topology(state).topic(key)}"
            keeper += ["--tick", topic, "--every", str(spec.get("tick_seconds", 60))]
        keeper += ["--", *server]
        env = {**self.function_env(state), **(extra_env or {})}
        pid = emulators.spawn(keeper, self.log_dir / f"{name}.log", env=env, cwd=str(REPO_ROOT))
        return Process(pid, port)

    def start_extra_function(self, name: str, state: StackState, source: Path,
                             extra_env: Mapping[str, str]) -> Process:
        """A server for function ``name`` of ``source``, served as the stack serves its own (same keeper,
        environment and gunicorn settings), ready; the caller stops it (benchmarks/pipeline.py)."""
        proc = self._start_function(name, state, source=source, extra_env=extra_env)
        emulators.wait_http(proc, f"function {name}", self.log_dir / f"{name}.log")
        return proc

    def keeper_command(self, name: str, command: list[str]) -> list[str]:
        """``command`` under a keeper (infra/local/supervise.py) that restarts it when it dies, its pid in a file."""
        pidfile = self.pidfile(name)
        pidfile.parent.mkdir(parents=True, exist_ok=True)
        pidfile.with_suffix(".restarts").unlink(missing_ok=True)
        return [sys.executable, "-m", "infra.local.supervise", "--name", name, "--pidfile", str(pidfile), "--",
                *command]

    def _launch(self, name: str, state: StackState, port: int | None = None) -> None:
        proc = self._start_function(name, state, port=port)
        state.functions[name] = asdict(proc)
        self._save(state)
        emulators.wait_http(proc, f"function {name}", self.log_dir / f"{name}.log")

    def restart_function(self, state: StackState, name: str) -> None:
        """Restart one function server on its port (e.g. to load a newly added schema)."""
        self.restart_functions(state, [name])

    def restart_functions(self, state: StackState, names: list[str]) -> None:
        """Restart these function servers on their ports, side by side: all stopped together, all started,
        then each waited for (the servers import in parallel rather than one after another)."""
        emulators.stop_all([Process(**state.functions[name]) for name in names])
        for name in names:
            proc = self._start_function(name, state, port=state.functions[name]["port"])
            state.functions[name] = asdict(proc)
            self._save(state)
        for name in names:
            emulators.wait_http(Process(**state.functions[name]), f"function {name}", self.log_dir / f"{name}.log")

    def down(self) -> bool:
        state = self.load_state()
        if state is None:
            return False
        # a stale state file may name pids the system has reused since
        emulators.stop_all(p for p in state.processes() if _is_ours(p.pid))
        self.state_file.unlink(missing_ok=True)
        self.outage_flag.unlink(missing_ok=True)
        self.pubsub_outage_flag.unlink(missing_ok=True)
        return True

    # ---- topology ------------------------------------------------------------
    def function_url(self, state: StackState, name: str) -> str:
        """Where a function answers HTTP (the api: the dashboard and the status API)."""
        return f"http://127.0.0.1:{state.functions[name]['port']}/"

    def push_endpoint(self, state: StackState, spec: SubscriptionSpec) -> str:
        port = state.functions[spec.push]["port"]
        return f"http://127.0.0.1:{port}/projects/{state.project}/topics/{spec.topic}"

    def apply_topology(self, state: StackState) -> Topology:
        """Create every topic and subscription the declaration names (idempotent)."""
        from google.protobuf import duration_pb2

        topo = self.topology(state)
        with _admin(state) as (publisher, subscriber):
            for t in topo.topics:
                with contextlib.suppress(gexc.AlreadyExists):
                    publisher.create_topic(name=publisher.topic_path(state.project, t.name))
            for s in topo.subscriptions:
                request = {
                    "name": subscriber.subscription_path(state.project, s.name),
                    "topic": publisher.topic_path(state.project, s.topic),
                    "ack_deadline_seconds": s.ack_deadline_seconds,
                    "enable_message_ordering": s.enable_message_ordering and EMULATOR_MESSAGE_ORDERING,
                    "message_retention_duration": duration_pb2.Duration(seconds=s.message_retention),
                    # no retry_policy: the emulator strands back-off redeliveries (above)
                }
                if s.push:
                    request["push_config"] = {"push_endpoint": self.push_endpoint(state, s)}
                if s.dead_letter_topic:
                    request["dead_letter_policy"] = {"dead_letter_topic": publisher.topic_path(state.project,
                                                                                               s.dead_letter_topic),
                                                     "max_delivery_attempts": emulator_delivery_attempts(s)}
                if s.filter:
                    request["filter"] = s.filter
                with contextlib.suppress(gexc.AlreadyExists):
                    subscriber.create_subscription(request=request)
        return topo

    def purge(self, state: StackState) -> int:
        """Drop every subscription's backlog: delete the subscriptions and declare them again. What a
        function is handling at that moment still ends; returns how many subscriptions were purged."""
        topo = self.topology(state)
        with _admin(state) as (_, subscriber):
            for s in topo.subscriptions:
                with contextlib.suppress(gexc.NotFound):
                    subscriber.delete_subscription(subscription=subscriber.subscription_path(state.project, s.name))
        self.apply_topology(state)
        return len(topo.subscriptions)

    def add_provider(self, name: str) -> StackState:
        state = self.running()
        if state is None:
            raise RuntimeError("the local stack is not running: dcm-status up")
        if name not in state.providers:
            state.providers = sorted(set(state.providers) | {name})
            self._save(state)
        self.apply_topology(state)
        if state.nats:  # its NATS identity, the server restarted with it, the ingress told of one more provider
            natsserver.reload(self, state)
            natsserver.declare_stream(self, state)  # its stream, before its first publish (a stream per provider)
            natsserver.start_ingress(self, state)
            self._save(state)
        return state

    # ---- chaos ---------------------------------------------------------------
    def outage_beyond_retries(self, state: StackState) -> float:
        """Seconds of Firestore outage that outlast upsert's whole local delivery schedule: its attempts
        ~1 s apart (failing fast, shared/runtime/firestore.py), with room for a probe's retry deadline."""
        from shared.runtime.firestore import RETRY_DEADLINE

        spec = next(s for s in self.topology(state).subscriptions if s.push == "upsert")
        return emulator_delivery_attempts(spec) * 2 * EMULATOR_REDELIVERY_SECONDS + RETRY_DEADLINE + 10

    def firestore_outage(self) -> bool:
        return self.outage_flag.exists()

    def set_pubsub_outage(self, down: bool) -> None:
        """Cut the NATS ingress off Pub/Sub (chaos stacks only: its fault proxy), or end the cut."""
        if down:
            self.pubsub_outage_flag.touch()
        else:
            self.pubsub_outage_flag.unlink(missing_ok=True)

    def set_firestore_outage(self, down: bool) -> None:
        if down:
            self.outage_flag.touch()
        else:
            self.outage_flag.unlink(missing_ok=True)
