"""Nothing stalls and nothing is stranded, on the emulators too: a Firestore outage longer than upsert's
whole retry schedule ends with every update applied or dead-lettered (then replayed), and a function
server killed mid-burst comes back on its port with nothing lost (infra/local/stack.py, infra/local/supervise.py)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from infra.local.wiring import emulator_delivery_attempts
from shared.runtime.firestore import RETRY_DEADLINE
from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(420)
def test_an_outage_longer_than_the_retry_schedule_strands_nothing_and_the_cli_says_so(e2e, uid):
    """Firestore down past upsert's last attempt: every update that arrived then is dead-lettered as
    delivery_exhausted (none applied behind anyone's back, none silently stuck); the subscription goes on
    delivering; `dcm-status status` reports the outage while it lasts; a replay applies them all."""
    aws = e2e.reporter("aws")
    during = [f"outage-{uid}-{i}" for i in range(20)]
    upsert = next(s for s in e2e.stack.topology(e2e.state).subscriptions if s.push == "upsert")
    attempts = emulator_delivery_attempts(upsert)
    started = time.monotonic()
    with e2e.firestore_outage():
        for rid in during:
            aws.publish_now("vm", rid, "RUNNING", "during the outage").result(timeout=30)
        health = e2e.cli("status", check=False)
        assert health.returncode == 1 and "firestore-proxy" in health.stderr and "outage" in health.stderr
        # hold the outage until Pub/Sub has given up on every one of them (read off the archive,
        # which Firestore does not gate)
        archived: set[bytes] = set()
        wait_until(lambda: _exhausted(e2e, uid, archived) >= len(during), timeout=240, interval=0.5,
                   what="every update of the outage to be dead-lettered")
    outage = time.monotonic() - started
    after = [f"after-{uid}-{i}" for i in range(5)]
    for rid in after:
        aws.publish_now("vm", rid, "RUNNING", "after the outage").result(timeout=30)
    for rid in after:
        e2e.wait_for_status(f"aws/vm/{rid}", "RUNNING", timeout=60)  # the subscription still delivers
    keys = {f"aws/vm/{rid}" for rid in during}
    entries = wait_until(lambda: (es := [e for e in e2e.deadletters(reason="delivery_exhausted")
                                         if e.get("key") in keys]) and len(es) == len(keys) and es,
                         60, what="a delivery_exhausted dead letter for each update of the outage")
    assert {e["deliveryCount"] for e in entries} == {attempts}
    assert all(e["sourceSubscription"].endswith("/dcm-upsert-aws") for e in entries)
    assert all(e2e.resource(k) is None for k in keys)  # not applied behind anyone's back
    assert e2e.cli("status").returncode == 0  # healthy again
    print(f"\nlong outage: {len(during)} updates dead-lettered after {attempts} attempts each in a {outage:.0f} s "
          f"outage; {len(after)} later updates applied")
    e2e.cli("dlq", "replay", *[e["id"] for e in entries])
    for key in keys:
        e2e.wait_for_status(key, "RUNNING", timeout=60)
    # every failed push was logged once, as one JSON line (no framework traceback over many lines)
    log = (e2e.stack.paths.log_dir / "upsert.log").read_text()
    assert "transient failure, Pub/Sub will redeliver" in log
    assert not [line for line in log.splitlines() if line.startswith("Traceback")]


@pytest.mark.timeout(300)
def test_each_function_server_killed_mid_burst_comes_back_and_nothing_is_lost(e2e, uid):
    """kill -9 of each function server while a burst flows: its keeper restarts it on the same port,
    `status` says so, read commands keep working, and every update ends stored. On a busy machine a server
    can come back later than the retry schedule lasts (~16 s: the emulator's redeliveries): what Pub/Sub
    gave up on is then a ``delivery_exhausted`` dead letter, never lost, and stored once an operator replays
    it (docs/operations.md#delivery-exhausted), as here."""
    aws = e2e.reporter("aws")
    functions = list(e2e.stack.topology(e2e.state).functions)
    ports = {name: e2e.state.functions[name]["port"] for name in functions}
    rids = [f"killed-{uid}-{i}" for i in range(40 * len(functions))]
    futures, killed = [], {}
    for i, rid in enumerate(rids):
        futures.append(aws.publish_now("vm", rid, "STOPPED" if i % 2 else "RUNNING", "burst"))
        if i % 40 == 20:
            name = functions[i // 40]
            killed[name] = e2e.stack.server_pid(name)
            os.kill(killed[name], signal.SIGKILL)
            if name == "upsert":  # read commands work while a function is down, and say which one
                shown = e2e.cli("list", "--provider", "aws", check=False)
                assert shown.returncode == 0
        time.sleep(0.02)
    for f in futures:
        f.result(timeout=30)
    wanted = {f"aws/vm/{rid}": "STOPPED" if i % 2 else "RUNNING" for i, rid in enumerate(rids)}
    missing = [wanted]  # read again each poll: only those not stored yet (each key has one update: it stays)

    def every_update_stored() -> bool:
        missing[0] = {k: wanted[k] for k in e2e.statuses_other_than(missing[0])}
        return not missing[0]

    def accounted_for() -> bool:
        return every_update_stored() or set(missing[0]) <= exhausted_keys(e2e)

    def not_yet() -> str:
        return f"{len(missing[0])} not stored, e.g. {sorted(missing[0])[:3]}"

    wait_until(accounted_for, 120, interval=1, what=lambda: f"every update stored or dead-lettered: {not_yet()}")
    if missing[0]:
        replayed = e2e.cli("dlq", "replay", "--reason", "delivery_exhausted")
        print(f"{len(missing[0])} updates dead-lettered as delivery_exhausted, replayed: {replayed.stderr.strip()}")
        wait_until(every_update_stored, 120, interval=1, what=lambda: f"every replayed update stored: {not_yet()}")
    for name, old in killed.items():
        wait_until(lambda: e2e.stack.server_pid(name) not in (None, old), 30, what=f"{name} restarted")
    assert {n: e2e.state.functions[n]["port"] for n in functions} == ports
    # a new pid is a started process, not yet a server answering: status turns healthy once each one is
    status = wait_until(lambda: (s := e2e.cli("status", check=False)).returncode == 0 and s, 60,
                        interval=1, what="every restarted function server answering")
    assert all(f"function {n}" in status.stdout for n in functions)
    restarts = {h.component: h.restarts for h in e2e.stack.health(e2e.state)}
    assert all(restarts[f"function {n}"] >= 1 for n in functions)
    log = (e2e.stack.paths.log_dir / "upsert.log").read_text()
    assert "function server upsert killed by SIGKILL" in log


def exhausted_keys(e2e) -> set[str]:
    """The keys of the resources with a ``delivery_exhausted`` dead letter."""
    return {e.get("key") for e in e2e.deadletters(reason="delivery_exhausted")}


def _exhausted(e2e, uid: str, seen: set[bytes]) -> int:
    """How many of our updates the emulator has dead-lettered from upsert (pulled off the archive into
    ``seen``)."""
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    archive = subscriber.subscription_path(e2e.project, "dcm-deadletter-archive")
    try:
        response = subscriber.pull(subscription=archive, max_messages=100, timeout=2)
        ours = [m for m in response.received_messages
                if m.message.attributes.get("CloudPubSubDeadLetterSourceSubscription", "").endswith("dcm-upsert-aws")
                and f"outage-{uid}".encode() in m.message.data]
        seen.update(m.message.data for m in ours)
        if ours:  # acked so that the next pull reaches the rest; nobody else's
            subscriber.acknowledge(subscription=archive, ack_ids=[m.ack_id for m in ours])
    except Exception:  # noqa: BLE001 - nothing pulled this time
        pass
    finally:
        subscriber.close()
    return len(seen)


def test_up_restarts_only_what_is_down_and_keeps_the_data(e2e, uid):
    """A keeper killed too (so nothing restarts its function): `status` says so, read commands still work,
    and `up` restarts that function alone, on its port; the emulators and their data stay."""
    e2e.reporter("aws").publish_now("vm", f"kept-{uid}", "RUNNING", "before").result(timeout=30)
    e2e.wait_for_status(f"aws/vm/kept-{uid}", "RUNNING")
    before = e2e.stack.load_state()
    keeper = before.functions["audit"]["pid"]
    os.kill(keeper, signal.SIGKILL)
    wait_until(lambda: e2e.cli("status", check=False).returncode == 1, 30, what="status to see audit down")
    down = e2e.cli("status", check=False)
    assert "function audit unsupervised" in down.stderr  # its orphaned server still answers
    listed = e2e.cli("get", f"aws/vm/kept-{uid}")
    assert "warning: function audit unsupervised" in listed.stderr
    e2e.cli("up", "--providers", ",".join(e2e.state.providers))
    after = e2e.stack.load_state()
    assert after.pubsub == before.pubsub and after.firestore == before.firestore
    assert after.functions["audit"]["port"] == before.functions["audit"]["port"]
    assert after.functions["audit"]["pid"] != keeper
    assert {n: f for n, f in after.functions.items() if n != "audit"} == \
        {n: f for n, f in before.functions.items() if n != "audit"}
    assert e2e.cli("status").returncode == 0
    assert e2e.resource(f"aws/vm/kept-{uid}")["status"] == "RUNNING"


def test_a_purge_drops_every_backlog_and_the_pipeline_flows_again(e2e, uid):
    """What the reliability harness does between scenarios: a message upsert cannot store yet (Firestore
    down) is dropped with its subscription's backlog; the subscriptions, declared again, push as before."""
    with e2e.firestore_outage():
        e2e.reporter("aws").publish_now("vm", f"purged-{uid}", "RUNNING", "never stored").result(timeout=30)
        # ingest has forwarded it (a delivery ingest is still handling at the purge would still end, into the
        # subscriptions declared again); upsert keeps failing on it
        ingest_log = e2e.stack.paths.log_dir / "ingest.log"
        wait_until(lambda: f'"key":"aws/vm/purged-{uid}"' in ingest_log.read_text(), 30, what="ingest to forward it")
        assert e2e.stack.purge(e2e.state) == len(e2e.stack.topology(e2e.state).subscriptions)
        # a delivery in flight at the purge still ends: kept in the outage past its Firestore retries, it fails
        time.sleep(RETRY_DEADLINE + 1)
    e2e.reporter("aws").publish_now("vm", f"after-{uid}", "RUNNING", "after the purge").result(timeout=30)
    e2e.wait_for_status(f"aws/vm/after-{uid}", "RUNNING")
    time.sleep(2)  # the purged one had its redelivery due within about a second
    assert e2e.resource(f"aws/vm/purged-{uid}") is None
