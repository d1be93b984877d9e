"""The long-running NATS ingress: a durable JetStream pull consumer per provider, forwarding each batch to Pub/Sub.

Not a push function: it holds the consumers. On Cloud Run it is a service with one instance at least,
whose ``$PORT`` answers the health check (``shared/nats_ingress/health.py``). For each provider of the
settings it creates that provider's stream when none exists (the topology's: limits retention, the provider's
status subjects (one token after ``dcm.``), its age, its storage with discard new, republishing what it
stores for the control-plane's stream; an existing stream is used as it is) and its own durable consumer
there (explicit ack, redelivery after ``ack_wait``, ``max_ack_pending`` unsettled at most, no delivery limit
of its own: ``forward.py`` dead-letters past ``max_deliver``); and the control-plane's stream when missing.

Each provider has a loop of its own (fetch a batch from its consumer, forward it, fetch again): a provider
whose messages are slow to forward, or flood, or are nak'ed again and again holds its own consumer and
budget only, never another provider's (issue 37: one shared consumer's ``max_ack_pending`` of 1,000 was
filled by one provider's unforwardable messages, and nothing of anyone's was forwarded).

NATS down or restarting: nats-py reconnects without limit, the loop waits, unacked messages stay in the
stream. Killed (``kill -9``): what it had not acked is delivered again after ``ack_wait``; what it had
published but not acked is forwarded twice, and ingest and upsert drop the second (the provider's
source + id): nothing is applied twice.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any, Callable, Sequence

import nats
from dcm_status_contracts.errors import ConfigError
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import (AckPolicy, ConsumerConfig, DeliverPolicy, DiscardPolicy, RePublish, RetentionPolicy,
                         StorageType, StreamConfig)
from nats.js.errors import NotFoundError

from shared.nats_ingress.forward import Forwarder
from shared.nats_ingress.health import IngressHealth, serve
from shared.nats_ingress.route import Inbound
from shared.runtime import settings as settings_module
from shared.runtime import tracing
from shared.runtime.clients import RECONNECT_OPTIONS
from shared.runtime.logs import get_logger
from shared.runtime.nats_settings import NatsSettings, nats_from_env
from shared.runtime.settings import Settings

log = get_logger("nats_ingress")
LAG_EVERY_SECONDS = 2.0
FETCH_WAIT_SECONDS = 1.0
SHUTDOWN_SECONDS = 5.0  # a stop's wait for the acks in flight (Cloud Run kills 10 s after SIGTERM)


def publisher(ordered: bool = False) -> Any:
    """A Pub/Sub publisher for the ingress: small batches (a fetched batch goes out in few
    requests); on the emulator, a channel that reconnects within a second once Pub/Sub is back (gRPC's own
    back-off grows to two minutes while it is unreachable)."""
    from google.cloud import pubsub_v1

    options: dict[str, Any] = {
        "batch_settings": pubsub_v1.types.BatchSettings(max_messages=100, max_latency=0.005),
        "publisher_options": pubsub_v1.types.PublisherOptions(enable_message_ordering=ordered)}  # a benchmark's
    host = os.environ.get("PUBSUB_EMULATOR_HOST")
    if host:
        import grpc
        from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

        channel = grpc.insecure_channel(host, options=list(RECONNECT_OPTIONS))
        options["transport"] = PublisherGrpcTransport(channel=channel)
    return pubsub_v1.PublisherClient(**options)


def stream_config(n: NatsSettings, provider: str) -> StreamConfig:
    """``provider``'s stream: its status subjects alone, its own storage limits (discard new: a full stream
    refuses its provider's publishes and keeps what it holds), republishing what it stores for the
    control-plane's stream (after deduplication: what a provider's Nats-Msg-Id dropped is not republished)."""
    republish = RePublish(src=">", dest=f"{n.control_plane_prefix}>") if n.control_plane_stream else None
    return StreamConfig(name=n.stream_of(provider), subjects=[n.subject_of(provider)],
                        retention=RetentionPolicy.LIMITS, storage=StorageType.FILE,
                        max_age=float(n.max_age_seconds) or None, max_bytes=n.max_bytes, max_msgs=n.max_msgs,
                        discard=DiscardPolicy.NEW, republish=republish)


def control_plane_stream_config(n: NatsSettings) -> StreamConfig:
    """The stream a DCM control-plane reads: what every provider's stream stored, republished (limits
    retention, the same age; a control-plane that rewrites it on start keeps receiving: docs/nats.md)."""
    return StreamConfig(name=n.control_plane_stream, subjects=[n.control_plane_subject],
                        retention=RetentionPolicy.LIMITS, storage=StorageType.FILE,
                        max_age=float(n.max_age_seconds) or None)


def consumer_config(n: NatsSettings, provider: str) -> ConsumerConfig:
    return ConsumerConfig(durable_name=n.consumer, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
                          ack_wait=float(n.ack_wait_seconds), max_deliver=-1, filter_subject=n.subject_of(provider),
                          max_ack_pending=max(n.max_ack_pending, n.batch))


async def _ensure_stream(js: Any, config: StreamConfig) -> None:
    try:
        await js.stream_info(config.name)
    except NotFoundError:
        await js.add_stream(config)
        log.info("stream created", extra={"stream": config.name, "subjects": config.subjects})


async def ensure_stream_and_consumer(js: Any, n: NatsSettings, providers: Sequence[str]) -> None:
    """The control-plane's stream (first: the providers' streams republish into it from their first message),
    then each provider's stream and the ingress's durable consumer on it; each created when missing, else
    used as it is."""
    if n.control_plane_stream:
        await _ensure_stream(js, control_plane_stream_config(n))
    for provider in providers:
        await _ensure_stream(js, stream_config(n, provider))
        try:
            await js.consumer_info(n.stream_of(provider), n.consumer)
        except NotFoundError:
            await js.add_consumer(n.stream_of(provider), consumer_config(n, provider))
            log.info("durable consumer created", extra={"stream": n.stream_of(provider), "consumer": n.consumer})


async def connect(n: NatsSettings, health: IngressHealth, name: str = "dcm-nats-ingress") -> Any:
    """A connection that reconnects without limit, its state told to ``health`` (no credential logged)."""

    async def disconnected() -> None:
        health.connected(False)
        log.warning("NATS disconnected", extra={"labels": {"function": "nats_ingress"}})

    async def reconnected() -> None:
        health.connected(True)
        log.info("NATS reconnected", extra={"labels": {"function": "nats_ingress"}})

    async def errored(exc: Exception) -> None:
        health.error(f"NATS: {exc!r}")

    options: dict[str, Any] = {"servers": list(n.servers), "name": name, "max_reconnect_attempts": -1,
                               "reconnect_time_wait": 1, "allow_reconnect": True,
                               "disconnected_cb": disconnected, "reconnected_cb": reconnected,
                               "error_cb": errored}
    if n.creds:
        options["user_credentials"] = n.creds
    elif n.user:
        options.update(user=n.user, password=n.password)
    nc = await nats.connect(**options)
    health.connected(True)
    return nc


def inbound(msg: Any) -> Inbound:
    meta = msg.metadata
    stored = meta.timestamp.isoformat().replace("+00:00", "Z") if getattr(meta, "timestamp", None) else None
    return Inbound(msg.subject, msg.data or b"", dict(msg.headers or {}), meta.sequence.stream,
                   meta.num_delivered, stored)


async def disconnect(nc: Any) -> None:
    """Flush what is in flight (acks), bounded, then close. Not nats-py's drain(): with a pull subscription
    bound it never returns (nats-py 2.16), and a stop would wait for Cloud Run's kill. An ack lost here only
    means a redelivery after ack_wait, recognised by its stream sequence."""
    if nc.is_connected:
        try:
            await nc.flush(timeout=SHUTDOWN_SECONDS)
        except (NatsError, asyncio.TimeoutError) as exc:
            log.warning("acks in flight not flushed at stop; redelivered after ack_wait", extra={"error": repr(exc)})
    await nc.close()


class Worker:
    def __init__(self, settings: Settings, n: NatsSettings, publisher: Any, health: IngressHealth | None = None):
        if not settings.providers:
            raise ConfigError("DCM_PROVIDERS names no provider: the NATS ingress reads a stream per provider")
        self.settings, self.nats = settings, n
        self.health = health or IngressHealth()
        self.forwarder = Forwarder(settings, n, publisher, self.health)
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        nc = await connect(self.nats, self.health)
        try:
            js = nc.jetstream()
            providers = list(self.settings.providers)
            await ensure_stream_and_consumer(js, self.nats, providers)
            subs = {p: await js.pull_subscribe_bind(durable=self.nats.consumer, stream=self.nats.stream_of(p))
                    for p in providers}
            log.info("forwarding", extra={"streams": [self.nats.stream_of(p) for p in providers],
                                          "consumer": self.nats.consumer, "subject": self.nats.subject})
            await asyncio.gather(self._measure(js, providers), *(self._loop(p, sub) for p, sub in subs.items()))
        finally:
            await disconnect(nc)

    async def _loop(self, provider: str, sub: Any) -> None:
        """Fetch ``provider``'s next batch once its last one is settled: its own pace, its own budget."""
        while not self.stopping.is_set():
            try:
                msgs = await sub.fetch(self.nats.batch, timeout=FETCH_WAIT_SECONDS)
            except (NatsTimeout, asyncio.TimeoutError):
                continue
            except NatsError as exc:  # disconnected, server restarting: wait for the reconnect
                self.health.error(f"fetch {provider}: {exc!r}")
                await asyncio.sleep(0.5)
                continue
            await self.forwarder.forward([(inbound(m), m) for m in msgs])

    async def _measure(self, js: Any, providers: Sequence[str]) -> None:
        while not self.stopping.is_set():
            await self._measure_lag(js, providers)
            try:
                await asyncio.wait_for(self.stopping.wait(), LAG_EVERY_SECONDS)
            except asyncio.TimeoutError:
                pass

    async def _measure_lag(self, js: Any, providers: Sequence[str]) -> None:
        by_provider: dict[str, dict[str, int]] = {}
        for provider in providers:
            try:
                info = await js.consumer_info(self.nats.stream_of(provider), self.nats.consumer)
                by_provider[provider] = {"lag": info.num_pending or 0, "ackPending": info.num_ack_pending or 0}
            except (NatsError, asyncio.TimeoutError) as exc:
                self.health.error(f"consumer info {provider}: {exc!r}")
                return
        self.health.lag(sum(v["lag"] for v in by_provider.values()),
                        sum(v["ackPending"] for v in by_provider.values()), by_provider)


