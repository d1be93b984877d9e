"""``make reliability``: the pipeline's guarantees measured on the emulators, one line per scenario.

    python -m infra.reliability [--events 10000] [--quick] [--write docs/reliability.md]

Each scenario runs on a local stack of its own making (emulators, functions-framework servers,
push subscriptions, a fault proxy in front of Firestore), with Firestore emptied between scenarios,
and accounts for every message it published:

- ``applied + unchanged + duplicate + stale + dead-lettered = published``, from the pipeline's own
  counters;
- ``lost``: a valid event with neither a ledger entry, nor a place in its resource's ring of latest
  re-reports (a re-report of unchanged state writes no ledger entry; the ring holds the last
  ``RE_REPORT_RING``, the document's ``documentReReports`` counts the ones before: ``unaccounted``), nor a
  dead-letter entry, or an invalid one with no dead-letter entry, looked
  up one by one after the pipeline went quiet;
- ``wrong``: resources whose final status is not the last one their provider reported, as the API
  serves it and in the document lists read (a hot resource's, written by the sweep, within 20 s);
- ``5xx``: (fuzz) inputs a function answered with an error, i.e. would have retried.

It prints the table and, with ``--write``, writes it with the date and the machine to
``docs/reliability.md``.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import hashlib
import os
import platform
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

from dcm_status_contracts import timeutil
from dcm_status_contracts.model import ResourceKey, event_identity
from dcm_status_contracts.pubsub_binding import to_message
from dcm_status_contracts.status_report import build_event
from dcm_status_sdk import Reporter, ReporterConfig, ReportForm
from google.api_core.exceptions import DeadlineExceeded, ServiceUnavailable
from google.cloud.firestore_v1.base_query import FieldFilter

from infra import nats_accounts
from infra.local import emulators, natsserver
from infra.local.health import answers_http
from infra.local.stack import LocalStack
from infra.local.state import REPO_ROOT, StackState
from infra.local.supervise import children, listening
from shared.api import queries
from shared.state import resources
from shared.state.model import DOCUMENT_RE_REPORTS, HISTORY_OUTCOMES, LEDGER, RE_REPORTED

PROVIDERS = ["aws", "azure", "vmware"]
IN_FLIGHT_SECONDS = 3  # a push under way when its subscription is purged: its Firestore calls time out in 2 s
CONVERGE_SECONDS = 20  # a hot resource's document: a write token (1 s), then the sweep's next tick (5 s locally)
LIFECYCLE = ["PROVISIONING", "RUNNING", "STOPPING", "STOPPED", "RUNNING", "PAUSED", "RUNNING", "DELETING",
             "DELETED"]
MALFORMED = [b"not json", b'{"specversion": "1.0"}', b"[1, 2, 3]"]


@dataclass
class Row:
    scenario: str
    published: int = 0
    applied: int = 0
    unchanged: int = 0
    duplicate: int = 0
    stale: int = 0
    deadlettered: int = 0
    lost: int = 0
    wrong: int = 0
    errors: int = 0  # 5xx answers (fuzz) or crashed processes
    seconds: float = 0.0
    note: str = ""

    def line(self) -> str:
        return (f"{self.scenario:<22} {self.published:>7} {self.applied:>7} {self.unchanged:>9} {self.duplicate:>9} "
                f"{self.stale:>6} {self.deadlettered:>7} {self.lost:>5} {self.wrong:>6} {self.errors:>4} "
                f"{self.seconds:>7.1f}  {self.note}")


HEADER = (f"{'scenario':<22} {'publ.':>7} {'applied':>7} {'unchanged':>9} {'duplicate':>9} {'stale':>6} "
          f"{'dead-l.':>7} {'lost':>5} {'wrong':>6} {'5xx':>4} {'seconds':>7}  note")


@dataclass
class Ledger:
    """What a scenario published: to check every message afterwards."""

    events: dict[str, tuple[str, str]] = field(default_factory=dict)  # dedup id -> (key, status) of valid events
    invalid: list[tuple[str, str]] = field(default_factory=list)  # (topic, message id) of malformed ones
    final: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (time, status) of the newest report
    published: int = 0


async def _quiet(exc: Exception) -> None:
    """A NATS client's connection errors while nats-server restarts (the row kills it): the client reconnects,
    a publish not acked is sent again; what counts is the row's accounting, not a traceback per reconnect."""


