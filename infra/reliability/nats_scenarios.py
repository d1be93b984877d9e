"""The scenarios through NATS: the NATS ingress killed mid-burst, and a poisoned provider beside a quiet one
(docs/nats.md)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from dcm_status_contracts.model import event_identity
from dcm_status_contracts.pubsub_binding import to_message
from dcm_status_contracts.status_report import build_event

from infra.local import natsserver
from infra.reliability.harness import PROVIDERS, Harness, chunks, quiet
from infra.reliability.accounting import Published, Row

NATS_KILLS = 2  # kill -9 of the NATS ingress, each with messages forwarded but not yet acked
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
                                max_reconnect_attempts=-1, error_cb=quiet)
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
    published, started = Published(), time.monotonic()
    h.open_nats(PROVIDERS)
    watch = IngressWatch(h, n)
    watch.start()
    h.burst(published, n, rng, f"n{uuid.uuid4().hex[:6]}", malformed=0.0, report=h.report_nats)
    watch.done.wait()
    # Every message is on Pub/Sub; the redelivered copies may be counted before the last originals are
    # through ingest and upsert: wait on the events themselves (a real loss stays lost past the deadline).
    h.settle(published, timeout=120 + n / 10)
    deadline = time.monotonic() + 60 + n / 10
    while h.lost(published) and time.monotonic() < deadline:
        time.sleep(1)
    row = h.row("nats ingress killed", published, started, timeout=120 + n / 10)
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
            for chunk in chunks(refs, 300):
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
    published, started = Published(), time.monotonic()
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
        h.report_nats(published, poisoned, f"{tag}-a{i}", "RUNNING", base + timedelta(milliseconds=i), f"{tag}-a{i}",
                      futures)
        h.report_nats(published, quiet, f"{tag}-q{i}", "RUNNING", base + timedelta(milliseconds=i), f"{tag}-q{i}",
                      futures)
        event = event_identity(quiet, f"{quiet}-reliability", f"{tag}-q{i}")
        futures[-1].add_done_callback(lambda _, event=event: watch.acked_now(event))  # in its stream from then
    for f in poison + futures:
        f.result(timeout=120)
    latencies = watch.wait(n, timeout=120 + n / 10)
    forwarded.close()
    through = sorted(max(0.0, forwarded.at[d] - watch.acked[d]) for d in watch.acked if d in forwarded.at)
    row = h.row("poisoned NATS provider", published, started, timeout=120 + n / 10)
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
