"""The reliability harness: a local stack with a fault proxy, the record of what each scenario published,
and how it is accounted for (``Harness.account``: applied, unchanged, duplicate, stale, dead-lettered, lost,
wrong)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import sys
import threading
import time
import uuid
from concurrent.futures import Future
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from dcm_status_contracts import timeutil
from dcm_status_contracts.model import ResourceKey, event_identity
from dcm_status_contracts.pubsub_binding import to_message
from dcm_status_contracts.status_report import build_event
from dcm_status_sdk import Reporter, ReporterConfig, ReportForm
from google.api_core.exceptions import DeadlineExceeded, ServiceUnavailable
from google.cloud.firestore_v1.base_query import FieldFilter

from infra import nats_accounts
from infra.local import emulators
from infra.local.stack import LocalStack
from infra.local.state import StackState
from infra.reliability.accounting import Published, Row, unaccounted
from shared.api import queries
from shared.state import resources

PROVIDERS = ["aws", "azure", "vmware"]
IN_FLIGHT_SECONDS = 3  # a push under way when its subscription is purged: its Firestore calls time out in 2 s
READ_PATIENCE = 300  # seconds the accounting asks a loaded emulator again before it gives up
CONVERGE_SECONDS = 20  # a hot resource's document: a write token (1 s), then the sweep's next tick (5 s locally)
LIFECYCLE = ["PROVISIONING", "RUNNING", "STOPPING", "STOPPED", "RUNNING", "PAUSED", "RUNNING", "DELETING",
             "DELETED"]
MALFORMED = [b"not json", b'{"specversion": "1.0"}', b"[1, 2, 3]"]


NATS_PUBLISH_ATTEMPTS = 10  # a provider's publish, sent again while nats-server restarts


async def quiet(exc: Exception) -> None:
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
                                      max_reconnect_attempts=-1, error_cb=quiet) for p, i in identities.items()}

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
        """A clean start for the next scenario: the consumers' backlog of the last one dropped (audit and
        notify trail upsert; left running, their messages would fail on the wiped Firestore
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

    def report(self, published: Published, provider: str, rid: str, status: str, at: datetime, event_id: str,
               futures: list[Future], rtype: str = "vm", source: str | None = None) -> None:
        source = source or f"{provider}-reliability"
        futures.append(self.reporter(provider, source).publish_now(rtype, rid, status, f"{status.lower()}",
                                                                   time=timeutil.format(at), event_id=event_id))
        self.record(published, provider, rid, status, at, event_id, rtype, source)

    def report_nats(self, published: Published, provider: str, rid: str, status: str, at: datetime, event_id: str,
                    futures: list[Future], rtype: str = "vm", source: str | None = None) -> None:
        """The same report, published on NATS as an upstream provider does: the structured CloudEvent on
        ``dcm.{type}``, with JetStream, as the provider's own NATS identity (``self.nats``)."""
        assert self.nats is not None, "open_nats() first"
        source = source or f"{provider}-reliability"
        event = build_event(provider, rtype, rid, status, status.lower(), event_id=event_id,
                            time=timeutil.format(at), source=source)
        futures.append(self.nats.publish(provider, f"dcm.{rtype}", to_message(event)[0],
                                         uuid.uuid4().hex))  # one id per publication, its retries share it
        self.record(published, provider, rid, status, at, event_id, rtype, source)

    def record(self, published: Published, provider: str, rid: str, status: str, at: datetime, event_id: str,
               rtype: str, source: str) -> None:
        """One published report in the record: its identity, and its resource's newest status."""
        key = f"{provider}/{rtype}/{rid}"
        published.events[event_identity(provider, source, event_id)] = (key, status)
        stamp = timeutil.format(at)
        if key not in published.final or stamp > published.final[key][0]:
            published.final[key] = (stamp, status)
        published.count += 1

    def malformed(self, published: Published, provider: str, rng: random.Random, pending: list) -> None:
        future = self.publisher.publish(self.topic(provider), rng.choice(MALFORMED))
        pending.append((self.topo.topic("ingress", provider), future))
        published.count += 1

    def burst(self, published: Published, n: int, rng: random.Random, tag: str, providers: list[str] = PROVIDERS,
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
                (report or self.report)(published, *item[1:], futures)
            else:
                self.malformed(published, item[1], rng, invalid)
            if during:
                during(k)
        for f in futures:
            f.result(timeout=120)
        published.invalid += [(topic, f.result(timeout=120)) for topic, f in invalid]

    # ---- accounting ----------------------------------------------------------------------
    def settle(self, published: Published, timeout: float) -> dict[str, int]:
        """Wait until the counters account for every published message (or timeout: the counters as last
        read, the row then shows what is missing; a count the emulator could not answer before the timeout
        was a count it answered before, not a crash of the whole run)."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            try:
                s = last = queries.stats(self.db)
            except (DeadlineExceeded, ServiceUnavailable):  # the emulator slow under load: look again
                if time.monotonic() > deadline:
                    if last is not None:
                        return last
                    raise
                time.sleep(1)
                continue
            if s["received"] >= published.count or time.monotonic() > deadline:
                return s
            time.sleep(1)

    def row(self, name: str, published: Published, started: float, timeout: float, note: str = "") -> Row:
        s = self.settle(published, timeout)
        lost = self.lost_events(published)
        wrong = self.wrong(published)
        if lost or wrong:
            self.explain(name, published, lost, wrong)
        return Row(name, published.count, s["applied"], s["unchanged"], s["duplicate"], s["stale"],
                   s["deadlettered"], len(lost), wrong, 0, time.monotonic() - started, note)

    def documents(self, refs: list) -> list:
        """The snapshots of ``refs``, 300 a call, each call asked again while the emulator is too loaded to answer
        in time (``READ_PATIENCE``): a slow emulator is no loss, and must not end the run."""
        return [s for chunk in chunks(refs, 300) for s in self.patiently(lambda c=chunk: list(self.db.get_all(c)))]

    def streamed(self, query: Any) -> list:
        return self.patiently(lambda: list(query.stream()))

    @staticmethod
    def patiently(read: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + READ_PATIENCE
        while True:
            try:
                return read()
            except (DeadlineExceeded, ServiceUnavailable):
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    def lost(self, published: Published) -> int:
        return len(self.lost_events(published))

    def lost_events(self, published: Published) -> list[str]:
        """The valid events with no ledger entry, no place in their resource's re-reports and no dead letter
        of their resource, then one ``invalid:TOPIC:ID`` per malformed message with no dead letter."""
        refs = [self.db.collection("events").document(d) for d in published.events]
        found = {s.id for s in self.documents(refs) if s.exists}
        missing = self.not_re_reported([d for d in published.events if d not in found], published)
        open_dead = {e.get("key") for e in self.streamed(self.db.collection("deadletters"))}
        lost = [d for d in missing if published.events[d][0] not in open_dead]
        entry_ids = {hashlib.sha256(f"{topic}\x00{mid}".encode()).hexdigest()[:32]: f"invalid:{topic}:{mid}"
                     for topic, mid in published.invalid}
        refs = [self.db.collection("deadletters").document(e) for e in entry_ids]
        stored = {s.id for s in self.documents(refs) if s.exists}
        return lost + [name for e, name in entry_ids.items() if e not in stored]

    def explain(self, scenario: str, published: Published, lost: list[str], wrong: int, most: int = 10) -> None:
        """What the store holds for the first ``most`` lost events and wrong resources, on stderr (the table
        counts them; this says which, so that a failing row can be looked into)."""
        print(f"{scenario}: {len(lost)} lost, {wrong} wrong", file=sys.stderr)
        for d in lost[:most]:
            key, status = published.events.get(d, ("", ""))
            print(f"  lost {d} ({key} {status}): stored {self.status_of(key) if key else '-'}, "
                  f"dead letters of its resource {self.dead_letters_of(key) if key else '-'}", file=sys.stderr)
        shown = 0
        for key, (_, want) in published.final.items() if wrong else ():
            if shown == most:
                break
            stored = self.status_of(key)
            if stored != (want, want):
                shown += 1
                print(f"  wrong {key}: reported last {want}, stored (document, newest) {stored}, "
                      f"dead letters {self.dead_letters_of(key)}", file=sys.stderr)

    def status_of(self, key: str) -> tuple[str | None, str | None]:
        [snap] = self.documents([self.db.collection("resources").document(ResourceKey.parse(key).doc_id)])
        doc = snap.to_dict() if snap.exists else None
        return (doc or {}).get("status"), (self.patiently(lambda: resources.newest(self.db, doc)) or {}).get("status")

    def dead_letters_of(self, key: str) -> list[str]:
        """``reason xOCCURRENCES (state)`` of each dead letter of ``key``."""
        query = self.db.collection("deadletters").where(filter=FieldFilter("key", "==", key))
        return [f"{d.get('reason')} x{d.get('occurrences', 1)} ({d.get('state')})"
                for d in (s.to_dict() for s in self.streamed(query))]

    def not_re_reported(self, missing: list[str], published: Published) -> list[str]:
        """The events of ``missing`` (no ledger entry) that are not re-reports their resource holds
        (``unaccounted``)."""
        keys = sorted({published.events[d][0] for d in missing})
        refs = [self.db.collection("resources").document(ResourceKey.parse(k).doc_id) for k in keys]
        docs = {s.to_dict()["key"]: s.to_dict() for s in self.documents(refs) if s.exists}
        return unaccounted(missing, {d: published.events[d][0] for d in missing}, docs)

    def wrong(self, published: Published, converge: float = CONVERGE_SECONDS) -> int:
        """Resources whose newest state (what the API serves) or whose document (what lists and counts
        read) is not the last status reported. A hot resource's document is written by the sweep once it
        may (shared/sweep/handler.py): it has ``converge`` seconds to get there."""
        deadline = time.monotonic() + converge
        while True:
            wrong = self._wrong(published)
            if not wrong or time.monotonic() > deadline:
                return wrong
            time.sleep(1)

    def _wrong(self, published: Published) -> int:
        refs = {self.db.collection("resources").document(ResourceKey.parse(k).doc_id): v
                for k, v in published.final.items()}
        wrong = 0
        for chunk in chunks(list(refs), 300):
            for snap in self.documents(chunk):
                want = refs[snap.reference][-1] if snap.reference in refs else None
                doc = snap.to_dict() if snap.exists else None
                served = self.patiently(lambda d=doc: resources.newest(self.db, d))
                wrong += (doc or {}).get("status") != want or (served or {}).get("status") != want
        return wrong


def chunks(items: list, size: int):
    for i in range(0, len(items), size):
        yield items[i:i + size]
