"""End-to-end fixtures: the real local stack (emulators + functions-framework
servers + push subscriptions), started once per test session.

The functions reach Firestore through a fault proxy so that tests can cause a
Firestore outage without losing the emulator's data: the stack is started without
it and moved behind it by `dcm-status up --chaos`, as a user would.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator
from unittest import mock

import pytest
from dcm_status_contracts.model import ResourceKey
from dcm_status_sdk import BindingMode, Reporter, ReporterConfig, ReportForm
from google.cloud import firestore, pubsub_v1

from infra.local.stack import LocalStack
from infra.local.state import REPO_ROOT, StackState
from infra.topology import load as load_topology
from shared.deadletter.store import DeadLetterStore

UPSTREAM_PROVIDERS = ["kubevirt", "acm-cluster", "osac", "k8s-storage", "k8s-container", "three-tier-app"]
QUIET = "quiet"  # a provider with a freshness deadline of seconds
# issue 38: the upstream e2e suite's test publisher, kcli, the CloudNativePG provider and an environment-agent
# (tests/e2e/test_dcm_upstream_e2e.py), each with its own NATS identity
NEWER_PRODUCERS = ["e2e-test", "kcli", "cnpg-database", "env-agent"]
PROVIDERS = ["aws", "azure", "vmware", "kubernetes", QUIET, *UPSTREAM_PROVIDERS, *NEWER_PRODUCERS]  # kubernetes: the README provider's


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.2,
               what: str | Callable[[], str] = "condition") -> Any:
    """Poll until predicate() is truthy; fail the test with `what` (or what it returns, read then) after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what() if callable(what) else what}")
        time.sleep(interval)


