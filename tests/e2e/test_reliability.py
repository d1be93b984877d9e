"""A poison message can never stall anything: it is dead-lettered after its attempts and later
messages keep flowing, on the emulators too (where an ordered subscription would die: infra/stack.py)."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(240)
def test_a_message_that_fails_every_attempt_is_dead_lettered_and_later_ones_flow(e2e, uid):
    """Firestore down for longer than upsert's whole retry schedule (5 attempts, backoff up to 10 s):
    the update that arrived then fails every push, so Pub/Sub dead-letters it; the pipeline goes on."""
    aws = e2e.reporter("aws")
    poisoned = f"aws/vm/poison-{uid}"
    started = time.monotonic()
    with e2e.firestore_outage():
        aws.report("vm", f"poison-{uid}", "RUNNING", "during the outage").result(timeout=30)
        # wait until Pub/Sub gave up on it: it reaches the dead-letter topic (stored once Firestore is back)
        subscription = f"projects/{e2e.project}/subscriptions/dcm-upsert"
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and not _exhausted(e2e, subscription, uid):
            time.sleep(2)
    outage = time.monotonic() - started
    after = [f"after-{uid}-{i}" for i in range(5)]
    for rid in after:
        aws.report("vm", rid, "RUNNING", "after the outage").result(timeout=30)
    for rid in after:
        e2e.wait_for_status(f"aws/vm/{rid}", "RUNNING", timeout=60)  # the subscription still delivers
    entry = wait_until(lambda: next((e for e in e2e.deadletters(reason="delivery_exhausted")
                                     if e.get("key") == poisoned), None), 60, what="the poison dead letter")
    assert entry["deliveryCount"] == 5 and entry["sourceSubscription"].endswith("/dcm-upsert")
    assert e2e.resource(poisoned) is None  # not applied behind anyone's back
    print(f"\npoison: dead-lettered after {entry['deliveryCount']} attempts in a {outage:.0f} s outage; "
          f"{len(after)} later updates applied")
    e2e.cli("dlq", "replay", entry["id"])  # once fixed, replay applies it
    e2e.wait_for_status(poisoned, "RUNNING", timeout=60)
    # every failed push was logged once, as one JSON line (no framework traceback over many lines)
    log = (e2e.stack.log_dir / "upsert.log").read_text()
    assert "transient failure, Pub/Sub will redeliver" in log
    assert not [line for line in log.splitlines() if line.startswith("Traceback")]


def _exhausted(e2e, subscription: str, uid: str) -> bool:
    """Whether the emulator has dead-lettered our update (read off the archive, which Firestore does not gate)."""
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    try:
        archive = subscriber.subscription_path(e2e.project, "dcm-deadletter-archive")
        response = subscriber.pull(subscription=archive, max_messages=50, timeout=5)
        return any(m.message.attributes.get("CloudPubSubDeadLetterSourceSubscription", "").endswith("dcm-upsert")
                   and f"poison-{uid}".encode() in m.message.data for m in response.received_messages)
    except Exception:  # noqa: BLE001 - nothing pulled this time
        return False
    finally:
        subscriber.close()
