"""The pipeline end to end on the emulators, published with google-cloud-pubsub
as a provider would: provider topic -> ingest -> upsert -> Firestore."""

from __future__ import annotations

import time

import pytest
from dcm_status_contracts.model import event_identity
from dcm_status_contracts.status_report import build_event
from dcm_status_contracts.pubsub_binding import to_message
from dcm_status_sdk import BindingMode
from google.cloud import pubsub_v1
from google.cloud.firestore_v1.base_query import FieldFilter

from infra.local.wiring import emulator_delivery_attempts
from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.e2e


def test_the_stack_built_exactly_the_declared_topology(e2e):
    topo = e2e.stack.topology(e2e.state)
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    project = f"projects/{e2e.project}"
    topics = {t.name.rsplit("/", 1)[1] for t in publisher.list_topics(project=project)}
    assert {t.name for t in topo.topics} <= topics
    subs = {s.name.rsplit("/", 1)[1]: s for s in subscriber.list_subscriptions(project=project)}
    dlq = f"{project}/topics/{topo.deadletter_topic}"
    for spec in topo.subscriptions:
        actual = subs[spec.name]
        assert actual.topic == f"{project}/topics/{spec.topic}"
        # the emulator's delivery bugs (infra/local/stack.py): no ordering, no back-off, attempts spanning the schedule
        assert not actual.enable_message_ordering
        assert "retry_policy" not in actual
        if spec.dead_letter:
            assert actual.dead_letter_policy.dead_letter_topic == f"{project}/topics/{spec.dead_letter_topic}"
            assert actual.dead_letter_policy.max_delivery_attempts == emulator_delivery_attempts(spec) >= 16
        else:
            assert not actual.dead_letter_policy.dead_letter_topic
        if spec.push:
            port = e2e.state.functions[spec.push]["port"]
            assert actual.push_config.push_endpoint == f"http://127.0.0.1:{port}/{project}/topics/{spec.topic}"
        else:
            assert not actual.push_config.push_endpoint
    assert any(s.topic == dlq for s in subs.values())  # nothing dead-lettered is lost
    # the BigQuery exports are production only: declared, skipped here (the emulator has no BigQuery subscriptions)
    assert topo.exports and not {e.name for e in topo.exports} & set(subs)
    # the webhook retry lane dead-letters into the first lane (docs/callbacks.md), every other one into dlq
    targets = {s.dead_letter_policy.dead_letter_topic for s in subs.values()}
    assert targets - {""} == {dlq, f"{project}/topics/{topo.topic('callbacks')}"}


def test_structured_and_binary_reports_land_in_firestore(e2e, uid):
    aws = e2e.reporter("aws")
    aws.publish_now("vm", f"vm-{uid}", "RUNNING", "VM is running.").result(timeout=30)
    binary = e2e.reporter("aws", BindingMode.BINARY)
    binary.publish_now("container", f"ctr-{uid}", "Running", "binary mode").result(timeout=30)
    vm = e2e.wait_for_status(f"aws/vm/vm-{uid}", "RUNNING")
    ctr = e2e.wait_for_status(f"aws/container/ctr-{uid}", "RUNNING")
    assert vm["message"] == "VM is running." and vm["statusRecognized"]
    assert ctr["rawStatus"] == "Running"


def test_lifecycle_final_state_and_history(e2e, uid):
    aws = e2e.reporter("aws")
    steps = ["PROVISIONING", "RUNNING", "STOPPING", "STOPPED"]
    for i, status in enumerate(steps):
        aws.publish_now("vm", f"life-{uid}", status, status.lower(), time=f"2026-02-01T10:0{i}:00Z").result(timeout=30)
    doc = e2e.wait_for_status(f"aws/vm/life-{uid}", "STOPPED")
    assert doc["lastTransitionTime"] == "2026-02-01T10:03:00.000000Z"
    # its history: the ledger entries that carry it (issue 32), as the history API reads them
    history = e2e.db.collection("events").where(filter=FieldFilter("key", "==", f"aws/vm/life-{uid}"))
    wait_until(lambda: sorted(e["status"] for e in (s.to_dict() for s in history.stream()) if "recordedAt" in e)
               == sorted(steps), what="4 history entries")


def test_duplicate_is_never_applied_twice(e2e, uid):
    event = build_event("azure", "vm", f"dup-{uid}", "RUNNING", "once", time="2026-02-01T10:00:00Z")
    data, attrs = to_message(event)
    for _ in range(3):  # the provider retried its publish
        e2e.publish_raw("azure", data, **attrs)
    doc = e2e.wait_for_status(f"azure/vm/dup-{uid}", "RUNNING")
    ledger = e2e.db.collection("events").document(event_identity("azure", event["source"], event["id"]))
    wait_until(lambda: len(list(e2e.db.collection("duplicates").where(filter=FieldFilter("dedupId", "==", ledger.id)).stream())) == 2,
               what="two duplicates recorded")
    assert e2e.resource(f"azure/vm/dup-{uid}")["updates"] == 1 == doc["updates"]


def test_stale_event_never_overwrites(e2e, uid):
    aws = e2e.reporter("aws")
    aws.publish_now("vm", f"stale-{uid}", "STOPPED", "newer", time="2026-02-01T12:00:00Z").result(timeout=30)
    e2e.wait_for_status(f"aws/vm/stale-{uid}", "STOPPED")
    old = build_event("aws", "vm", f"stale-{uid}", "RUNNING", "older", time="2026-02-01T11:00:00Z")
    data, attrs = to_message(old)
    e2e.publish_raw("aws", data, **attrs)
    ledger = e2e.db.collection("events").document(event_identity("aws", old["source"], old["id"]))
    wait_until(lambda: ledger.get().exists, what="the stale event to be processed")
    assert ledger.get().to_dict()["outcome"] == "stale"
    assert e2e.resource(f"aws/vm/stale-{uid}")["status"] == "STOPPED"


# each invalid kind dead-lettered with its reason: tests/functional/test_deadletter.py (the pipeline in process)


def test_firestore_outage_during_processing_applies_every_event_once(e2e, uid):
    reporter = e2e.reporter("vmware")
    keys = [f"vmware/vm/outage-{uid}-{i}" for i in range(20)]
    with e2e.firestore_outage():
        futures = [reporter.publish_now("vm", k.rsplit("/", 1)[1], "RUNNING", "during outage",
                                   time="2026-02-01T10:00:00Z") for k in keys]
        [f.result(timeout=30) for f in futures]
        time.sleep(3)  # deliveries fail meanwhile: upsert raises, Pub/Sub redelivers
        assert all(e2e.resource(k) is None for k in keys[:3])
    for k in keys:
        doc = e2e.wait_for_status(k, "RUNNING", timeout=60)
        assert doc["updates"] == 1
    assert not [e for e in e2e.deadletters(provider="vmware") if e.get("key") in keys]
