"""The local stack: emulators, one functions-framework server per function,
and the topology of ``infra/topology.yaml`` created on the Pub/Sub emulator.

Its parts, each a module of infra/local/: the state and where it is kept (``state.py``, under
``$DCM_STATE_DIR``: ``up`` is idempotent and ``down`` stops exactly what ``up`` started), the wiring on the
Pub/Sub emulator (``wiring.py``), each server under a keeper (``supervise.py``), NATS (``natsserver.py``),
where each process stands (``health.py``).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping

from infra import nats_accounts
from infra.local import emulators, health, natsserver, supervise, wiring
from infra.local.emulators import Process
from infra.local.health import StackHealth
from infra.local.state import DEFAULT_PROJECT, REPO_ROOT, StackPaths, StackState, default_state_dir, load_state, \
    save_state
from infra.topology import Topology, load, read

if TYPE_CHECKING:  # the keyring's cipher is loaded by the steps that use it
    from shared.runtime import secretbox

# What a local stack runs differently from production, unless the shell that starts it says otherwise.
LOCAL_SETTINGS = {
    # the aggregates' snapshots (shared/state/snapshots.py, docs/api.md): the summary every 30 s (its ~60
    # counts: 2 s of emulator CPU at 3,000 resources), the accounting every 5 minutes (counting the ledger
    # took the emulator 5 s of CPU a tick on a test stack: `dcm-status stats` counts live whenever asked)
    "DCM_SUMMARY_EVERY_SECONDS": "30",
    "DCM_STATS_EVERY_SECONDS": "300",
    # the trends (shared/state/trends.py): a minute counted once it is complete, not every period. Each is one
    # count per provider and outcome over the sharded ledger, and the emulator scans the ledger once per shard
    # of an "in": at 3,000 ledger entries one minute's counts for 15 providers took 45 s of its CPU (150 s
    # wall), for one provider 2.1 s. The e2e stacks (15 providers) count none: tests/e2e/conftest.py
    "DCM_TRENDS_EVERY_SECONDS": "60",
    # the daily usage snapshot (shared/state/usage/snapshot.py): never. Its one query ("shard in" 30 values,
    # recordedUs >) is 30 scans of the transitions on the emulator: 2.8 s at 3,000 transitions for 9 found, at
    # each keep and each /v1/usage call. Locally a call reads every transition, as before the snapshot (the
    # same rows: tests/functional/test_usage_snapshot.py).
    "DCM_USAGE_EVERY_SECONDS": "0",
    # the freshness deadline's index ranges (production: 360, docs/scale.md): one. The emulator scans the
    # collection once for each value of an "in": at 3,000 resources a 5 s tick's stale query cost 0.9-1.2 s of
    # its CPU with 30 ranges, 0.22 s with one. The ranges' merge is tested at 360: tests/functional/test_sweep.py
    "DCM_STALE_SHARDS": "1",
    # a search's withCounts (production: one count per status, at one read per 1,000 resources each): its rows'
    # statuses read in one pass, up to 10,000. The emulator scans the whole collection for every query, each count
    # per status included: at 10,000 resources a search's total and 4 counts were 5 scans beside its page's one
    # (2.3x the page's p99), the one pass is one (docs/cost.md, "withCounts"; tests/functional/test_api.py)
    "DCM_SEARCH_COUNT_ROWS": "10000",
    # upsert reads the callbacks' summary on every change (production caches it 10 s): a callback is sent
    # the very next change after its registration, as the e2e tests expect (docs/callbacks.md)
    "DCM_CALLBACK_VIEW_TTL": "0",
    # the rate card /v1/usage may price with (?rates=example): the repository's example card
    "DCM_RATE_CARDS": f"example={REPO_ROOT / 'examples' / 'rates.yaml'}",
}


_OUR_COMMANDS = (b"pubsub-emulator", b"firestore-emulator", b"functions-framework", b"infra.local.faultproxy",
                 b"infra.local.supervise", b"nats-server", b"functions.nats_ingress")


def _is_ours(pid: int) -> bool:
    """Whether pid is one of the processes a stack starts (checked on its command line)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return any(marker in cmdline for marker in _OUR_COMMANDS)


def production_only(topology: Topology) -> list[str]:
    """What the declaration deploys in production only and this stack skips, one line each (`dcm-status up`)."""
    return [f"export {e.name}: {e.topic} -> BigQuery {e.dataset}.{e.table}: production only, skipped here (the "
            "emulator has no BigQuery subscriptions; terraform/exports.tf)" for e in topology.exports]


