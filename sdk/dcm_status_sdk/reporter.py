"""Report status fire-and-forget: checked now, debounced, rate limited, published with retries.

    with Reporter(ReporterConfig(project="my-project", provider="aws")) as reporter:
        reporter.report("vm", "i-0abc", "RUNNING", "VM is running.")

``report`` builds the CloudEvent (the current upstream form: type ``dcm.status.{type}``,
source ``dcm/providers/{provider}``, ``data.id``), runs on it every check ingest runs (a
mistake raises ``Rejected`` with ingest's reason code, before anything is published), stamps
``time`` and a ``sequence`` that only increases, and hands it to a background thread. It never
waits on the network: it returns the event id at once, or raises ``Backlogged`` after
``max_block_seconds`` when ``max_pending`` resources already wait.

Each report carries W3C trace context (``traceparent``/``tracestate`` message attributes): the OpenTelemetry
span current when ``report`` is called, else a new trace (dcm_status_contracts.trace_context.for_report).
The background thread debounces and rate limits (``coalesce.py``), publishes with the resource
key as ordering key (batched by the Pub/Sub client), and retries a failed publish with back-off
until it succeeds, a newer report of the resource replaces it, or the reporter closes. The last
state of every resource reaches the topic as long as the process lives: ``flush``/``close``
before it exits.

What can never succeed is not retried (``refusal.py``): a topic that does not exist, credentials
that may not publish to it or none at all, a request Pub/Sub takes as invalid. The reports of that
publish fail at once (``Stats.failed``), ``on_refused`` is called, and ``flush``/``close`` raise
``PublishRefused``, one line naming the provider and the fix. When the whole topic is refused (all
but an invalid request), everything waiting fails with it and every later ``report`` raises it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from cloudevents.http import CloudEvent
from dcm_status_contracts import cloud_native_event as cne
from dcm_status_contracts import limits, timeutil, trace_context
from dcm_status_contracts.errors import DcmError
from dcm_status_contracts.ingress import INGRESS_TOPIC_TEMPLATE
from dcm_status_contracts.model import PubSubMessage
from dcm_status_contracts.pubsub_binding import BindingMode, from_message, to_message
from dcm_status_contracts.resync import ResyncMark
from dcm_status_contracts.schemas import status_token
from dcm_status_contracts.status_report import ReportForm, build_event, check

from .coalesce import Coalescer, Offer, TokenBucket
from .mapping import MappedStatus
from .outgoing import Outgoing, merge
from .refusal import PublishRefused, Refusal, refusal_of
from .senders import pubsub_client, sender_for
from .sequence import SequenceCounter

log = logging.getLogger("dcm_status_sdk")


class Backlogged(DcmError):
    """``max_pending`` resources already wait to be published and none left in ``max_block_seconds``."""


class FlushTimeout(DcmError):
    def __init__(self, left: int, timeout: float):
        super().__init__(f"{left} report(s) still unpublished after {timeout:g} s")
        self.left = left


@dataclass(frozen=True)
class ReporterConfig:
    project: str
    provider: str
    topic: str = INGRESS_TOPIC_TEMPLATE  # {provider} is replaced
    source: str | None = None  # default dcm/providers/{provider}
    form: ReportForm = ReportForm.CURRENT
    binding: BindingMode = BindingMode.STRUCTURED
    debounce_seconds: float = 1.0  # per resource; 0: no window (reports made while the resource's last one
    # is still being published still coalesce: one publish per resource at a time, the latest state wins)
    rate_per_second: float | None = None  # per provider; None: no limit
    burst: int = 100
    terminal_statuses: frozenset[str] = frozenset({"DELETED", "FAILED"})
    max_pending: int = 100_000  # resources waiting to be published
    max_block_seconds: float = 0.5  # the longest report() waits for room
    sequence_file: str | Path | None = None  # keeps the sequence above its last value across restarts
    max_event_bytes: int = limits.MAX_EVENT_BYTES  # ingest's default limit
    batch_max_messages: int = 100  # per Publish RPC (several resources in one)
    max_concurrent_batches: int = 4  # Publish RPCs in flight; beyond, reports wait (and coalesce)
    publish_timeout_seconds: float = 30.0  # one Publish RPC, its own retries included
    retry_initial_seconds: float = 0.5
    retry_max_seconds: float = 30.0

    @property
    def topic_name(self) -> str:
        return self.topic.replace("{provider}", self.provider)


@dataclass(frozen=True)
class ResourceState:
    """One resource as a provider observes it (a ``resync`` snapshot is a list of these)."""

    resource_type: str
    resource_id: str
    status: str | MappedStatus
    message: str = ""
    reason: str | None = None
    metadata: Mapping[str, Any] | None = None
    resource_specific: Mapping[str, Any] | None = None
    last_transition_time: str | None = None
    # what the resource offers others (hosts, ports, connection strings): None leaves the stored map as it is,
    # a map replaces it whole ({} clears it). ``output_spec`` is the DCM control-plane's name, ``outputs`` the
    # cross-provider-outputs proposal's (docs/providers.md)
    output_spec: Mapping[str, Any] | None = None
    outputs: Mapping[str, Any] | None = None


@dataclass
class Stats:
    reported: int = 0  # report() calls accepted (resync events included)
    published: int = 0  # events the topic accepted
    replaced: int = 0  # reports replaced by a later one of their resource inside its window or queue
    failed_attempts: int = 0  # publishes that failed (and were retried or superseded)
    failed: int = 0  # reports given up because Pub/Sub refused them for good (PublishRefused)
    pending: int = 0
    in_flight: int = 0
    last_error: str | None = None
    latency_p50_ms: float | None = None  # report() until the topic accepted it, over the last 10,000 published
    latency_p99_ms: float | None = None


class Reporter:
    """Thread-safe; ``report`` is safe to call from asyncio code (it never waits on the network)."""

    def __init__(self, config: ReporterConfig, publisher: Any = None, clock: Callable[[], float] = time.monotonic,
                 on_refused: Callable[[PublishRefused], None] | None = None):
        """``on_refused``: called (on a publishing thread) each time Pub/Sub refuses reports for good."""
        self.config = config
        self._own_publisher = publisher is None
        self._publisher = publisher or pubsub_client(config.project, config.provider, config.topic_name)
        self._sender = sender_for(self._publisher, config.publish_timeout_seconds)
        self._topic = self._publisher.topic_path(config.project, config.topic_name)
        self._on_refused = on_refused
        self._refused: tuple[Refusal, BaseException] | None = None  # the whole topic, for good
        self._unraised: tuple[Refusal, BaseException] | None = None  # a refusal flush has not raised yet
        self._clock = clock
        self._sequence = SequenceCounter(config.sequence_file)
        self._coalescer: Coalescer[Outgoing] = Coalescer(
            config.debounce_seconds, TokenBucket(config.rate_per_second, config.burst), merge=merge)
        self._cond = threading.Condition()
        self._stats = Stats()
        self._closed = False
        self._batches = 0  # publish RPCs in flight
        self._latencies: deque[float] = deque(maxlen=10_000)
        self._executor = ThreadPoolExecutor(config.max_concurrent_batches,
                                            thread_name_prefix=f"dcm-status-publish-{config.provider}")
        self._thread = threading.Thread(target=self._pump, name=f"dcm-status-reporter-{config.provider}",
                                        daemon=True)
        self._thread.start()

    # ---- reporting ----------------------------------------------------------------------
    def report(self, resource_type: str, resource_id: str, status: str | MappedStatus, message: str = "", *,
               reason: str | None = None, metadata: Mapping[str, Any] | None = None,
               resource_specific: Mapping[str, Any] | None = None, last_transition_time: str | None = None,
               time: str | None = None, event_id: str | None = None, output_spec: Mapping[str, Any] | None = None,
               outputs: Mapping[str, Any] | None = None) -> str:
        """Queue one status report; returns its event id. ``Rejected`` (ingest's reason) when ingest
        would refuse it. A ``MappedStatus`` (``mapping.py``) sends its status and, unless ``reason``
        is given, its raw state as the reason. ``output_spec`` / ``outputs``: what the resource offers
        others (``ResourceState``); a report that replaces one inside the debounce window without a map
        of its own sends the replaced report's (the platform would otherwise keep an older one)."""
        state = ResourceState(resource_type, resource_id, status, message, reason, metadata, resource_specific,
                              last_transition_time, output_spec, outputs)
        key, event, terminal = self._build(state, time=time, event_id=event_id)
        self._offer([Offer(key, Outgoing(event, self._clock(), trace=trace_context.for_report()), terminal)])
        return event["id"]

    def resync(self, snapshot: Iterable[ResourceState], taken_at: str | None = None,
               scope: Iterable[str] | None = None) -> str:
        """Publish the provider's whole inventory as one marked batch; returns the batch id.

        Every event carries the resync marker (``shared/contracts/resync.py``): the batch, its size, the
        event's index, ``taken_at`` (when you began listing, RFC 3339; default now: pass the time the
        listing started, so a resource created meanwhile is not taken for gone) and the scope (the
        resource types the snapshot covers; default the types in it). The platform then finds what it
        holds that the provider no longer has. The snapshot skips the debounce window (it is the newest
        truth) but not the rate limit; it is checked whole and queued whole or not at all.
        """
        states = list(snapshot)
        if not states:
            raise ValueError("a resync snapshot needs at least one resource")
        if len({(s.resource_type, s.resource_id) for s in states}) != len(states):
            raise ValueError("a resync snapshot lists a resource twice")
        batch = uuid.uuid4().hex
        at = timeutil.canonical(taken_at) if taken_at else timeutil.now_str()
        types = tuple(sorted(set(scope) if scope is not None else {s.resource_type for s in states}))
        built = [self._build(s, extensions=ResyncMark(batch, len(states), i, at, types).attributes())
                 for i, s in enumerate(states)]
        now = self._clock()
        self._offer([Offer(key, Outgoing(event, now, trace=trace_context.for_report()), terminal, immediate=True)
                     for key, event, terminal in built])
        return batch

    def report_values(self, values: Sequence[cne.Value], *, event_type: str, source: str, time: str | None = None,
                      event_id: str | None = None) -> str:
        """Publish one Cloud Native Events event (O-RAN style: notifications and metrics about one or more
        resource addresses, ``docs/cloud-native-events.md``); returns its id. Checked as ingest checks it
        (``Rejected`` with its reason); not debounced (one event, several resources), rate limited and
        retried like any report."""
        event = cne.build_event(values, source=source, event_type=event_type, time=time, event_id=event_id,
                                extensions={"sequence": self._sequence.next()})
        data, attrs = to_message(event, self.config.binding)
        decoded = from_message(PubSubMessage(data, attrs, "local", topic=self.config.topic_name),
                               self.config.max_event_bytes)
        if not cne.is_cloud_native(decoded):
            raise ValueError(f"event type {event_type!r} is DCM's own: report() sends DCM status events")
        cne.check(decoded, self.config.topic_name, self.config.provider)
        self._offer([Offer(f"cne:{event['id']}", Outgoing(event, self._clock(), trace=trace_context.for_report()),
                           immediate=True)])
        return event["id"]

    def publish_now(self, resource_type: str, resource_id: str, status: str | MappedStatus, message: str = "", *,
                    reason: str | None = None, metadata: Mapping[str, Any] | None = None,
                    resource_specific: Mapping[str, Any] | None = None, last_transition_time: str | None = None,
                    time: str | None = None, event_id: str | None = None, output_spec: Mapping[str, Any] | None = None,
                    outputs: Mapping[str, Any] | None = None) -> Any:
        """The thin, synchronous mode: one report built and checked as ``report`` does it, published at
        once, past the debounce window, the rate limit, the queue and the retries, with no ``sequence``
        (its event time orders it) and no ordering key. Returns the publisher's future (its result is
        Pub/Sub's message id). For tests and tools that need every report on the topic as made, whatever
        its time (the platform's own tests); a provider uses ``report``."""
        state = ResourceState(resource_type, resource_id, status, message, reason, metadata, resource_specific,
                              last_transition_time, output_spec, outputs)
        _, event, _ = self._build(state, time=time, event_id=event_id, sequenced=False)
        data, attrs = Outgoing(event, self._clock(), trace=trace_context.for_report()).message(self.config.binding)
        return self._publisher.publish(self._topic, data, **attrs)

    def _build(self, state: ResourceState, *, time: str | None = None, event_id: str | None = None,
               extensions: Mapping[str, Any] | None = None, sequenced: bool = True) -> tuple[str, CloudEvent, bool]:
        status, reason = state.status, state.reason
        if isinstance(status, MappedStatus):
            status, reason = status.status, reason if reason is not None else status.raw
        event = build_event(
            self.config.provider, state.resource_type, state.resource_id, status, state.message,
            event_id=event_id, time=time, reason=reason, last_transition_time=state.last_transition_time,
            metadata=state.metadata, resource_specific=state.resource_specific, source=self.config.source,
            form=self.config.form, output_spec=state.output_spec, outputs=state.outputs,
            extensions={**({"sequence": self._sequence.next()} if sequenced else {}), **(extensions or {})})
        data, attrs = to_message(event, self.config.binding)
        checked = check(PubSubMessage(data, attrs, "local", topic=self.config.topic_name), self.config.provider,
                        self.config.max_event_bytes)  # ingest's checks: Rejected with its reason
        token = status_token(status)
        generic = token if token in checked.schema.statuses else checked.schema.aliases.get(token)
        if generic is None:
            log.warning("status %r is not in the %s enum: the platform stores it as UNKNOWN (raw kept)",
                        status, state.resource_type)
        return str(checked.key), event, generic in self.config.terminal_statuses

    def _offer(self, offers: list[Offer[Outgoing]]) -> None:
        """Queue them all or none (a resync batch stays whole): wait at most ``max_block_seconds`` for room."""
        if len(offers) > self.config.max_pending:
            raise Backlogged(f"{len(offers)} reports at once, more than max_pending {self.config.max_pending}")
        deadline = self._clock() + self.config.max_block_seconds
        with self._cond:
            while True:
                if self._refused is not None:
                    raise self._refusal(*self._refused)
                if self._closed:
                    raise RuntimeError("the reporter is closed")
                room = sum(not self._coalescer.covers(o.key) for o in offers)
                waiting = self._coalescer.resources()  # a publish in flight may fail and come back
                if waiting + room <= self.config.max_pending:
                    break
                left = deadline - self._clock()
                if left <= 0:
                    raise Backlogged(f"{waiting} resources wait to be published "
                                     f"(max_pending {self.config.max_pending})")
                self._cond.wait(left)
            now = self._clock()
            for offer in offers:
                self._coalescer.offer(offer, now)
            self._stats.reported += len(offers)
            self._cond.notify_all()

    # ---- publishing ---------------------------------------------------------------------
    def _pump(self) -> None:
        """Take up to a batch of due reports whenever a publish slot is free; one RPC per batch."""
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return  # close() flushed: what is left (after its timeout) is given up, not retried
                    if self._batches < self.config.max_concurrent_batches:
                        out, wake = self._coalescer.take(self._clock(), self.config.batch_max_messages)
                        if out:
                            self._batches += 1
                            self._stats.in_flight += len(out)
                            break
                    else:
                        wake = None  # a batch's end wakes us
                    self._cond.wait(None if wake is None else max(0.0, wake - self._clock()))
            self._executor.submit(self._send, out)

    def _send(self, offers: list[Offer[Outgoing]]) -> None:
        messages = [(*o.item.message(self.config.binding), o.key) for o in offers]
        try:
            failures = self._sender.send(self._topic, messages)
        except Exception as exc:  # what may pass is retried: the report must reach the topic
            failures = {o.key: exc for o in offers}
        with self._cond:
            refused = self._account(offers, failures)
            if refused is None:
                self._end_batch(len(offers))
                return
        self._tell(refused)  # before the batch ends: on_refused has run when flush returns
        with self._cond:
            self._end_batch(len(offers))

    def _account(self, offers: list[Offer[Outgoing]],
                 failures: Mapping[str, BaseException]) -> PublishRefused | None:
        """Each report's outcome (the lock held): published, retried, or given up; what refused them."""
        failed_before = self._stats.failed
        refused: tuple[Refusal, BaseException] | None = None
        now = self._clock()
        for offer in offers:
            self._coalescer.done(offer.key)
            error = failures.get(offer.key)
            if error is None:
                self._stats.published += 1
                self._latencies.append((now - offer.item.reported_at) * 1000)
                continue
            self._stats.last_error = f"{type(error).__name__}: {error}"
            refusal = refusal_of(error)
            if refusal is not None:
                refused = refused or (refusal, error)
                self._give_up(refusal, error)
            elif self._refused is not None:
                self._stats.failed += 1  # the topic is refused anyway: no retry
            else:
                self._stats.failed_attempts += 1
                self._retry(offer)
        return None if refused is None else self._refusal(*refused, reports=self._stats.failed - failed_before)

    def _end_batch(self, reports: int) -> None:
        self._batches -= 1
        self._stats.in_flight -= reports
        self._cond.notify_all()

    def _give_up(self, refusal: Refusal, error: BaseException) -> None:
        """One report refused for good (the lock held): counted, not retried; when the whole topic is
        refused, everything waiting fails with it (it would fail the same way)."""
        self._stats.failed += 1
        self._unraised = (refusal, error)
        if refusal.whole_topic:
            self._refused = self._refused or (refusal, error)
            self._stats.failed += self._coalescer.drop_all()

    def _refusal(self, refusal: Refusal, error: BaseException, reports: int | None = None) -> PublishRefused:
        return PublishRefused.of(error, refusal, self.config.provider, self._topic,
                                 self._stats.failed if reports is None else reports)

    def _tell(self, refused: PublishRefused) -> None:
        log.info("%s", refused)  # raised to the caller (report, flush, close): one line, not two
        if self._on_refused is not None:
            try:
                self._on_refused(refused)
            except Exception:  # the provider's callback must not stop the publishing thread
                log.exception("on_refused failed")

    def _retry(self, offer: Offer[Outgoing]) -> None:
        attempt = offer.item.attempt + 1
        delay = min(self.config.retry_max_seconds, self.config.retry_initial_seconds * 2 ** (attempt - 1))
        delay *= random.uniform(0.5, 1.0)
        log.warning("publish of %s failed (attempt %d), retrying in %.1f s: %s", offer.key, attempt, delay,
                    self._stats.last_error)
        self._coalescer.offer(Offer(offer.key, replace(offer.item, attempt=attempt), offer.terminal,
                                    not_before=self._clock() + delay), self._clock())

    # ---- lifecycle ----------------------------------------------------------------------
    def stats(self) -> Stats:
        with self._cond:
            ms = sorted(self._latencies)
        figures = {"latency_p50_ms": ms[len(ms) // 2], "latency_p99_ms": ms[min(len(ms) - 1, int(len(ms) * 0.99))]} \
            if ms else {}
        with self._cond:
            return Stats(**{**self._stats.__dict__, "replaced": self._coalescer.replaced,
                            "pending": len(self._coalescer), **figures})

    def flush(self, timeout: float | None = 30.0) -> None:
        """Publish every queued report now (no debounce wait; the rate limit still applies) and wait
        until the topic has them all; ``FlushTimeout`` says how many are left after ``timeout``,
        ``PublishRefused`` that Pub/Sub refused some for good (since the last flush; for the whole
        topic: always)."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            self._coalescer.release_all()
            self._cond.notify_all()
            while len(self._coalescer) or self._stats.in_flight:
                left = None if deadline is None else deadline - self._clock()
                if left is not None and left <= 0:
                    raise FlushTimeout(len(self._coalescer) + self._stats.in_flight, timeout or 0)
                self._cond.wait(left)
            refused, self._unraised = self._refused or self._unraised, None
            if refused is not None:
                raise self._refusal(*refused)

    def close(self, timeout: float | None = 30.0) -> None:
        """Flush, then stop the background thread (and the Pub/Sub client, when the reporter made it)."""
        try:
            self.flush(timeout)
        except FlushTimeout as exc:
            log.error("closing with %d report(s) unpublished: %s", exc.left, self._stats.last_error)
            raise
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._thread.join(timeout=1.0)
            self._executor.shutdown(wait=False, cancel_futures=True)
            if self._own_publisher:
                self._publisher.stop()

    def __enter__(self) -> "Reporter":
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        try:
            self.close()
        except PublishRefused:
            if not isinstance(exc, PublishRefused):
                raise  # otherwise the refusal is already on its way up, from report()

    async def aflush(self, timeout: float | None = 30.0) -> None:
        await asyncio.to_thread(self.flush, timeout)

    async def aclose(self, timeout: float | None = 30.0) -> None:
        await asyncio.to_thread(self.close, timeout)

    async def __aenter__(self) -> "Reporter":
        return self

    async def __aexit__(self, kind: object, exc: object, tb: object) -> None:
        try:
            await self.aclose()
        except PublishRefused:
            if not isinstance(exc, PublishRefused):
                raise
