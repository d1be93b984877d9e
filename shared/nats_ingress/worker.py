"""The long-running NATS ingress: a durable JetStream pull consumer, forwarding each batch to Pub/Sub.

Not a push function: it holds the consumer. On Cloud Run it is a service with one instance at least,
whose ``$PORT`` answers the health check (``shared/nats_ingress/health.py``). It creates the stream when
none exists (the topology's: limits retention, its subjects and age; an existing stream is used as it is,
so a control-plane that owns it keeps it) and its own durable consumer (explicit ack, redelivery after
``ack_wait``, no delivery limit of its own: ``forward.py`` dead-letters past ``max_deliver``).

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
import time
from typing import Any, Callable

import nats
from dcm_status_contracts.errors import ConfigError
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from shared.nats_ingress.forward import Forwarder
from shared.nats_ingress.health import Health, serve
from shared.nats_ingress.route import Inbound
from shared.runtime import settings as settings_module
from shared.runtime import tracing
from shared.runtime.clients import RECONNECT_OPTIONS
from shared.runtime.logs import get_logger
from shared.runtime.settings import NatsSettings, Settings

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


def stream_config(n: NatsSettings) -> StreamConfig:
    return StreamConfig(name=n.stream, subjects=[n.subject], retention=RetentionPolicy.LIMITS,
                        storage=StorageType.FILE, max_age=float(n.max_age_seconds) or None)


def consumer_config(n: NatsSettings) -> ConsumerConfig:
    return ConsumerConfig(durable_name=n.consumer, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
                          ack_wait=float(n.ack_wait_seconds), max_deliver=-1, filter_subject=n.subject,
                          max_ack_pending=max(1000, 4 * n.batch))


async def ensure_stream_and_consumer(js: Any, n: NatsSettings) -> None:
    """The stream (created when missing, else used as it is) and the ingress's durable consumer."""
    try:
        await js.stream_info(n.stream)
    except NotFoundError:
        await js.add_stream(stream_config(n))
        log.info("stream created", extra={"stream": n.stream, "subjects": n.subject})
    try:
        await js.consumer_info(n.stream, n.consumer)
    except NotFoundError:
        await js.add_consumer(n.stream, consumer_config(n))
        log.info("durable consumer created", extra={"stream": n.stream, "consumer": n.consumer})


async def connect(n: NatsSettings, health: Health, name: str = "dcm-nats-ingress") -> Any:
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
    def __init__(self, settings: Settings, n: NatsSettings, publisher: Any, health: Health | None = None):
        self.settings, self.nats = settings, n
        self.health = health or Health()
        self.forwarder = Forwarder(settings, n, publisher, self.health)
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        nc = await connect(self.nats, self.health)
        try:
            js = nc.jetstream()
            await ensure_stream_and_consumer(js, self.nats)
            sub = await js.pull_subscribe_bind(durable=self.nats.consumer, stream=self.nats.stream)
            log.info("forwarding", extra={"stream": self.nats.stream, "consumer": self.nats.consumer,
                                          "subject": self.nats.subject})
            await self._loop(js, sub)
        finally:
            await disconnect(nc)

    async def _loop(self, js: Any, sub: Any) -> None:
        next_lag = 0.0
        while not self.stopping.is_set():
            if time.monotonic() >= next_lag:
                await self._measure_lag(js)
                next_lag = time.monotonic() + LAG_EVERY_SECONDS
            try:
                msgs = await sub.fetch(self.nats.batch, timeout=FETCH_WAIT_SECONDS)
            except (NatsTimeout, asyncio.TimeoutError):
                continue
            except NatsError as exc:  # disconnected, server restarting: wait for the reconnect
                self.health.error(f"fetch: {exc!r}")
                await asyncio.sleep(0.5)
                continue
            await self.forwarder.forward([(inbound(m), m) for m in msgs])

    async def _measure_lag(self, js: Any) -> None:
        try:
            info = await js.consumer_info(self.nats.stream, self.nats.consumer)
            self.health.lag(info.num_pending or 0, info.num_ack_pending or 0)
        except (NatsError, asyncio.TimeoutError) as exc:
            self.health.error(f"consumer info: {exc!r}")


def main(read_settings: Callable[[], Settings] = settings_module.from_env,
         read_nats: Callable[[], NatsSettings] = settings_module.nats_from_env) -> int:
    """Run the ingress until SIGTERM/SIGINT, with the settings the environment gives (a mistake: one line on
    stderr, exit 2)."""
    try:
        settings, n = read_settings(), read_nats()
    except ConfigError as exc:
        print(f"nats_ingress cannot start: {exc}", file=sys.stderr)
        return 2
    provider = tracing.configure("nats_ingress", settings)
    worker = Worker(settings, n, publisher())
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