class LocalStack:
    def __init__(self, state_dir: Path | None = None, project: str = DEFAULT_PROJECT,
                 heaps: Mapping[str, str] | None = None):
        """``heaps``: an emulator kind's JVM heap option, where not its default (``emulators.HEAP``)."""
        self.paths = StackPaths.under(state_dir or default_state_dir())
        self.project = project
        self.heaps = dict(heaps or {})
        self._providers_changed = False  # by this `up`: the NATS ingress is started again to know them
        self._ingress_stale = False  # its environment changed (a Pub/Sub fault proxy): started again

    @property
    def callback_keys(self) -> Path:
        """The webhook signing secrets' keyring file (``paths.callback_keys``), as ``dcm-status callbacks`` names it."""
        return self.paths.callback_keys

    def callback_keys_source(self) -> secretbox.KeySource:
        """The keyring the stack's notify and api seal and open signing secrets with (made if missing)."""
        from shared.runtime import secretbox

        return secretbox.source(None, str(self.callback_keys_file()), True)

    def callback_keys_file(self) -> Path:
        """The keyring's file, mode 0600, made once."""
        from shared.runtime import secretbox

        return secretbox.ensure_file(self.paths.callback_keys)

    # ---- state -------------------------------------------------------------
    def load_state(self) -> StackState | None:
        return load_state(self.paths)

    def _save(self, state: StackState) -> None:
        save_state(self.paths, state)

    def running(self) -> StackState | None:
        """The running stack, if both emulators are alive (its data is there; a function may be down)."""
        state = self.load_state()
        if state and Process(**state.pubsub).alive() and Process(**state.firestore).alive():
            return state
        return None

    def server_pid(self, name: str) -> int | None:
        """The pid of the server `name`'s keeper runs now (it restarts it under another pid)."""
        return supervise.server_pid(self.paths.pidfile(name))

    def health(self, state: StackState) -> list[StackHealth]:
        """Every process of the stack: alive, answering, restarted how often."""
        return health.stack_health(self.paths, state, self.topology(state))

    def function_health(self, state: StackState) -> list[StackHealth]:
        return health.function_health(self.paths, state, self.topology(state))

    def unwell_functions(self, state: StackState) -> list[StackHealth]:
        """The functions not up and supervised."""
        return [h for h in self.function_health(state) if h.status is not health.Condition.UP]

    def nats_credentials(self, state: StackState, provider: str) -> nats_accounts.Identity | None:
        """The NATS identity of ``provider`` on this stack (None: not a provider of it)."""
        if provider not in state.providers:
            return None
        return natsserver.credentials(self.paths, state.providers).provider(provider)

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
            moved: list[str] = []
            if chaos and not state.firestore_proxy:  # the functions move behind a proxy; the data stays
                state.firestore_proxy = asdict(self._start_proxy(Process(**state.firestore)))
                self._save(state)
                moved = list(state.functions)
                self._respawn_functions(state, moved)  # waited for below, once the NATS ingress is started too
            if chaos and state.nats and not state.pubsub_proxy:  # the NATS ingress moves behind one to Pub/Sub
                state.pubsub_proxy = asdict(self._start_proxy(Process(**state.pubsub), name="pubsub-proxy",
                                                              flag=self.paths.pubsub_outage_flag))
                self._save(state)
                self._ingress_stale = True  # started again, with the proxy in its environment
            self._revive(state)
            self._wait_functions(state, moved)
        self.apply_topology(state)
        return state

    def _revive(self, state: StackState) -> None:
        if state.firestore_proxy and not Process(**state.firestore_proxy).alive():
            proxy = self._start_proxy(Process(**state.firestore), port=state.firestore_proxy["port"])
            state.firestore_proxy = asdict(proxy)
            self._save(state)
        if state.pubsub_proxy and not Process(**state.pubsub_proxy).alive():
            state.pubsub_proxy = asdict(self._start_proxy(Process(**state.pubsub), port=state.pubsub_proxy["port"],
                                                          flag=self.paths.pubsub_outage_flag, name="pubsub-proxy"))
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
        nats = self.topology(state).nats
        if nats is None:
            return
        if not state.nats or not Process(**state.nats).alive():
            if state.nats:
                Process(**state.nats).stop()
            natsserver.start_server(self.paths, nats, state, fresh=not state.nats)
            self._save(state)
        elif self._providers_changed:
            natsserver.reload(self.paths, nats, state)  # providers added by this `up`
        natsserver.declare_stream(self.paths, nats, state)
        if not state.nats_ingress or not Process(**state.nats_ingress).alive() or self._providers_changed \
                or self._ingress_stale:
            natsserver.start_ingress(self.paths, nats, state, self.function_env(state))
            self._save(state)

    def _start(self, providers: list[str], chaos: bool) -> StackState:
        self.paths.log_dir.mkdir(parents=True, exist_ok=True)
        self.paths.outage_flag.unlink(missing_ok=True)
        self.paths.pubsub_outage_flag.unlink(missing_ok=True)
        started: list[Process] = []
        try:
            pubsub = emulators.launch("pubsub", self.paths.log_dir, push_timeout=wiring.push_timeout(load(providers)),
                                      heap=self.heaps.get("pubsub"))
            started.append(pubsub)
            firestore = emulators.launch("firestore", self.paths.log_dir, heap=self.heaps.get("firestore"))
            started.append(firestore)
            emulators.wait_ready(pubsub, "pubsub", self.paths.log_dir)
            emulators.wait_ready(firestore, "firestore", self.paths.log_dir)
            state = StackState(self.project, asdict(pubsub), asdict(firestore), providers=sorted(set(providers)))
            if chaos:
                proxy = self._start_proxy(firestore)
                started.append(proxy)
                state.firestore_proxy = asdict(proxy)
                if load(providers).nats:
                    pubsub_proxy = self._start_proxy(pubsub, flag=self.paths.pubsub_outage_flag, name="pubsub-proxy")
                    started.append(pubsub_proxy)
                    state.pubsub_proxy = asdict(pubsub_proxy)
            self._save(state)
            for name in load(providers).functions:
                proc = self._start_function(name, state)
                started.append(proc)
                state.functions[name] = asdict(proc)
                self._save(state)
            self._providers_changed = False
            self._revive_nats(state)  # while the function servers import (each a few seconds of one core)
            self._wait_functions(state, list(state.functions))
            return state
        except BaseException:
            emulators.stop_all(started + [Process(**p) for p in (state.nats, state.nats_ingress) if p and p["pid"]])
            self.paths.state_file.unlink(missing_ok=True)
            raise

    def _start_proxy(self, firestore: Process, port: int | None = None, flag: Path | None = None,
                     name: str = "firestore-proxy") -> Process:
        """A fault proxy in front of ``firestore`` (or Pub/Sub, for the NATS ingress), cut while ``flag`` exists."""
        port = port or emulators.free_port()
        log_path = self.paths.log(name)
        pid = emulators.spawn([sys.executable, "-m", "infra.local.faultproxy", "--listen", str(port),
                               "--target", firestore.host, "--flag", str(flag or self.paths.outage_flag)],
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
            "DCM_TRACE_DIR": str(self.paths.trace_dir),
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
        keeper = supervise.keeper_command(name, server, self.paths.pidfile(name), tick=self._tick(name, state))
        env = {**self.function_env(state), **(extra_env or {})}
        pid = emulators.spawn(keeper, self.paths.log(name), env=env, cwd=str(REPO_ROOT))
        return Process(pid, port)

    def _tick(self, name: str, state: StackState) -> tuple[str, float] | None:
        """A scheduled function's tick (Cloud Scheduler's job in production; its keeper's timer here): the
        topic it is pushed from, and how often; None for a function that is not scheduled."""
        doc = read()
        spec = doc["functions"].get(name) or {}
        if not spec.get("schedule"):
            return None
        key = next(s["topic"] for s in doc["subscriptions"] if s.get("push") == name)  # the topic it is pushed
        return f"projects/{state.project}/topics/{self.topology(state).topic(key)}", spec.get("tick_seconds", 60)

    def start_extra_function(self, name: str, state: StackState, source: Path,
                             extra_env: Mapping[str, str]) -> Process:
        """A server for function ``name`` of ``source``, served as the stack serves its own (same keeper,
        environment and gunicorn settings), ready; the caller stops it (benchmarks/pipeline.py)."""
        proc = self._start_function(name, state, source=source, extra_env=extra_env)
        emulators.wait_http(proc, f"function {name}", self.paths.log(name))
        return proc

    def _launch(self, name: str, state: StackState, port: int | None = None) -> None:
        proc = self._start_function(name, state, port=port)
        state.functions[name] = asdict(proc)
        self._save(state)
        emulators.wait_http(proc, f"function {name}", self.paths.log(name))

    def restart_function(self, state: StackState, name: str) -> None:
        """Restart one function server on its port (e.g. to load a newly added schema)."""
        self.restart_functions(state, [name])

    def restart_functions(self, state: StackState, names: list[str],
                          extra_env: Mapping[str, str] | None = None) -> None:
        """Restart these function servers on their ports, side by side: all stopped together, all started,
        then each waited for (the servers import in parallel rather than one after another). ``extra_env``:
        settings over the stack's (benchmarks/pipeline.py's breakdown restarts the sweep with some off)."""
        self._respawn_functions(state, names, extra_env)
        self._wait_functions(state, names)

    def _respawn_functions(self, state: StackState, names: list[str],
                           extra_env: Mapping[str, str] | None = None) -> None:
        """Stop these function servers and start them again on their ports, not waiting for them to answer."""
        emulators.stop_all([Process(**state.functions[name]) for name in names])
        for name in names:
            proc = self._start_function(name, state, port=state.functions[name]["port"], extra_env=extra_env)
            state.functions[name] = asdict(proc)
            self._save(state)

    def _wait_functions(self, state: StackState, names: list[str]) -> None:
        for name in names:
            emulators.wait_http(Process(**state.functions[name]), f"function {name}", self.paths.log(name))

    def down(self) -> bool:
        state = self.load_state()
        if state is None:
            return False
        # a stale state file may name pids the system has reused since
        emulators.stop_all(p for p in state.processes() if _is_ours(p.pid))
        self.paths.state_file.unlink(missing_ok=True)
        self.paths.outage_flag.unlink(missing_ok=True)
        self.paths.pubsub_outage_flag.unlink(missing_ok=True)
        return True

    # ---- topology ------------------------------------------------------------
    def function_url(self, state: StackState, name: str) -> str:
        """Where a function answers HTTP (the api: the dashboard and the status API)."""
        return f"http://127.0.0.1:{state.functions[name]['port']}/"

    def apply_topology(self, state: StackState) -> Topology:
        """Create every topic and subscription the declaration names (idempotent)."""
        return wiring.apply_topology(state, self.topology(state))

    def purge(self, state: StackState) -> int:
        """Drop every subscription's backlog (wiring.purge); returns how many subscriptions were purged."""
        return wiring.purge(state, self.topology(state))

    def add_provider(self, name: str) -> StackState:
        state = self.running()
        if state is None:
            raise RuntimeError("the local stack is not running: dcm-status up")
        if name not in state.providers:
            state.providers = sorted(set(state.providers) | {name})
            self._save(state)
        self.apply_topology(state)
        if state.nats:  # its NATS identity, the server restarted with it, the ingress told of one more provider
            nats = self.topology(state).nats
            natsserver.reload(self.paths, nats, state)
            natsserver.declare_stream(self.paths, nats, state)  # its stream, before its first publish
            natsserver.start_ingress(self.paths, nats, state, self.function_env(state))
            self._save(state)
        return state

    # ---- chaos ---------------------------------------------------------------
    def outage_beyond_retries(self, state: StackState) -> float:
        """Seconds of Firestore outage that outlast upsert's whole local delivery schedule: its attempts
        ~1 s apart (failing fast, shared/runtime/firestore.py), with room for a probe's retry deadline."""
        from shared.runtime.firestore import RETRY_DEADLINE

        spec = next(s for s in self.topology(state).subscriptions if s.push == "upsert")
        attempts = wiring.emulator_delivery_attempts(spec)
        return attempts * 2 * wiring.EMULATOR_REDELIVERY_SECONDS + RETRY_DEADLINE + 10

    def firestore_outage(self) -> bool:
        return self.paths.outage_flag.exists()

    def set_pubsub_outage(self, down: bool) -> None:
        """Cut the NATS ingress off Pub/Sub (chaos stacks only: its fault proxy), or end the cut."""
        if down:
            self.paths.pubsub_outage_flag.touch()
        else:
            self.paths.pubsub_outage_flag.unlink(missing_ok=True)

    def set_firestore_outage(self, down: bool) -> None:
        if down:
            self.paths.outage_flag.touch()
        else:
            self.paths.outage_flag.unlink(missing_ok=True)