def _log_records(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON lines of a function's log (its keeper's and the server's plain lines skipped)."""
    with contextlib.suppress(FileNotFoundError), path.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    yield record


def _epoch(stamp: Any) -> float:
    """A log record's RFC 3339 ``time`` as seconds since the epoch (0 when it has none)."""
    with contextlib.suppress(TypeError, ValueError):
        return datetime.fromisoformat(str(stamp)).timestamp()
    return 0.0


@dataclass
class E2EStack:
    stack: LocalStack
    state: StackState
    schemas_dir: Path
    publisher: pubsub_v1.PublisherClient
    db: firestore.Client
    reporters: dict[tuple[str, BindingMode], Reporter] = field(default_factory=dict)
    chaos_move: "ChaosMove | None" = None

    @property
    def project(self) -> str:
        return self.state.project

    def topic_path(self, name: str) -> str:
        return f"projects/{self.project}/topics/{name}"

    def ingress(self, provider: str) -> str:
        return self.topic_path(self.stack.topology(self.state).topic("ingress", provider))

    def reporter(self, provider: str, binding: BindingMode = BindingMode.STRUCTURED) -> Reporter:
        """The provider kit for `provider`; tests publish with its synchronous mode (``publish_now``: checked,
        published at once, ordered by event time), in the January form."""
        key = (provider, binding)
        if key not in self.reporters:
            config = ReporterConfig(self.project, provider, form=ReportForm.JANUARY, binding=binding)
            self.reporters[key] = Reporter(config, self.publisher)
        return self.reporters[key]

    def publish_raw(self, provider: str, data: bytes, **attributes: str) -> str:
        return self.publisher.publish(self.ingress(provider), data, **attributes).result(timeout=30)

    def resource(self, key: str) -> dict[str, Any] | None:
        snap = self.db.collection("resources").document(ResourceKey.parse(key).doc_id).get()
        return snap.to_dict() if snap.exists else None

    def statuses_other_than(self, wanted: dict[str, str]) -> dict[str, str | None]:
        """The keys of ``wanted`` (key -> status) whose stored status is another (None: not stored), read in
        one batch rather than one get each."""
        refs = {self.db.collection("resources").document(ResourceKey.parse(k).doc_id): k for k in wanted}
        stored = {s.id: (s.to_dict() or {}).get("status") if s.exists else None for s in self.db.get_all(list(refs))}
        return {k: stored.get(r.id) for r, k in refs.items() if stored.get(r.id) != wanted[k]}

    def wait_for_status(self, key: str, status: str, timeout: float = 30.0) -> dict[str, Any]:
        since = time.time()
        return wait_until(lambda: (d := self.resource(key)) and d["status"] == status and d,
                          timeout, what=lambda: f"{key} to be {status}; {self.whereabouts(key, since)}")

    def wait_for_statuses(self, wanted: dict[str, str], stall: float = 60.0) -> None:
        """Until every key of ``wanted`` (key -> status) has its status, read in one batch a poll (only those still
        missing: a key at its status stays there). Fails once none of them has got there for ``stall`` seconds,
        not at a deadline for the whole batch: on a loaded machine a burst is stored at the pace the machine
        allows, and only a stall means an update is held up or lost. The failure says how many are missing and
        what the stack knows of the first."""
        since, missing, progressed = time.time(), dict(wanted), time.monotonic()
        while True:
            other = self.statuses_other_than(missing)
            if len(other) < len(missing):
                missing, progressed = {k: wanted[k] for k in other}, time.monotonic()
            if not missing:
                return
            if time.monotonic() - progressed > stall:
                first = sorted(missing)[0]
                pytest.fail(f"{len(missing)} of {len(wanted)} keys not at their status, none for {stall:.0f}s, e.g. "
                            f"{first} to be {missing[first]}; {self.whereabouts(first, since)}")
            time.sleep(0.5)

    def whereabouts(self, key: str, since: float) -> str:
        """What the stack says of ``key`` when a wait for it fails: its stored status, the dead letters naming
        it, and the warnings the pipeline's functions logged since ``since`` (time.time()), by error."""
        stored = self.resource(key)
        dead = [d.get("reason") for d in self.deadletters(provider=ResourceKey.parse(key).provider)
                if d.get("key") == key]
        said = [f"stored: {stored.get('status') if stored else 'nothing'}",
                f"dead letters naming it: {', '.join(map(str, dead)) or 'none'}"]
        for name in ("ingest", "upsert"):
            errors = Counter(str(r.get("error") or r.get("message"))[:160]
                             for r in _log_records(self.stack.paths.log(name))
                             if r.get("severity") in ("WARNING", "ERROR") and _epoch(r.get("time")) >= since)
            said.append(f"{name} warnings since the wait began: "
                        + ("; ".join(f"{n} x {e}" for e, n in errors.most_common(3)) or "none"))
        return ". ".join(said)

    def sweep_ticks_since(self, since_ns: int) -> int:
        """How many of the sweep's ticks started at or after ``since_ns`` (time.time_ns()) and have ended: its
        spans (one per tick, written within 200 ms of its end: infra/local/stack.py OTEL_BSP_SCHEDULE_DELAY)."""
        from infra.cli.trace import read_spans

        return sum(1 for s in read_spans(self.stack.paths.trace_dir)
                   if s.record.get("name") == "sweep" and s.record.get("start", 0) >= since_ns and s.record.get("end"))

    def wait_for_sweep_ticks(self, ticks: int, since_ns: int, timeout: float = 60.0) -> None:
        """Until the sweep has handled ``ticks`` ticks begun since ``since_ns``: what a fixed sleep of that many
        tick periods meant to wait for, no longer (and no shorter on a loaded machine)."""
        wait_until(lambda: self.sweep_ticks_since(since_ns) >= ticks, timeout, interval=0.5,
                   what=f"{ticks} sweep ticks")

    def deadletters(self, **filters: Any) -> list[dict[str, Any]]:
        return list(DeadLetterStore(self.db).query(**filters))

    @contextlib.contextmanager
    def firestore_outage(self) -> Iterator[None]:
        self.stack.set_firestore_outage(True)
        try:
            yield
        finally:
            self.stack.set_firestore_outage(False)

    def cli(self, *args: str, check: bool = True, input: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run `dcm-status ARGS` against this stack, as an operator would: through ``main`` in this process
        (tests/README.md: a fresh interpreter costs ~0.8 s of CPU a command, mostly importing the Firestore
        client), but `up` and `down`, which start and stop the stack's processes, in a process of their own."""
        env = {"DCM_STATE_DIR": str(self.stack.paths.state_dir), **(env or {})}
        run = _cli_subprocess if args[:1] in (("up",), ("down",)) else _cli_in_process
        result = run(list(args), env, input)
        self.refresh()  # `up`, `provider add` ... restart processes: their pids are in the state file now
        if check and result.returncode != 0:
            pytest.fail(f"dcm-status {' '.join(args)} exited {result.returncode}: {result.stderr}")
        return result

    def cli_process(self, *args: str) -> subprocess.Popen:
        """Start `dcm-status ARGS` (a long-running command such as watch), its output piped, line-buffered."""
        env = {**os.environ, "DCM_STATE_DIR": str(self.stack.paths.state_dir), "PYTHONUNBUFFERED": "1"}
        return subprocess.Popen([str(Path(sys.executable).parent / "dcm-status"), *args], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=1)

    def restart_function(self, name: str) -> None:
        self.refresh()
        self.stack.restart_function(self.state, name)

    def refresh(self) -> None:
        """The session's view of the stack, read again from its state file: whatever saves it next (a restart)
        must not write back a process another command replaced (a keeper then reads as dead: unsupervised)."""
        fresh = self.stack.load_state()
        if fresh is not None:
            for f in dataclasses.fields(fresh):
                setattr(self.state, f.name, getattr(fresh, f.name))

    @property
    def api_url(self) -> str:
        """The api function's base URL (the dashboard at /, the API under /v1/)."""
        return self.stack.function_url(self.state, "api")


def _cli_subprocess(args: list[str], env: dict[str, str], input: str | None) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "dcm-status"), *args], env={**os.environ, **env},
                          text=True, capture_output=True, timeout=120, input=input)


