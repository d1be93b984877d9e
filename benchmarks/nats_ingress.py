"""The NATS ingress's throughput against a ceiling measured in the same run, on a rig of its own:

- a real nats-server (JetStream) configured by ``infra/nats_accounts.py`` (an account per provider, the
  service import with the prefix), the Pub/Sub emulator with the providers' ingress topics, nothing else
  (no function consumes what is published: the ingress alone is measured);
- N status CloudEvents (structured, as the upstream providers send them) published by three providers on
  ``dcm.vm`` through their own identities, stored in the stream before anything reads it;
- the ceiling: the same N messages read by a durable pull consumer of this process on each provider's stream
  (nats-py, the ingress's batch size, a loop per provider as the ingress has) and published to the
  provider's ingress topic (the ingress's publisher client) with no
  check at all (no parsing, no ordering key, no dead-letter path), each acked once Pub/Sub confirmed it;
  then the same again with Pub/Sub ordering keys (the resource key), to show what per-key publishing would
  cost (the ingress keeps each resource's order by publishing waves instead: shared/nats_ingress/forward.py);
- the ingress: ``python -m functions.nats_ingress.main`` on its own durable consumers of the same streams,
  timed from its first delivery to the moment JetStream has every message acked (it acks only once Pub/Sub
  confirmed the publish).

Prints messages/s of both, their ratio and whether it meets the target (>= 80%); asserts nothing (run:
make bench). ``BENCH_NATS_EVENTS`` sets N (default 5000).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dcm_status_contracts.pubsub_binding import to_message  # noqa: E402
from dcm_status_contracts.status_report import build_event  # noqa: E402

from infra import nats_accounts  # noqa: E402
from infra.local import emulators, natsserver  # noqa: E402
from infra.topology import load  # noqa: E402

EVENTS = int(os.environ.get("BENCH_NATS_EVENTS", "5000"))
PROVIDERS = ["aws", "kubevirt", "osac"]
PROJECT = "dcm-bench-nats"
TARGET = 0.80
CEILING_CONSUMERS = ("bench-ceiling", "bench-ceiling-ordered")


class Rig:
    """nats-server and the Pub/Sub emulator, started and stopped together."""

    def __init__(self, root: Path):
        self.root, self.logs = root, root / "logs"
        self.logs.mkdir(parents=True)
        self.topology = load(PROVIDERS)
        self.spec = self.topology.nats
        self.credentials = nats_accounts.ensure_credentials(root / "credentials.json", PROVIDERS)
        self.procs: list[emulators.Process] = []

    def start(self) -> None:
        self.procs.append(emulators.start("pubsub", self.logs))
        os.environ["PUBSUB_EMULATOR_HOST"] = self.procs[0].host
        port, http_port = emulators.free_port(), emulators.free_port()
        conf = self.root / "nats-server.conf"
        nats_accounts.write_config(conf, nats_accounts.server_config(
            self.spec, self.credentials, PROVIDERS, port=port, http_port=http_port, store_dir=self.root / "js"))
        pid = emulators.spawn([natsserver.server_binary(), "-c", str(conf)], self.logs / "nats-server.log")
        self.procs.append(emulators.Process(pid, port))
        emulators.wait_http(emulators.Process(pid, http_port), "nats-server", self.logs / "nats-server.log",
                            path="/healthz")
        self.url = f"nats://127.0.0.1:{port}"
        from google.cloud import pubsub_v1

        admin = pubsub_v1.PublisherClient()
        for topic in [self.topology.topic("ingress", p) for p in PROVIDERS] + [self.topology.topic("deadletter")]:
            admin.create_topic(name=admin.topic_path(PROJECT, topic))

    def env(self, port: int) -> dict[str, str]:
        """The ingress's environment, as the local stack and Terraform give it."""
        return {**os.environ, **self.topology.env(), **self.spec.env(), "DCM_PROJECT": PROJECT,
                "NATS_URL": self.url, "NATS_USER": self.credentials.platform.user,
                "NATS_PASSWORD": self.credentials.platform.password, "PORT": str(port)}

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


def messages(n: int) -> list[tuple[str, str, bytes]]:
    """(provider, resource key, structured CloudEvent) of ``n`` reports, over 3 providers x 500 resources."""
    out = []
    for i in range(n):
        provider, rid = PROVIDERS[i % len(PROVIDERS)], f"vm-{i % 500}"
        event = build_event(provider, "vm", rid, ["RUNNING", "STOPPED"][i % 2], "bench", event_id=f"bench-{i}",
                            source=f"{provider}-bench")
        out.append((provider, f"{provider}/vm/{rid}", to_message(event)[0]))
    return out


async def connect(url: str, identity: nats_accounts.Identity) -> Any:
    import nats

    return await nats.connect(url, user=identity.user, password=identity.password, connect_timeout=5)


async def load_stream(rig: Rig, n: int) -> None:
    """Each provider's stream, the two durable consumers on each (created before any message: both see all N),
    then N messages published by the providers with JetStream (each stored, acked by the server)."""
    from shared.nats_ingress.worker import consumer_config, ensure_stream_and_consumer
    from shared.runtime.nats_settings import nats_from_env

    settings = nats_from_env(rig.env(8080))
    nc = await connect(rig.url, rig.credentials.platform)
    js = nc.jetstream()
    await ensure_stream_and_consumer(js, settings, PROVIDERS)
    for provider in PROVIDERS:
        for name in CEILING_CONSUMERS:
            ceiling = consumer_config(settings, provider)
            ceiling.durable_name = name
            await js.add_consumer(settings.stream_of(provider), ceiling)
    providers = {p: await connect(rig.url, rig.credentials.provider(p)) for p in PROVIDERS}
    batch = []
    for provider, _, data in messages(n):
        batch.append(providers[provider].jetstream().publish("dcm.vm", data, timeout=30))
        if len(batch) == 200:
            await asyncio.gather(*batch)
            batch = []
    await asyncio.gather(*batch)
    stored = [(await js.stream_info(settings.stream_of(p))).state.messages for p in PROVIDERS]
    assert sum(stored) >= n, f"the streams hold {sum(stored)} of {n}"
    for conn in [nc, *providers.values()]:
        await conn.close()


