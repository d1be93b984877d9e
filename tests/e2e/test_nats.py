"""The NATS ingress end to end, on the real nats-server of the local stack: the upstream providers' bytes
published with nats-py as each provider's identity are stored as over Pub/Sub; a provider cannot reach
another's subjects; what cannot be forwarded is dead-lettered with its reason; a control-plane consumer
reads the same stream; a killed ingress and an unreachable Pub/Sub lose nothing and apply nothing twice."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from typing import Any, Awaitable, Callable

import nats
import orjson
import pytest
from dcm_status_contracts.model import ResourceKey
from dcm_status_contracts.pubsub_binding import BindingMode, mode_of
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from infra.local.natsserver import NATS_INGRESS, ingress_report
from infra.local.emulators import Process
from tests import samples
from tests.agent_traffic import agent_traffic, listen_to_agent_subjects
from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.e2e
UPSTREAM = samples.load("upstream")
CORE_PUBLISHERS = {"acm-cluster", "k8s-storage", "k8s-container", "three-tier-app"}  # nc.Publish upstream


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)


async def connect(e2e, provider: str | None, errors: list | None = None) -> Any:
    """A connection as ``provider``'s NATS identity (None: the platform's)."""
    from infra.local import natsserver

    creds = natsserver.credentials(e2e.stack.paths, e2e.state.providers)
    identity = creds.platform if provider is None else creds.provider(provider)

    async def on_error(exc: Exception) -> None:
        if errors is not None:
            errors.append(exc)

    return await nats.connect(e2e.state.nats_url, user=identity.user, password=identity.password,
                              error_cb=on_error, max_reconnect_attempts=2)


async def publish_all(e2e, provider: str, messages: list[tuple[str, bytes, dict | None]], jetstream: bool = True,
                      each: Callable[[int], None] | None = None) -> list[int]:
    """Publish (subject, data, headers) as ``provider``: JetStream (the PubAck's stream sequences) or core."""
    nc = await connect(e2e, provider)
    seqs = []
    try:
        js = nc.jetstream()
        for i, (subject, data, headers) in enumerate(messages):
            if jetstream:
                seqs.append((await js.publish(subject, data, headers=headers or None)).seq)
            else:
                await nc.publish(subject, data, headers=headers or None)
            if each:
                each(i)
        await nc.flush()
    finally:
        await nc.close()
    return seqs


def vm_event(provider_source: str, vm: str, status: str = "RUNNING", **extra: Any) -> bytes:
    return orjson.dumps({"specversion": "1.0", "id": str(uuid.uuid4()), "source": provider_source,
                         "type": "dcm.status.vm", "subject": "dcm.vm", "datacontenttype": "application/json",
                         "time": "2026-11-25T00:00:00Z", "data": {"id": vm, "status": status, "message": ""}, **extra})


def unique(sample: samples.Sample, suffix: str) -> tuple[bytes, dict[str, str]]:
    """The sample's bytes with its resource and event ids made unique to this run (as test_upstream.py does)."""
    body = orjson.loads(sample.data)
    binary = mode_of(sample.attributes) is BindingMode.BINARY
    (body if binary else body["data"])["id"] += suffix
    attributes = dict(sample.attributes)
    if binary:
        attributes["ce-id"] += suffix
    else:
        body["id"] += suffix
    return orjson.dumps(body), attributes


STORED_FIELDS = ("status", "rawStatus", "statusRecognized", "message", "reason", "lastTransitionTime", "metadata",
                 "resourceSpecific", "eventSource", "eventType", "updates")


def comparable(doc: dict[str, Any], suffix: str) -> dict[str, Any]:
    return {"key": doc["key"].removesuffix(suffix), **{f: doc.get(f) for f in STORED_FIELDS}}


def test_the_upstream_providers_bytes_over_nats_are_stored_as_over_pubsub(e2e, uid):
    """Every golden sample, structured and binary, on its provider's subject with its identity (JetStream for
    the providers that use it, core NATS for the others), and the same bytes on the Pub/Sub ingress topic."""
    suffixes = [(f"-n{i}-{uid}", f"-p{i}-{uid}") for i in range(len(UPSTREAM))]  # one resource per sample
    for s, (via_nats, via_pubsub) in zip(UPSTREAM, suffixes):
        data, attributes = unique(s, via_nats)
        subject = f"dcm.{ResourceKey.parse(s.expect['key']).resource_type}"
        run(publish_all(e2e, s.provider, [(subject, data, attributes)], jetstream=s.provider not in CORE_PUBLISHERS))
        data, attributes = unique(s, via_pubsub)
        e2e.publish_raw(s.provider, data, **attributes)
    for s, (via_nats, via_pubsub) in zip(UPSTREAM, suffixes):
        over_nats = wait_until(lambda: e2e.resource(s.expect["key"] + via_nats), 30, what=f"{s.name} over NATS")
        over_pubsub = wait_until(lambda: e2e.resource(s.expect["key"] + via_pubsub), 30, what=f"{s.name} over Pub/Sub")
        assert comparable(over_nats, via_nats) == comparable(over_pubsub, via_pubsub), s.name
        assert over_nats["status"] == s.expect["status"] and over_nats["statusRecognized"], s.name
    assert not [d for d in e2e.deadletters() if uid in (d.get("key") or "")]


def test_a_provider_cannot_publish_under_another_providers_subjects(e2e, uid):
    errors: list[Exception] = []

    async def trespass() -> None:
        nc = await connect(e2e, "osac", errors)
        try:
            for subject in ("providers.aws.dcm.vm", "providers.osac.dcm.vm", "$JS.API.STREAM.NAMES"):
                await nc.publish(subject, vm_event("dcm/providers/aws", f"x-{uid}"))
            await nc.subscribe("providers.>")
            await nc.flush()
            with pytest.raises(nats.errors.Error):  # no ack comes back: it never reached a stream
                await nc.jetstream().publish("providers.aws.dcm.vm", vm_event("dcm/providers/aws", f"x-{uid}"),
                                             timeout=1)
        finally:
            await nc.close()

    run(trespass())
    refused = {str(e).lower() for e in errors}
    for what in ('publish to "providers.aws.dcm.vm"', 'publish to "providers.osac.dcm.vm"',
                 'publish to "$js.api.stream.names"', 'subscription to "providers.>"'):
        assert f"nats: permissions violation for {what}" in refused, (what, refused)
    with pytest.raises(nats.errors.Error):  # another provider's password is not osac's
        from infra.local import natsserver
        wrong = natsserver.credentials(e2e.stack.paths, e2e.state.providers).provider("aws").password
        run(nats.connect(e2e.state.nats_url, user="osac", password=wrong, max_reconnect_attempts=0,
                         allow_reconnect=False))
    # nothing of it reached the platform: no resource, no dead letter
    assert e2e.resource(f"aws/vm/x-{uid}") is None and e2e.resource(f"osac/vm/x-{uid}") is None


def test_a_forged_source_is_provider_mismatch_and_a_non_cloudevent_is_dead_lettered(e2e, uid):
    forged = vm_event("dcm/providers/aws", f"forged-{uid}")  # osac's identity, aws's name
    garbage = f"not a cloudevent {uid}".encode()
    seqs = run(publish_all(e2e, "osac", [("dcm.vm", forged, None), ("dcm.vm", garbage, None)]))
    mismatch = wait_until(lambda: [d for d in e2e.deadletters(reason="provider_mismatch")
                                   if f"forged-{uid}" in (d.get("key") or "")], 30, what="provider_mismatch")
    assert mismatch[0]["provider"] == "osac"
    malformed = wait_until(lambda: [d for d in e2e.deadletters(reason="malformed_json")
                                    if d.get("originalMessageId") == f"nats-{seqs[1]}"], 30, what="malformed_json")
    assert malformed[0]["rejectedBy"] == "nats_ingress" and malformed[0]["provider"] == "osac"
    assert e2e.resource(f"aws/vm/forged-{uid}") is None


def test_a_control_plane_consumer_reads_every_event_beside_the_ingress(e2e, uid):
    """An unchanged DCM control-plane on the stream every provider's stream republishes into: its start rewrites
    the stream with its name and subject alone (CreateOrUpdateStream), then its own durable consumer (explicit
    ack, every message) reads every provider's events."""
    spec = e2e.stack.topology(e2e.state).nats
    vms = [f"cp{i}-{uid}" for i in range(20)]
    subject = f"{spec.control_plane_prefix}{spec.subjects.replace('{provider}', '*')}"  # its NATS_STATUS_SUBJECT

    async def control_plane() -> set[str]:
        nc = await connect(e2e, None)
        js = nc.jetstream()
        durable = f"control-plane-{uid}"
        await js.update_stream(StreamConfig(name=spec.control_plane_stream, subjects=[subject]))  # as its Start()
        await js.add_consumer(spec.control_plane_stream, ConsumerConfig(durable_name=durable,
                                                                         ack_policy=AckPolicy.EXPLICIT))
        try:
            half = len(vms) // 2
            await publish_all(e2e, "osac", [("dcm.vm", vm_event("dcm/providers/osac-sp-vm", vm), None)
                                            for vm in vms[:half]])
            await publish_all(e2e, "kubevirt", [("dcm.vm", vm_event("kubevirt.localhost", vm, "Running"), None)
                                                for vm in vms[half:]])
            sub = await js.pull_subscribe_bind(durable=durable, stream=spec.control_plane_stream)
            seen: set[str] = set()
            while not set(vms) <= seen:
                for msg in await sub.fetch(500, timeout=5):  # the whole stream: other tests' messages too
                    seen.update(vm for vm in vms if f'"{vm}"'.encode() in msg.data)
                    await msg.ack()
            return seen
        finally:
            await js.delete_consumer(spec.control_plane_stream, durable)
            await nc.close()

    assert set(vms) <= run(control_plane())
    for vm in vms[:10]:
        e2e.wait_for_status(f"osac/vm/{vm}", "RUNNING")  # and the ingress forwarded every one
    for vm in vms[10:]:
        e2e.wait_for_status(f"kubevirt/vm/{vm}", "RUNNING")


def test_the_environment_agents_traffic_is_left_to_its_subscribers_and_status_still_arrives(e2e, uid):
    """Issue 38 item 3: status is read where the control-plane reads it (``dcm.*``, one token); the agent's
    subjects are neither stored, forwarded nor dead-lettered, a core subscriber in the platform account on
    ``providers.*.dcm.agents.>`` (and ``.agent.>``) still gets each, and a status event right after arrives."""
    received: list[Any] = []
    vm = f"after-agents-{uid}"
    traffic = agent_traffic("kubevirt")

    async def scenario() -> None:
        platform = await connect(e2e, None)
        try:
            await listen_to_agent_subjects(platform, received)
            await publish_all(e2e, "kubevirt", [(s, d, None) for s, d in traffic], jetstream=False)
            await publish_all(e2e, "kubevirt", [("dcm.vm", vm_event("kubevirt.localhost", vm, "Running"), None)])
            deadline = time.monotonic() + 30
            while len(received) < len(traffic) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
        finally:
            await platform.close()

    run(scenario())
    assert sorted(m.subject for m in received) == sorted(f"providers.kubevirt.{s}" for s, _ in traffic)
    assert orjson.loads(received[0].data)["data"].get("resource_id") == "vm-9"
    e2e.wait_for_status(f"kubevirt/vm/{vm}", "RUNNING")
    agent_ids = {orjson.loads(d)["id"] for _, d in traffic}
    assert not [d for d in e2e.deadletters() if any(i in str(d.get("data")) for i in agent_ids)]
    report = ingress_report(Process(**e2e.state.nats_ingress).host) or {}
    assert "kubevirt" in (report.get("providers") or {})  # its own consumer, its own lag


def ingress_pid(e2e) -> int:
    return wait_until(lambda: e2e.stack.server_pid(NATS_INGRESS), 10, what="the ingress's pid")


def test_the_ingress_killed_mid_burst_loses_nothing_and_applies_nothing_twice(e2e, uid):
    vms = [f"k{i}-{uid}" for i in range(200)]
    victim = ingress_pid(e2e)

    def kill_at_100(i: int) -> None:  # mid-burst: the ingress has fetched, forwarded and acked some already
        if i == 100:
            os.kill(victim, signal.SIGKILL)

    run(publish_all(e2e, "kubevirt", [("dcm.vm", vm_event("kubevirt.localhost", vm, "Running"), None) for vm in vms],
                    each=kill_at_100))
    wait_until(lambda: e2e.stack.server_pid(NATS_INGRESS) not in (None, victim), 15, what="the keeper's restart")
    refs = [e2e.db.collection("resources").document(ResourceKey("kubevirt", "vm", vm).doc_id) for vm in vms]

    def stored() -> list[dict]:
        return [s.to_dict() for s in e2e.db.get_all(refs) if s.exists]

    docs = wait_until(lambda: len(d := stored()) == len(vms) and d, 180, interval=1,  # the machine may be busy
                      what="every vm stored")
    assert {d["status"] for d in docs} == {"RUNNING"}
    assert [d for d in docs if d.get("updates") != 1] == []  # a redelivered event is a duplicate, never applied


def test_pubsub_unreachable_the_ingress_holds_then_drains(e2e, uid):
    vms = [f"o{i}-{uid}" for i in range(20)]
    host = Process(**e2e.state.nats_ingress).host
    # what earlier tests left (a killed ingress's unacked messages come back after ack_wait) forwarded first
    wait_until(lambda: (r := ingress_report(host)) and not r["lag"] and not r["ackPending"], 60,
               what="the ingress idle before the outage")
    e2e.stack.set_pubsub_outage(True)
    time.sleep(1)  # the proxy cuts within 50 ms: a publish confirmed before that is counted now, not later
    before = ingress_report(host)
    try:
        run(publish_all(e2e, "osac", [("dcm.vm", vm_event("dcm/providers/osac-sp-vm", vm), None) for vm in vms]))
        report = wait_until(lambda: (r := ingress_report(host)) and r["retried"] >= before["retried"] + len(vms)
                            and r, 30, what=f"the ingress to fail each publish (log "
                                            f"{e2e.stack.paths.log_dir / 'nats-ingress.log'})")
        assert report["lastError"] and report["connected"]
        # held: none acked (it acks only what Pub/Sub confirmed), none given up on
        assert (report["forwarded"], report["deadLettered"]) == (before["forwarded"], before["deadLettered"])
        assert e2e.resource(f"osac/vm/{vms[0]}") is None
    finally:
        e2e.stack.set_pubsub_outage(False)
    for vm in vms:
        e2e.wait_for_status(f"osac/vm/{vm}", "RUNNING", timeout=60)


def test_the_cli_adds_a_providers_nats_identity_and_publishes_as_it(e2e, uid):
    """`provider add` makes the NATS identity too; `provider nats-credentials` prints it; `publish --via nats`
    publishes as an upstream provider does; `status` shows the ingress's lag."""
    name = f"nats-{uid[:6]}"
    e2e.cli("provider", "add", name)
    creds = orjson.loads(e2e.cli("provider", "nats-credentials", name, "--json").stdout)
    assert creds["url"] == e2e.state.nats_url and creds["user"] == name and len(creds["password"]) >= 24
    seq = e2e.cli("publish", "--via", "nats", "--provider", name, "--type", "vm", "--id", f"cli-{uid}",
                  "--status", "running", "--mode", "binary").stdout.strip()
    assert seq.isdigit()
    e2e.wait_for_status(f"{name}/vm/cli-{uid}", "RUNNING")
    rows = {r["component"]: r for r in orjson.loads(e2e.cli("status", "--json").stdout)}
    assert rows["nats-server"]["status"] == "up" and "lag" in rows["nats-ingress"]["detail"]
    unknown = e2e.cli("provider", "nats-credentials", f"none-{uid[:6]}", check=False)
    assert unknown.returncode == 1 and len(unknown.stderr.strip().splitlines()) == 1