def main(read_settings: Callable[[], Settings] = settings_module.from_env,
         read_nats: Callable[[], NatsSettings] = nats_from_env) -> int:
    """Run the ingress until SIGTERM/SIGINT, with the settings the environment gives (a mistake: one line on
    stderr, exit 2)."""
    try:
        settings, n = read_settings(), read_nats()
    except ConfigError as exc:
        print(f"nats_ingress cannot start: {exc}", file=sys.stderr)
        return 2
    provider = tracing.configure("nats_ingress", settings)
    try:
        worker = Worker(settings, n, publisher())
    except ConfigError as exc:
        print(f"nats_ingress cannot start: {exc}", file=sys.stderr)
        return 2
    server = serve(worker.health, n.health_port, n.health_host)
    try:
        return asyncio.run(_run(worker))
    finally:
        server.shutdown()
        provider.shutdown()  # the spans still batched, exported


async def _run(worker: Worker) -> int:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, worker.stopping.set)
    while not worker.stopping.is_set():
        try:
            await worker.run()
        except (NatsError, OSError, asyncio.TimeoutError) as exc:  # NATS not there (yet): try again
            worker.health.connected(False)
            worker.health.error(f"NATS: {exc!r}")
            log.warning("NATS unavailable, retrying in 1 s", extra={"error": repr(exc)[:300]})
            await asyncio.sleep(1.0)
    return 0