async def ceiling_rate(rig: Rig, n: int, consumer: str, keys: dict[tuple[str, int], str] | None = None) -> float:
    """Pull + publish + ack, nothing else: messages/s over all ``n``. ``keys``: the ordering key of each
    (provider, stream sequence) (the resource key the ingress would give it, known from what was published,
    not read from the message)."""
    from shared.nats_ingress.worker import publisher
    from shared.runtime.nats_settings import nats_from_env

    settings = nats_from_env(rig.env(8080))
    client = publisher(ordered=bool(keys))
    nc = await connect(rig.url, rig.credentials.platform)
    done, started = 0, None

    async def drain(provider: str, count: int) -> None:
        nonlocal done, started
        topic = client.topic_path(PROJECT, rig.topology.topic("ingress", provider))
        sub = await nc.jetstream().pull_subscribe_bind(durable=consumer, stream=settings.stream_of(provider))
        mine = 0
        while mine < count:
            msgs = await sub.fetch(settings.batch, timeout=5)
            started = started or time.perf_counter()  # from the first delivery, as the ingress is timed
            futures = [asyncio.wrap_future(client.publish(
                topic, m.data, **({"ordering_key": keys[(provider, m.metadata.sequence.stream)]} if keys else {})))
                for m in msgs]
            await asyncio.gather(*futures)
            await asyncio.gather(*(m.ack() for m in msgs))
            mine += len(msgs)
            done += len(msgs)

    counts = {p: sum(1 for q, _, _ in messages(n) if q == p) for p in PROVIDERS}
    await asyncio.gather(*(drain(p, c) for p, c in counts.items()))
    rate = done / (time.perf_counter() - started)
    await nc.close()
    client.stop()
    return rate


async def timed_drain(rig: Rig, n: int) -> float:
    """Seconds from the ingress consumers' first delivery to every one of ``n`` messages acked (one connection,
    watching the consumers' state every 20 ms)."""
    from shared.runtime.nats_settings import nats_from_env

    settings = nats_from_env(rig.env(8080))
    nc = await connect(rig.url, rig.credentials.platform)
    js, first, acked = nc.jetstream(), None, 0
    deadline = time.monotonic() + 120 + n / 20
    try:
        while time.monotonic() < deadline:
            infos = [await js.consumer_info(settings.stream_of(p), settings.consumer) for p in PROVIDERS]
            now = time.perf_counter()
            if first is None and any(i.delivered.stream_seq for i in infos):
                first = now
            acked = sum(i.ack_floor.stream_seq or 0 for i in infos)
            if acked >= n:
                return now - first
            await asyncio.sleep(0.02)
        raise RuntimeError(f"the ingress acked {acked} of {n}; log {rig.logs / 'nats-ingress.log'}")
    finally:
        await nc.close()


def ingress_rate(rig: Rig, n: int) -> tuple[float, dict[str, Any]]:
    """The ingress started on the loaded stream: messages/s from its first delivery to the last ack, and
    what its /healthz says at the end (forwarded, dead-lettered)."""
    import requests

    port = emulators.free_port()
    with open(rig.logs / "nats-ingress.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "functions.nats_ingress.main"], env=rig.env(port),
                                cwd=Path(__file__).resolve().parent.parent, stdout=log, stderr=log,
                                start_new_session=True)
    try:
        seconds = asyncio.run(timed_drain(rig, n))
        health = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()
        return n / seconds, health
    finally:
        proc.terminate()  # as Cloud Run stops an instance: SIGTERM, then SIGKILL 10 s later
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="dcm-bench-nats-") as tmp:
        rig = Rig(Path(tmp))
        try:
            rig.start()
            asyncio.run(load_stream(rig, EVENTS))
            ceiling = asyncio.run(ceiling_rate(rig, EVENTS, CEILING_CONSUMERS[0]))
            print(f"NATS ceiling: nats-py pull + Pub/Sub publish + ack, no checks ({EVENTS} messages): "
                  f"{ceiling:7.1f} messages/s")
            seqs: dict[str, int] = {}
            keys = {}
            for provider, key, _ in messages(EVENTS):  # each provider's stream numbers its own messages
                seqs[provider] = seqs.get(provider, 0) + 1
                keys[(provider, seqs[provider])] = key
            ordered = asyncio.run(ceiling_rate(rig, EVENTS, CEILING_CONSUMERS[1], keys))
            print(f"  the same with Pub/Sub ordering keys (one per resource, 1,500): {ordered:7.1f} messages/s "
                  f"= {ordered / ceiling:.0%} (the client keeps one batch in flight per ordering key)")
            rate, health = ingress_rate(rig, EVENTS)
            ratio = rate / ceiling
            print(f"NATS ingress ({EVENTS} messages, NATS -> Pub/Sub confirmed -> acked): {rate:7.1f} messages/s "
                  f"= {ratio:.0%} of the ceiling (target >= {TARGET:.0%}: {'met' if ratio >= TARGET else 'NOT met'}); "
                  f"{rate / ordered:.0%} of the ceiling with ordering keys")
            print(f"  forwarded {health.get('forwarded')}, dead-lettered {health.get('deadLettered')}, "
                  f"retried {health.get('retried')}; last error: {json.dumps(health.get('lastError'))}")
        finally:
            rig.stop()


if __name__ == "__main__":
    main()