class NatsProviders:
    """The providers' side of NATS: each provider connected as its own NATS identity (an account of its own,
    whose ``dcm.>`` the server imports into the platform's stream with its prefix), publishing with
    JetStream as kubevirt and osac do. One event loop in a thread; each publish is a Future of the server's
    ack (the event is in the stream). A publish the server did not ack (it restarted) is sent again, as a
    provider must, under the same ``Nats-Msg-Id``: the stream stores it once (its duplicate window)."""

    def __init__(self, url: str, identities: dict[str, nats_accounts.Identity]):
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True, name="nats-providers").start()
        self.connections = asyncio.run_coroutine_threadsafe(self._connect(url, identities), self.loop).result(30)

    @staticmethod
    async def _connect(url: str, identities: dict[str, nats_accounts.Identity]) -> dict:
        import nats

        return {p: await nats.connect(url, user=i.user, password=i.password, connect_timeout=5,
                                      max_reconnect_attempts=-1, error_cb=_quiet) for p, i in identities.items()}

    def publish(self, provider: str, subject: str, data: bytes, msg_id: str,
                headers: dict[str, str] | None = None) -> Future:
        js = self.connections[provider].jetstream()
        return asyncio.run_coroutine_threadsafe(self._publish(js, subject, data, msg_id, headers), self.loop)

    @staticmethod
    async def _publish(js: Any, subject: str, data: bytes, msg_id: str, headers: dict[str, str] | None = None) -> Any:
        from nats.errors import Error as NatsError

        for attempt in range(NATS_PUBLISH_ATTEMPTS):
            try:
                return await js.publish(subject, data, timeout=10, headers={**(headers or {}), "Nats-Msg-Id": msg_id})
            except (NatsError, asyncio.TimeoutError):
                if attempt == NATS_PUBLISH_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(1.0)

    def close(self) -> None:
        async def close_all() -> None:
            for connection in self.connections.values():
                await connection.close()
        asyncio.run_coroutine_threadsafe(close_all(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)


class Harness:
    def __init__(self, stack: LocalStack, state: StackState):
        from google.cloud import firestore, pubsub_v1

        self.stack, self.state = stack, state
        os.environ.update(stack.client_env(state))
        self.db = firestore.Client(project=state.project)
        self.publisher = pubsub_v1.PublisherClient(
            batch_settings=pubsub_v1.types.BatchSettings(max_messages=100, max_latency=0.01))
        self.topo = stack.topology(state)
        self.reporters: dict[tuple[str, str], Reporter] = {}
        self.nats: NatsProviders | None = None

    def open_nats(self, providers: list[str]) -> NatsProviders:
        """The providers' NATS identities on this stack, connected (once)."""
        if self.nats is None:
            self.nats = NatsProviders(self.state.nats_url, {p: self.stack.nats_credentials(self.state, p)
                                                            for p in providers})
        return self.nats

    def topic(self, provider: str) -> str:
        return f"projects/{self.state.project}/topics/{self.topo.topic('ingress', provider)}"

    def reset(self) -> None:
        """A clean start for the next scenario: the consumers' backlog of the last one dropped (billing,
        audit and notify trail upsert; left running, their messages would fail on the wiped Firestore
        and end as dead letters counted against the next scenario), what is in flight let end, then
        Firestore wiped."""
        self.stack.purge(self.state)
        time.sleep(IN_FLIGHT_SECONDS)
        emulators.reset_firestore(self.state.firestore_host, self.state.project)

    # ---- publishing -------------------------------------------------------------------
    def reporter(self, provider: str, source: str) -> Reporter:
        """The provider kit for `provider` and `source`, in its synchronous mode (``publish_now``: checked,
        published at once through the harness's batching client; the event times order the reports)."""
        if (provider, source) not in self.reporters:
            config = ReporterConfig(self.state.project, provider, topic=self.topo.topic("ingress", provider),
                                    source=source, form=ReportForm.JANUARY)
            self.reporters[provider, source] = Reporter(config, self.publisher)
        return self.reporters[provider, source]

    def close(self) -> None:
        for reporter in self.reporters.values():
            reporter.close()
        if self.nats is not None:
            self.nats.close()

    def report(self, ledger: Ledger, provider: str, rid: str, status: str, at: datetime, event_id: str,
               futures: list[Future], rtype: str = "vm", source: str | None = None) -> None:
        source = source or f"{provider}-reliability"
        futures.append(self.reporter(provider, source).publish_now(rtype, rid, status, f"{status.lower()}",
                                                                   time=timeutil.format(at), event_id=event_id))
        self.record(ledger, provider, rid, status, at, event_id, rtype, source)

    def report_nats(self, ledger: Ledger, provider: str, rid: str, status: str, at: datetime, event_id: str,
                    futures: list[Future], rtype: str = "vm", source: str | None = None) -> None:
        """The same report, published on NATS as an upstream provider does: the structured CloudEvent on
        ``dcm.{type}``, with JetStream, as the provider's own NATS identity (``self.nats``)."""
        assert self.nats is not None, "open_nats() first"
        source = source or f"{provider}-reliability"
        event = build_event(provider, rtype, rid, status, status.lower(), event_id=event_id,
                            time=timeutil.format(at), source=source)
        futures.append(self.nats.publish(provider, f"dcm.{rtype}", to_message(event)[0],
                                         uuid.uuid4().hex))  # one id per publication, its retries share it
        self.record(ledger, provider, rid, status, at, event_id, rtype, source)

    def record(self, ledger: Ledger, provider: str, rid: str, status: str, at: datetime, event_id: str,
               rtype: str, source: str) -> None:
        """One published report in the ledger: its identity, and its resource's newest status."""
        key = f"{provider}/{rtype}/{rid}"
        ledger.events[event_identity(provider, source, event_id)] = (key, status)
        stamp = timeutil.format(at)
        if key not in ledger.final or stamp > ledger.final[key][0]:
            ledger.final[key] = (stamp, status)
        ledger.published += 1

    def malformed(self, ledger: Ledger, provider: str, rng: random.Random, pending: list) -> None:
        future = self.publisher.publish(self.topic(provider), rng.choice(MALFORMED))
        pending.append((self.topo.topic("ingress", provider), future))
        ledger.published += 1

    def burst(self, ledger: Ledger, n: int, rng: random.Random, tag: str, providers: list[str] = PROVIDERS,
              duplicates: float = 0.10, reorder: float = 0.10, malformed: float = 0.05,
              during: Callable[[int], None] | None = None, report: Callable[..., None] | None = None) -> None:
        """About ``n`` messages: lifecycles of many resources, with duplicates, reordering, malformed ones;
        each event published by ``report`` (default: the provider kit on Pub/Sub)."""
        start = datetime.now(timezone.utc) - timedelta(hours=1)
        plan: list[tuple] = []
        i = 0
        while len(plan) < n:
            provider, rid = providers[i % len(providers)], f"{tag}-{i}"
            steps = LIFECYCLE[: rng.randint(2, len(LIFECYCLE))]
            for j, status in enumerate(steps):
                plan.append(("event", provider, rid, status, start + timedelta(seconds=i * 0.001 + j), f"{rid}-{j}"))
            i += 1
        plan = plan[:n]
        for k in range(len(plan) - 1):  # reorder: swap neighbours
            if rng.random() < reorder:
                plan[k], plan[k + 1] = plan[k + 1], plan[k]
        extra = [p for p in plan if rng.random() < duplicates]  # the same events, published again
        bad = [("malformed", providers[k % len(providers)]) for k in range(int(n * malformed))]
        plan = plan + extra + bad
        rng.shuffle(plan[len(plan) - len(extra) - len(bad):])
        futures: list[Future] = []
        invalid: list = []
        for k, item in enumerate(plan):
            if item[0] == "event":
                (report or self.report)(ledger, *item[1:], futures)
            else:
                self.malformed(ledger, item[1], rng, invalid)
            if during:
                during(k)
        for f in futures:
            f.result(timeout=120)
        ledger.invalid += [(topic, f.result(timeout=120)) for topic, f in invalid]

    # ---- accounting ----------------------------------------------------------------------
    def settle(self, ledger: Ledger, timeout: float) -> dict[str, int]:
        """Wait until the counters account for every published message (or timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                s = queries.stats(self.db)
            except (DeadlineExceeded, ServiceUnavailable):  # the emulator slow under load: look again
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
                continue
            if s["received"] >= ledger.published or time.monotonic() > deadline:
                return s
            time.sleep(1)

    def row(self, name: str, ledger: Ledger, started: float, timeout: float, note: str = "") -> Row:
        s = self.settle(ledger, timeout)
        lost = self.lost(ledger)
        wrong = self.wrong(ledger)
        return Row(name, ledger.published, s["applied"], s["unchanged"], s["duplicate"], s["stale"],
                   s["deadlettered"], lost, wrong, 0, time.monotonic() - started, note)

    def lost(self, ledger: Ledger) -> int:
        refs = [self.db.collection("events").document(d) for d in ledger.events]
        found = {s.id for chunk in _chunks(refs, 300) for s in self.db.get_all(chunk) if s.exists}
        missing = self.not_re_reported([d for d in ledger.events if d not in found], ledger)
        open_dead = {e.get("key") for e in self.db.collection("deadletters").stream()}
        lost = sum(1 for d in missing if ledger.events[d][0] not in open_dead)
        entry_ids = [hashlib.sha256(f"{topic}\x00{mid}".encode()).hexdigest()[:32] for topic, mid in ledger.invalid]
        refs = [self.db.collection("deadletters").document(e) for e in entry_ids]
        stored = sum(1 for chunk in _chunks(refs, 300) for s in self.db.get_all(chunk) if s.exists)
        return lost + len(entry_ids) - stored

    def not_re_reported(self, missing: list[str], ledger: Ledger) -> list[str]:
        """The events of ``missing`` (no ledger entry) that are not re-reports their resource holds
        (``unaccounted``)."""
        keys = sorted({ledger.events[d][0] for d in missing})
        refs = [self.db.collection("resources").document(ResourceKey.parse(k).doc_id) for k in keys]
        docs = {s.to_dict()["key"]: s.to_dict() for chunk in _chunks(refs, 300) for s in self.db.get_all(chunk)
                if s.exists}
        return unaccounted(missing, {d: ledger.events[d][0] for d in missing}, docs)

    def wrong(self, ledger: Ledger, converge: float = CONVERGE_SECONDS) -> int:
        """Resources whose newest state (what the API serves) or whose document (what lists and counts
        read) is not the last status reported. A hot resource's document is written by the sweep once it
        may (shared/sweep/handler.py): it has ``converge`` seconds to get there."""
        deadline = time.monotonic() + converge
        while True:
            wrong = self._wrong(ledger)
            if not wrong or time.monotonic() > deadline:
                return wrong
            time.sleep(1)

    def _wrong(self, ledger: Ledger) -> int:
        refs = {self.db.collection("resources").document(ResourceKey.parse(k).doc_id): v
                for k, v in ledger.final.items()}
        wrong = 0
        for chunk in _chunks(list(refs), 300):
            for snap in self.db.get_all(chunk):
                want = refs[snap.reference][-1] if snap.reference in refs else None
                doc = snap.to_dict() if snap.exists else None
                served = resources.newest(self.db, doc)
                wrong += (doc or {}).get("status") != want or (served or {}).get("status") != want
        return wrong


def _chunks(items: list, size: int):
    for i in range(0, len(items), size):
        yield items[i:i + size]


# ---- scenarios ---------------------------------------------------------------------------------
def burst(h: Harness, n: int, rng: random.Random) -> Row:
    ledger, started = Ledger(), time.monotonic()
    h.burst(ledger, n, rng, f"b{uuid.uuid4().hex[:6]}")
    return h.row("burst", ledger, started, timeout=60 + n / 10, note="10% duplicates, 10% reordered, 5% malformed")


def outage(h: Harness, n: int, rng: random.Random, seconds: float, name: str) -> Row:
    ledger, started = Ledger(), time.monotonic()
    h.stack.set_firestore_outage(True)
    try:
        h.burst(ledger, n, rng, f"o{uuid.uuid4().hex[:6]}", duplicates=0.05, malformed=0.0)
        time.sleep(max(0.0, seconds - (time.monotonic() - started)))
    finally:
        h.stack.set_firestore_outage(False)
    note = f"Firestore down {time.monotonic() - started:.0f} s"
    s = h.settle(ledger, timeout=90 + n / 10)
    if s["deadlettered"]:  # longer than the retry schedule: Pub/Sub gave up; an operator replays
        replayed = replay_exhausted(h)
        note += f"; {replayed} delivery_exhausted replayed"
        ledger.published += replayed  # a replay is one more publication to account for
    return h.row(name, ledger, started, timeout=90 + n / 10, note=note)


def replay_exhausted(h: Harness) -> int:
    from google.cloud import pubsub_v1

    from shared.deadletter.replay import Replayer, ReplayOutcome
    from shared.deadletter.store import DeadLetterStore

    store = DeadLetterStore(h.db)
    subscriber = pubsub_v1.SubscriberClient()
    replayer = Replayer(store, h.publisher, h.state.project,
                        lambda sub: subscriber.get_subscription(subscription=sub).topic)
    ids = [e["id"] for e in store.query(reason="delivery_exhausted")]
    return sum(replayer.replay(i).outcome is ReplayOutcome.PUBLISHED for i in ids)


def killed(h: Harness, n: int, rng: random.Random) -> Row:
    """``kill -9`` each function server once, mid-burst; its keeper restarts it on its port."""
    ledger, started = Ledger(), time.monotonic()
    victims = list(h.topo.functions)
    at = {n * (i + 1) // (len(victims) + 1): name for i, name in enumerate(victims)}

    def kill(k: int) -> None:
        if k in at:
            pid = h.stack.server_pid(at[k])
            if pid:
                os.kill(pid, signal.SIGKILL)
    h.burst(ledger, n, rng, f"k{uuid.uuid4().hex[:6]}", during=kill)
    return h.row("function killed", ledger, started, timeout=90 + n / 10,
                 note=f"kill -9 of each function server mid-burst ({', '.join(victims)}); restarted by its keeper")


LOAD_RATE = 60.0  # messages/s of a paced burst: upsert busy on every lane (2 pushes in flight per subscription)
BACK_WITHIN = 60.0  # seconds: a killed process not back by then counts as one error


def _connections(port: int) -> int:
    """Established TCP connections to a local port (pushes in flight or kept alive), from /proc/net/tcp."""
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for line in lines if (f := line.split()) and int(f[1].split(":")[1], 16) == port and f[3] == "01")


def killed_under_load(h: Harness, n: int, rng: random.Random, target: str) -> Row:
    """``kill -9`` of upsert's server (``target`` "server": the gunicorn master, its keeper restarts it) or of
    its gunicorn worker ("worker": the master respawns it) halfway through a paced burst, while pushes are in
    flight on its port. Measures how soon it answers again (the server) or has a worker again; every message
    must still be accounted for: a push cut mid-request is delivered again (docs/local-stack.md)."""
    name, ledger, started = "upsert", Ledger(), time.monotonic()
    port = h.state.functions[name]["port"]
    back: list[float] = []
    seen: dict[str, int] = {}

    def watch(killed: int, at: float) -> None:
        while time.monotonic() - at < BACK_WITHIN:
            server = h.stack.server_pid(name)
            if target == "server" and server not in (None, killed) and listening([server], port) \
                    and answers_http(f"127.0.0.1:{port}", timeout=1):
                back.append(time.monotonic() - at)
                return
            if target == "worker" and server and [w for w in children(server) if w != killed]:
                back.append(time.monotonic() - at)
                return
            time.sleep(0.05)

    def during(k: int) -> None:
        if k == n // 2:
            deadline = time.monotonic() + 10
            while not (open_ := _connections(port)) and time.monotonic() < deadline:
                time.sleep(0.01)  # pushes in flight on its port
            server = h.stack.server_pid(name)
            victim = server if target == "server" else (children(server) if server else [None])[0]
            if victim:
                seen["in flight"] = open_
                os.kill(victim, signal.SIGKILL)
                threading.Thread(target=watch, args=(victim, time.monotonic()), daemon=True).start()
        time.sleep(max(0.0, (k + 1) / LOAD_RATE - (time.monotonic() - started)))
    h.burst(ledger, n, rng, f"{target[0]}{uuid.uuid4().hex[:6]}", during=during)
    row = h.row(f"{target} killed under load", ledger, started, timeout=120 + n / 10)
    again = "answering again" if target == "server" else "a worker again"
    if back:
        row.note = (f"kill -9 of upsert's {'server (gunicorn master)' if target == 'server' else 'gunicorn worker'} "
                    f"mid-burst ({LOAD_RATE:.0f} msg/s), {seen.get('in flight', 0)} connections open on its port; "
                    f"{again} after {back[0]:.1f} s")
    else:
        row.errors += 1
        row.note = f"upsert not {again} within {BACK_WITHIN:.0f} s of the kill"
    return row


NATS_KILLS = 2  # kill -9 of the NATS ingress, each with messages forwarded but not yet acked
NATS_PUBLISH_ATTEMPTS = 10  # a provider's publish, sent again while nats-server restarts
NATS_BURST = 5000  # at most (issue 28: a 5,000-message burst through NATS)


@dataclass(frozen=True)
class _Summed:
    """The ingress's consumers on every provider's stream, as one."""

    delivered_seq: int
    num_pending: int
    num_ack_pending: int


class IngressWatch:
    """The NATS ingress's durable consumer, watched from a thread (its own connection, as the platform user):
    kills the ingress (``kill -9``) each time another 1/(kills + 1) of the scenario's messages has been
    delivered to it while some are delivered and not acked yet, i.e. mid-forwarding, and nats-server itself
    once (``kill -9``, its keeper restarts it on its data) between the first two; then says when every one
    is acked. (Not the ack floor: after a kill it stays below the messages in flight until ack_wait.)"""

    def __init__(self, h: Harness, n: int, kills: int = NATS_KILLS):
        self.h, self.n, self.kills = h, n, kills
        self.killed: list[int] = []
        self.server_killed: int | None = None  # the pid of the nats-server killed
        self.base: int | None = None  # the consumer's delivered sequence when the scenario began (stream kept)
        self.done = threading.Event()
        self.error: str | None = None
        self.thread = threading.Thread(target=lambda: asyncio.run(self._watch()), daemon=True, name="ingress-watch")

    def start(self) -> None:
        self.thread.start()
        while self.base is None and self.error is None:
            time.sleep(0.01)

    async def _watch(self) -> None:
        import nats
        from nats.errors import Error as NatsError

        state, spec = self.h.state, self.h.topo.nats
        platform = natsserver.credentials(self.h.stack.paths, state.providers).platform
        nc = await nats.connect(state.nats_url, user=platform.user, password=platform.password, connect_timeout=5,
                                max_reconnect_attempts=-1, error_cb=_quiet)
        js, deadline = nc.jetstream(), time.monotonic() + 300 + self.n / 5
        try:
            while time.monotonic() < deadline:
                try:  # the ingress's consumer on each provider's stream, summed
                    infos = [await js.consumer_info(spec.stream_of(p), spec.consumer) for p in self.h.state.providers]
                except (NatsError, asyncio.TimeoutError):  # nats-server restarting: ask again
                    await asyncio.sleep(0.2)
                    continue
                info = _Summed(sum(i.delivered.stream_seq or 0 for i in infos), sum(i.num_pending or 0 for i in infos),
                               sum(i.num_ack_pending or 0 for i in infos))
                delivered = info.delivered_seq
                self.base = delivered if self.base is None else self.base
                due = self.n * (len(self.killed) + 1) // (self.kills + 1)
                if len(self.killed) < self.kills and delivered - self.base >= due and info.num_ack_pending:
                    self._kill()
                elif self.killed and self.server_killed is None and delivered - self.base >= self.n // 2:
                    self._kill_server()
                if delivered - self.base >= self.n and not info.num_pending and not info.num_ack_pending:
                    self.done.set()
                    return
                await asyncio.sleep(0.005)
            self.error = f"the ingress had {delivered - self.base} of {self.n} delivered, not all acked, in time"
        except Exception as exc:  # reported in the row, never a hang
            self.error = repr(exc)
        finally:
            self.done.set()
            await nc.close()

    def _kill_server(self) -> None:
        self.server_killed = self.h.stack.server_pid(natsserver.NATS_SERVER)
        if self.server_killed:
            os.kill(self.server_killed, signal.SIGKILL)

    def _kill(self) -> None:
        pid = self.h.stack.server_pid(natsserver.NATS_INGRESS)
        if pid and pid not in self.killed:
            os.kill(pid, signal.SIGKILL)
            self.killed.append(pid)


def nats_killed(h: Harness, n: int, rng: random.Random) -> Row:
    """A burst published on NATS by the providers' own identities (structured CloudEvents on ``dcm.vm``, 10%
    duplicates, 10% reordered), the NATS ingress killed (``kill -9``) twice while forwarding it; its keeper
    restarts it and JetStream delivers again, after ack_wait, what it had not acked: every event is applied
    once, the redelivered ones end as duplicates."""
    ledger, started = Ledger(), time.monotonic()
    h.open_nats(PROVIDERS)
    watch = IngressWatch(h, n)
    watch.start()
    h.burst(ledger, n, rng, f"n{uuid.uuid4().hex[:6]}", malformed=0.0, report=h.report_nats)
    watch.done.wait()
    # Every message is on Pub/Sub; the redelivered copies may be counted before the last originals are
    # through ingest and upsert: wait on the events themselves (a real loss stays lost past the deadline).
    h.settle(ledger, timeout=120 + n / 10)
    deadline = time.monotonic() + 60 + n / 10
    while h.lost(ledger) and time.monotonic() < deadline:
        time.sleep(1)
    row = h.row("nats ingress killed", ledger, started, timeout=120 + n / 10)
    if watch.error or len(watch.killed) < NATS_KILLS or not watch.server_killed:
        row.errors += 1
    row.note = (f"published on NATS as each provider's identity; kill -9 of the NATS ingress {len(watch.killed)} "
                f"times mid-forwarding and of nats-server {int(bool(watch.server_killed))} time, each restarted "
                f"by its keeper; what the ingress had not acked delivered again after "
                f"ack_wait ({h.topo.nats.ack_wait_seconds} s)" + (f"; {watch.error}" if watch.error else ""))
    return row


POISON = 1000  # issue 37: 1,000 unforwardable messages filled the one shared consumer's max_ack_pending


class StoredWatch:
    """When each of the events it is given (ledger ids, with when their publish was acked) is first seen stored,
    polled from a thread while they are being published."""

    def __init__(self, h: Harness):
        self.h, self.acked, self.seen = h, {}, {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True, name="stored-watch")
        self.thread.start()

    def acked_now(self, event: str) -> None:
        self.acked[event] = time.monotonic()

    def _poll(self) -> None:
        while not self.done.is_set():
            refs = [self.h.db.collection("events").document(d) for d in list(self.acked) if d not in self.seen]
            now = time.monotonic()
            for chunk in _chunks(refs, 300):
                self.seen.update({s.id: now for s in self.h.db.get_all(chunk) if s.exists})
            time.sleep(0.25)

    def wait(self, expected: int, timeout: float) -> list[float]:
        """Seconds from ack to stored of each event seen, once ``expected`` are (or at ``timeout``), sorted."""
        deadline = time.monotonic() + timeout
        while len(self.seen) < expected and time.monotonic() < deadline:
            time.sleep(0.25)
        self.done.set()
        self.thread.join(10)
        return sorted(max(0.0, self.seen[d] - self.acked[d]) for d in list(self.seen))


class ForwardWatch:
    """When the NATS ingress forwarded each event to a provider's ingress topic: a subscription of its own on
    that topic (beside ingest's), pulled from a thread; the event's ledger id from its CloudEvent."""

    def __init__(self, h: Harness, provider: str, tag: str):
        from google.cloud import pubsub_v1

        self.provider, self.at = provider, {}
        self.subscriber = pubsub_v1.SubscriberClient()
        self.path = self.subscriber.subscription_path(h.state.project, f"rel-forwarded-{tag}")
        self.subscriber.create_subscription(name=self.path, topic=h.topic(provider))
        self.future = self.subscriber.subscribe(self.path, self._received)

    def _received(self, message: Any) -> None:
        import orjson

        try:
            event = orjson.loads(message.data)
            self.at.setdefault(event_identity(self.provider, event["source"], event["id"]), time.monotonic())
        except (ValueError, KeyError, TypeError):
            pass
        message.ack()

    def close(self) -> None:
        self.future.cancel()
        self.subscriber.delete_subscription(subscription=self.path)
        self.subscriber.close()


def _p(latencies: list[float], q: float) -> float:
    return latencies[min(len(latencies) - 1, int(len(latencies) * q))] if latencies else float("nan")


def poisoned_nats(h: Harness, n: int = POISON) -> Row:
    """One provider (aws) publishes ``n`` messages Pub/Sub can never carry (a ``ce-`` header whose name is longer
    than its 256-byte attribute key) and ``n`` valid events, while another (vmware) publishes ``n`` valid events,
    each on NATS as its own identity: every valid event is stored once, the poisoned ones are dead-lettered as
    ``oversize`` (without that header), and the quiet provider's events are stored as soon as ever (its p99,
    from the publish's ack to the event stored, printed)."""
    ledger, started = Ledger(), time.monotonic()
    poisoned, quiet = PROVIDERS[0], PROVIDERS[2]
    nats = h.open_nats([poisoned, quiet])
    tag = f"p{uuid.uuid4().hex[:6]}"
    long_key = "ce-" + "x" * 300
    base = datetime.now(timezone.utc) - timedelta(hours=1)
    poison = [nats.publish(poisoned, "dcm.vm", to_message(build_event(
        poisoned, "vm", f"{tag}-poison-{i}", "RUNNING", "poison", event_id=f"{tag}-poison-{i}"))[0],
        uuid.uuid4().hex, {long_key: "x"}) for i in range(n)]
    futures: list[Future] = []
    watch, forwarded = StoredWatch(h), ForwardWatch(h, quiet, tag)
    for i in range(n):  # interleaved: aws's valid events behind its poison, vmware's beside them
        h.report_nats(ledger, poisoned, f"{tag}-a{i}", "RUNNING", base + timedelta(milliseconds=i), f"{tag}-a{i}",
                      futures)
        h.report_nats(ledger, quiet, f"{tag}-q{i}", "RUNNING", base + timedelta(milliseconds=i), f"{tag}-q{i}",
                      futures)
        event = event_identity(quiet, f"{quiet}-reliability", f"{tag}-q{i}")
        futures[-1].add_done_callback(lambda _, event=event: watch.acked_now(event))  # in its stream from then
    for f in poison + futures:
        f.result(timeout=120)
    latencies = watch.wait(n, timeout=120 + n / 10)
    forwarded.close()
    through = sorted(max(0.0, forwarded.at[d] - watch.acked[d]) for d in watch.acked if d in forwarded.at)
    row = h.row("poisoned NATS provider", ledger, started, timeout=120 + n / 10)
    from shared.deadletter.store import DeadLetterStore

    letters = [e for e in DeadLetterStore(h.db).query(reason="oversize", provider=poisoned)
               if tag in str(e.get("data"))]
    dead = sum(int(e.get("occurrences", 1)) for e in letters)
    carried_key = sum(1 for e in letters if long_key in (e.get("attributes") or {}))
    row.deadlettered = dead
    if dead != n or carried_key:
        row.errors += 1
    row.note = (f"{poisoned}: {n} with a {len(long_key)}-byte ce- header name + {n} valid; {quiet}: {n} valid, "
                f"on NATS; "
                f"{dead} dead-lettered as oversize ({carried_key} carrying the header); {quiet}'s events, from "
                f"JetStream's ack of their publish: forwarded by the ingress {_p(through, 0.5):.2f} s (median) / "
                f"{_p(through, 0.99):.2f} s (p99) ({len(through)} of {n}), stored {_p(latencies, 0.5):.1f} s / "
                f"{_p(latencies, 0.99):.1f} s ({len(latencies)} of {n}: the emulators' pipeline drains the burst)")
    return row


def unaccounted(missing: list[str], key_of: dict[str, str], docs: dict[str, dict[str, Any]]) -> list[str]:
    """The events of ``missing`` (no ledger entry) that their resource's document does not account for as
    re-reports of unchanged state (which write no ledger entry): by id in its ring of the latest
    ``RE_REPORT_RING``, or by count beyond it (``documentReReports`` counts every one the document took,
    the ring names the last ones: a resource re-reported 20 times without a ledger entry, as a burst
    reordered under load does, holds 4 that only the count vouches for). An event the count does not
    cover either is lost."""
    by_key: dict[str, list[str]] = {}
    for d in missing:
        by_key.setdefault(key_of[d], []).append(d)
    out: list[str] = []
    for key, ids in by_key.items():
        doc = docs.get(key) or {}
        ring = {e.get("id") for e in doc.get(RE_REPORTED) or []}
        beyond = max(0, int(doc.get(DOCUMENT_RE_REPORTS, 0)) - len(ring))
        out += [d for d in ids if d not in ring][beyond:]
    return out


def hot_resource(h: Harness, n: int) -> Row:
    ledger, started = Ledger(), time.monotonic()
    futures: list[Future] = []
    base = datetime.now(timezone.utc) - timedelta(hours=1)
    rid = f"hot-{uuid.uuid4().hex[:6]}"
    per_second = 100
    for i in range(n):
        h.report(ledger, "aws", rid, ["RUNNING", "STOPPED"][i % 2], base + timedelta(milliseconds=10 * i),
                 f"{rid}-{i}", futures)
        if i % per_second == per_second - 1:
            time.sleep(max(0.0, (i + 1) / per_second - (time.monotonic() - started)))
    for f in futures:
        f.result(timeout=120)
    burst = time.monotonic() - started
    row = h.row("hot resource", ledger, started, timeout=120 + n / 10)
    ref = h.db.collection("resources").document(ResourceKey("aws", "vm", rid).doc_id)
    writes = (ref.get().to_dict() or {}).get("documentWrites", 0)
    history = (h.db.collection(LEDGER).where(filter=FieldFilter("key", "==", f"aws/vm/{rid}"))  # its history:
               .where(filter=FieldFilter("outcome", "in", sorted(HISTORY_OUTCOMES)))  # its ledger entries that
               .count().get()[0][0].value)  # carry it (issue 32)
    row.lost += abs(history - (row.applied + row.stale))  # every update that changed something is in history
    row.note = (f"{n} updates of one resource, {per_second}/s for {burst:.1f} s: its document written {writes} times "
                f"({writes / row.seconds:.1f}/s over the row), history {history} = applied + stale")
    return row


def flooding(h: Harness, n: int, rng: random.Random) -> Row:
    """A flooding provider next to a quiet one: the quiet one's updates still land (latency measured)."""
    ledger, started = Ledger(), time.monotonic()
    quiet: list[tuple[str, float]] = []
    tag = f"f{uuid.uuid4().hex[:6]}"

    def quietly(k: int) -> None:
        if k % max(1, n // 20) == 0:
            futures: list[Future] = []
            rid = f"{tag}-quiet-{k}"
            h.report(ledger, "vmware", rid, "RUNNING", datetime.now(timezone.utc), f"{rid}-0", futures, rtype="volume")
            futures[0].result(timeout=60)
            quiet.append((f"vmware/volume/{rid}", time.monotonic()))
    h.burst(ledger, n, rng, tag, providers=["aws"], duplicates=0.0, reorder=0.0, malformed=0.0, during=quietly)
    latencies = []
    for key, sent in quiet:
        ref = h.db.collection("resources").document(ResourceKey.parse(key).doc_id)
        while not ref.get().exists and time.monotonic() - sent < 120:
            time.sleep(0.2)
        latencies.append(time.monotonic() - sent)
    row = h.row("flooding provider", ledger, started, timeout=60 + n / 10)
    latencies.sort()
    row.note = (f"aws floods; {len(quiet)} vmware updates stored within "
                f"{latencies[len(latencies) // 2]:.1f} s (median) / {latencies[-1]:.1f} s (max)")
    return row


def spoofing(h: Harness, n: int) -> Row:
    ledger, started = Ledger(), time.monotonic()
    pending = []
    for i in range(n):  # azure's events, published on aws's topic
        event = build_event("azure", "vm", f"spoof-{i}", "RUNNING", "not mine", event_id=f"spoof-{uuid.uuid4().hex}")
        data, attrs = to_message(event)
        pending.append((h.topo.topic("ingress", "aws"), h.publisher.publish(h.topic("aws"), data, **attrs)))
        ledger.published += 1
    ledger.invalid += [(t, f.result(timeout=60)) for t, f in pending]
    row = h.row("spoofed provider", ledger, started, timeout=60 + n / 10)
    applied = sum(1 for _ in h.db.collection("resources").stream())
    row.wrong += applied
    row.note = f"{applied} applied; every one dead-lettered as provider_mismatch" if not applied else "APPLIED"
    row.note += "; " + push_auth()
    return row


def collisions(h: Harness, n: int, rng: random.Random) -> Row:
    """Two providers report under one CloudEvent source and the same ids, each on its own topic (issue 25,
    item 1: a provider must not be able to have another's event taken for a duplicate), in random order,
    each event the first report of its resource, 10% of them published twice by their provider: every
    event of both is applied, only the second publications are duplicates."""
    ledger, started = Ledger(), time.monotonic()
    tag = f"x{uuid.uuid4().hex[:6]}"
    source, base = f"shared-source-{tag}", datetime.now(timezone.utc) - timedelta(hours=1)
    futures: list[Future] = []
    for i in range(max(1, n // 2)):
        pair = ["aws", "azure"]
        rng.shuffle(pair)
        for provider in pair:
            for _ in range(2 if rng.random() < 0.10 else 1):
                h.report(ledger, provider, f"{tag}-{i}", "RUNNING", base + timedelta(milliseconds=i), f"{tag}-{i}",
                         futures, source=source)
    for f in futures:
        f.result(timeout=120)
    row = h.row("cross-provider collisions", ledger, started, timeout=60 + n / 10)
    distinct = len(ledger.events)
    row.lost += max(0, distinct - row.applied)  # an event of either provider not applied: lost to a collision
    row.note = (f"aws and azure, one source, {distinct // 2} shared ids ({distinct} events, each its resource's "
                f"first): {row.applied} applied; {row.duplicate} duplicates = the {row.published - distinct} "
                f"second publications")
    if row.duplicate != row.published - distinct:
        row.wrong += abs(row.duplicate - (row.published - distinct))
    return row


def push_auth() -> str:
    """Production mode (no DCM_LOCAL_MODE): a push without a token, or with a forged one, is refused."""
    code = r"""
import os, sys
os.environ.pop("DCM_LOCAL_MODE", None)
os.environ.update(DCM_PROJECT="p", DCM_PUSH_AUDIENCE="https://ingest.example",
                  DCM_PUSH_SERVICE_ACCOUNT="invoker@p.iam.gserviceaccount.com")
from functions_framework import create_app
app = create_app("ingest", "functions/ingest/main.py", "cloudevent").test_client()
body = {"message": {"data": "e30=", "messageId": "1"}, "subscription": "s"}
codes = [app.post("/projects/p/topics/t", json=body, headers=h).status_code
         for h in ({}, {"Authorization": "Bearer forged.token.here"}, {"Authorization": "Basic x"})]
print(" ".join(map(str, codes)))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "DCM_LOCAL_MODE"})
    codes = out.stdout.strip().split()[-3:] if out.returncode == 0 else ["error"]
    return f"push auth: missing/forged/wrong-scheme tokens -> {'/'.join(codes)}"


def fuzz(n: int) -> Row:
    started = time.monotonic()
    env = {**os.environ, "DCM_FUZZ_EXAMPLES": str(n)}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                          "tests/functional/test_fuzz.py"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                         timeout=3600)
    tally = re.search(r"fuzz: (\{.*\})", out.stdout)
    counts = ast.literal_eval(tally.group(1)) if tally else {}
    failed = re.search(r"(\d+) failed", out.stdout)
    row = Row("fuzz (hypothesis)", counts.get("ingest inputs", 0) + counts.get("upsert inputs", 0),
              errors=int(failed.group(1)) if failed else (0 if out.returncode == 0 else 1),
              seconds=time.monotonic() - started)
    row.deadlettered = counts.get("dead-lettered", 0) + counts.get("upsert dead-lettered", 0)
    row.applied = counts.get("forwarded", 0) + counts.get("upsert acked", 0)
    row.note = (f"{counts.get('ingest inputs', 0)} mutated events through ingest->upsert->deadletter, "
                f"{counts.get('upsert inputs', 0)} mutated internal messages into upsert; every one acked")
    return row


def selected(name: str, only: list[str] | None) -> bool:
    """Whether scenario ``name`` runs: all of them, or those whose name contains one of ``only``."""
    return not only or any(o.lower() in name.lower() for o in only)


def run(events: int, quick: bool, only: list[str] | None = None) -> list[Row]:
    rng = random.Random(7)
    state_dir = Path(tempfile.mkdtemp(prefix="dcm-reliability-"))
    stack = LocalStack(state_dir, project=f"dcm-rel-{uuid.uuid4().hex[:6]}")
    state = stack.up(PROVIDERS, chaos=True)
    rows: list[Row] = []
    h: Harness | None = None
    try:
        h = Harness(stack, state)
        small = max(100, events // 10)
        loaded = 300 if quick else small  # the paced burst: 300 updates with upsert killed halfway
        scenarios = [("burst", lambda: burst(h, events, rng)),
                     ("outage 10 s", lambda: outage(h, small, rng, 10, "outage 10 s")),
                     ("hot resource", lambda: hot_resource(h, 300 if quick else 1000)),
                     ("flooding provider", lambda: flooding(h, small, rng)),
                     ("spoofed provider", lambda: spoofing(h, 50 if quick else 200)),
                     ("cross-provider collisions", lambda: collisions(h, small, rng))]
        scenarios += [("function killed", lambda: killed(h, small, rng)),
                      ("server killed under load", lambda: killed_under_load(h, loaded, rng, "server")),
                      ("worker killed under load", lambda: killed_under_load(h, loaded, rng, "worker")),
                      ("outage > retries", lambda: outage(h, 100 if quick else 300, rng,
                                                          stack.outage_beyond_retries(state), "outage > retries")),
                      ("nats ingress killed", lambda: nats_killed(h, min(events, NATS_BURST), rng)),
                      ("poisoned NATS provider", lambda: poisoned_nats(h))]
        for name, scenario in scenarios:
            if not selected(name, only):
                continue
            h.reset()
            row = scenario()
            rows.append(row)
            print(row.line(), flush=True)
    finally:
        if h is not None:
            h.close()
        stack.down()
    if selected("fuzz (hypothesis)", only):
        row = fuzz(events)
        rows.append(row)
        print(row.line(), flush=True)
    return rows


def markdown(rows: list[Row], events: int) -> str:
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    lines = ["# Reliability", "",
             f"Measured by `make reliability` (`python -m infra.reliability --events {events}`) on "
             f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {machine}, with the official Pub/Sub and Firestore "
             "emulators. Every scenario starts on empty subscriptions and a fresh Firestore; `lost` looks every "
             "published message up; "
             "`wrong` compares every resource's final status with the last one reported.", "",
             "| scenario | published | applied | unchanged | duplicate | stale | dead-lettered | lost | wrong | 5xx "
             "| seconds | note |", "|---|" + "---:|" * 10 + "---|"]
    for r in rows:
        lines.append(f"| {r.scenario} | {r.published} | {r.applied} | {r.unchanged} | {r.duplicate} | {r.stale} | "
                     f"{r.deadlettered} | {r.lost} | {r.wrong} | {r.errors} | {r.seconds:.0f} | {r.note} |")
    lines += ["", "The fuzz row counts inputs, not messages: `applied` is what was forwarded or acked, "
              "`dead-lettered` what was rejected with a reason; `5xx` is a failing property (a function "
              "answering an error it would be retried for).", "",
              "`function killed` and `outage > retries` make pushes fail en masse. The local stack declares "
              "delivery so that the Pub/Sub emulator neither stops an ordered subscription nor strands a failed "
              "push (no ordering, no back-off, attempts spanning the declared schedule) and restarts a killed "
              "function server on its port: see `docs/local-stack.md`.", "",
              "`server killed under load` and `worker killed under load` kill upsert's gunicorn master, then "
              "one of its workers, halfway through a paced burst with pushes in flight: the keeper ends a dead "
              "server's orphaned workers before restarting it (they held its port), the emulator sends a push "
              "cut mid-request again, and one never answered is failed at the push deadline (the ack "
              "deadline, as in production): see `docs/local-stack.md`.", "",
              "`nats ingress killed` publishes its burst on NATS (the real nats-server), each provider as its own "
              "NATS identity, and kills the NATS ingress twice while it has messages delivered and not acked: "
              "JetStream delivers them again after ack_wait, a copy already on Pub/Sub is dropped as a duplicate "
              "by ingest and upsert: see `docs/nats.md`.", "",
              "`poisoned NATS provider` has one provider publish 1,000 messages Pub/Sub can never carry (a `ce-` "
              "header name over its 256-byte attribute key) and 1,000 valid ones on NATS while another publishes "
              "1,000 valid ones: the poisoned ones are dead-lettered as `oversize` without that header, every valid "
              "event is stored once, and the quiet provider's p99 is printed (a stream, a consumer and a budget of "
              "unsettled messages per provider: `docs/nats.md`, `docs/security.md` item 15).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.reliability", description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000, help="messages in the burst and fuzz inputs")
    parser.add_argument("--quick", action="store_true", help="a short run (CI): 300 events")
    parser.add_argument("--write", type=Path, default=None, help="write the table as Markdown here")
    parser.add_argument("--only", action="append", metavar="SCENARIO",
                        help="run only the scenarios whose name contains this (repeatable), e.g. --only 'under load'")
    args = parser.parse_args(argv)
    events = 300 if args.quick else args.events
    print(HEADER, flush=True)
    rows = run(events, args.quick, args.only)
    if args.write:
        args.write.write_text(markdown(rows, events))
        print(f"wrote {args.write}")
    bad = [r.scenario for r in rows if r.lost or r.wrong or r.errors]
    if bad:
        print(f"FAILED: {', '.join(bad)}", file=sys.stderr)
    print(f"reliability: {len(rows) - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