def _cli_in_process(args: list[str], env: dict[str, str], input: str | None) -> subprocess.CompletedProcess:
    """`dcm-status ARGS` through click's runner, answered as the process would: its exit code, its stdout and
    its stderr, with the traceback a command let escape (the process would have printed it). The environment
    the command changes (connect() points the clients at the stack) is restored after it, and the keyring a
    process keeps (secretbox's sources) is not kept from one command to the next: each reads it afresh."""
    from click.testing import CliRunner

    from infra.cli import cli
    from shared.runtime import secretbox

    saved = dict(os.environ)
    try:
        with mock.patch.dict(secretbox._SOURCES, clear=True):
            got = CliRunner().invoke(cli, args, input=input, env=env, catch_exceptions=True)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    stderr = got.stderr
    if got.exc_info is not None and not isinstance(got.exception, SystemExit):
        stderr += "".join(traceback.format_exception(*got.exc_info))
    return subprocess.CompletedProcess(["dcm-status", *args], got.exit_code, got.stdout, stderr)


@dataclass(frozen=True)
class ChaosMove:
    """What `dcm-status up --chaos` answered on this session's stack, started without the fault proxy
    (asserted by tests/e2e/test_cli.py): ``kept`` was stored before the move."""

    answer: subprocess.CompletedProcess
    kept: str


def _move_behind_the_fault_proxy(e2e: E2EStack) -> ChaosMove:
    """The session's stack is started as a user starts one, then moved behind the Firestore fault proxy
    (outage tests need it) the way a user does it: `dcm-status up --chaos` on the running stack. One stack
    start per session instead of a second stack for the test of that move."""
    rid = f"kept-{uuid.uuid4().hex[:10]}"
    e2e.reporter("aws").publish_now("vm", rid, "RUNNING", "before up --chaos").result(timeout=30)
    e2e.wait_for_status(f"aws/vm/{rid}", "RUNNING")
    answer = e2e.cli("up", "--chaos", "--providers", ",".join(PROVIDERS), check=False)
    return ChaosMove(answer, f"aws/vm/{rid}")


@pytest.fixture(scope="session")
def e2e(tmp_path_factory) -> Iterator[E2EStack]:
    root = tmp_path_factory.mktemp("e2e")
    schemas = root / "schemas"
    shutil.copytree(REPO_ROOT / "schemas", schemas)
    saved = dict(os.environ)
    os.environ["DCM_SCHEMAS_DIR"] = str(schemas)
    # no trends on the e2e stacks: their 15 providers' counts took the emulator 45 s of CPU a minute at 3,000
    # ledger entries (infra/local/stack.py LOCAL_SETTINGS), and 503s followed; test_charts counts its provider's
    os.environ["DCM_TRENDS_EVERY_SECONDS"] = "0"
    os.environ["DCM_HOOK_TIMEOUT_SECONDS"] = "5"  # a hanging webhook receiver is given up on sooner (test_callbacks)
    # provider "quiet" must report every 5 s, +1 s grace (test_freshness: a deadline of 6 s, a little over the
    # sweep's 5 s tick, so that its silence shows within two ticks); the others keep topology.yaml's hour
    profiles = {**load_topology().provider_profiles, QUIET: {"freshness": {"report_every": "5s", "grace": "1s"}}}
    os.environ["DCM_PROVIDER_PROFILES"] = json.dumps(profiles, separators=(",", ":"), sort_keys=True)
    stack = LocalStack(root / "state", project=f"dcm-e2e-{uuid.uuid4().hex[:6]}")
    state = stack.up(PROVIDERS)  # moved behind the fault proxy below, by `up --chaos`
    try:
        # the topology's settings for clients, but "quiet"'s deadline kept: a function restarted later
        # (restart_function) is started with this environment too
        os.environ.update({**stack.client_env(state), "DCM_PROVIDER_PROFILES": os.environ["DCM_PROVIDER_PROFILES"]})
        publisher = pubsub_v1.PublisherClient(
            publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True))
        e2e = E2EStack(stack, state, schemas, publisher, firestore.Client(project=state.project))
        e2e.chaos_move = _move_behind_the_fault_proxy(e2e)
        if not e2e.state.firestore_proxy:
            pytest.fail(f"dcm-status up --chaos left the session's stack without its fault proxy: "
                        f"{e2e.chaos_move.answer.stderr}")
        yield e2e
        for reporter in e2e.reporters.values():
            reporter.close()
    finally:
        stack.down()
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def uid() -> str:
    """A unique suffix, so tests sharing the session stack never see each other's resources."""
    return uuid.uuid4().hex[:10]
