"""Dead-letter triage and replay end to end: nothing that fails is lost or silent."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest
from dcm_status_contracts.model import event_identity
from dcm_status_contracts.status_report import build_event
from dcm_status_contracts.pubsub_binding import to_message
from google.cloud import pubsub_v1
from google.cloud.firestore_v1.base_query import FieldFilter
from google.protobuf import duration_pb2

from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.e2e


def entry_for(e2e, message_id: str) -> dict:
    return wait_until(lambda: [e for e in e2e.deadletters() if e["originalMessageId"] == message_id],
                      what=f"dead letter of message {message_id}")[0]


class FailingEndpoint(http.server.ThreadingHTTPServer):
    """A push endpoint that always answers 500 and counts the attempts."""

    def __init__(self):
        self.hits = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                server.hits += 1
                self.send_response(500)
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_failing_push_endpoint_ends_as_delivery_exhausted(e2e, uid):
    endpoint = FailingEndpoint()
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=e2e.topic_path(f"e2e-failing-{uid}")).name
    sub = subscriber.create_subscription(request={
        "name": f"projects/{e2e.project}/subscriptions/e2e-failing-{uid}", "topic": topic,
        "push_config": {"push_endpoint": f"http://127.0.0.1:{endpoint.server_port}/projects/{e2e.project}/topics/x"},
        "dead_letter_policy": {"dead_letter_topic": e2e.topic_path("dcm-status-deadletter"),
                               "max_delivery_attempts": 5},
        "retry_policy": {"minimum_backoff": duration_pb2.Duration(seconds=1),
                         "maximum_backoff": duration_pb2.Duration(seconds=1)}}).name
    data, attrs = to_message(build_event("aws", "vm", f"exhaust-{uid}", "RUNNING", "x"))
    publisher.publish(topic, data, **attrs).result(timeout=30)
    entry = wait_until(lambda: [e for e in e2e.deadletters(reason="delivery_exhausted")
                                if e.get("sourceSubscription") == sub], timeout=60, what="delivery_exhausted")[0]
    endpoint.shutdown()
    assert endpoint.hits == 5 == entry["deliveryCount"]
    assert entry["key"] == f"aws/vm/exhaust-{uid}" and entry["provider"] == "aws"
    assert entry["data"] == data
    assert "5 times" in entry["message"] and entry["originalPublishTime"]
    # replay resolves the subscription's topic and sends the original there
    endpoint = FailingEndpoint()
    subscriber.modify_push_config(request={"subscription": sub, "push_config": {
        "push_endpoint": f"http://127.0.0.1:{endpoint.server_port}/projects/{e2e.project}/topics/x"}})
    [result] = json.loads(e2e.cli("dlq", "replay", entry["id"], "--json").stdout)
    assert result["outcome"] == "published" and result["topic"] == topic
    wait_until(lambda: endpoint.hits >= 1, what="the replayed message at the original subscription")
    endpoint.shutdown()


def test_unknown_schema_is_replayed_after_the_schema_is_added_and_applied_once(e2e, uid):
    event = build_event("azure", "vm", f"v2-{uid}", "RUNNING", "needs v2",
                        dataschema="https://schemas.dcm.org/vm/status-v2.json", time="2026-02-02T10:00:00Z")
    data, attrs = to_message(event)
    entry = entry_for(e2e, e2e.publish_raw("azure", data, **attrs))
    assert entry["reason"] == "unknown_schema"

    v1 = json.loads((e2e.schemas_dir / "vm" / "status-v1.json").read_text())
    v2 = {**v1, "$id": "https://schemas.dcm.org/vm/status-v2.json", "title": "VM status v2",
          "x-dcm": {**v1["x-dcm"], "version": 2}}
    (e2e.schemas_dir / "vm" / "status-v2.json").write_text(json.dumps(v2))
    e2e.restart_function("ingest")  # schemas are compiled once, at start

    first = json.loads(e2e.cli("dlq", "replay", entry["id"], "--json").stdout)
    assert [r["outcome"] for r in first] == ["published"]
    e2e.wait_for_status(f"azure/vm/v2-{uid}", "RUNNING")
    again = json.loads(e2e.cli("dlq", "replay", entry["id"], "--json").stdout)
    assert again[0]["outcome"] == "skipped"  # in flight already: idempotent
    forced = json.loads(e2e.cli("dlq", "replay", entry["id"], "--force", "--json").stdout)
    assert forced[0]["outcome"] == "published"

    ledger = e2e.db.collection("events").document(event_identity("azure", event["source"], event["id"]))
    assert ledger.get().to_dict()["outcome"] == "applied"
    wait_until(lambda: list(e2e.db.collection("duplicates").where(
        filter=FieldFilter("dedupId", "==", ledger.id)).stream()), what="the forced replay to be counted as a duplicate")
    assert e2e.resource(f"azure/vm/v2-{uid}")["updates"] == 1  # replaying twice applied once
    shown = json.loads(e2e.cli("dlq", "show", entry["id"], "--json").stdout)
    assert shown["attempts"] == 2 and shown["pipelineOutcome"] == "applied" and len(shown["replays"]) == 2


def test_deadletter_function_outage_loses_nothing(e2e, uid):
    ids = []
    with e2e.firestore_outage():
        for i in range(5):
            ids.append(e2e.publish_raw("vmware", f"not json {uid} {i}".encode()))
        time.sleep(3)  # the dead-letter function fails meanwhile and its subscription retries
    for message_id in ids:
        assert entry_for(e2e, message_id)["reason"] == "malformed_json"


# a poison message's replays and the operator's list/stats/purge: tests/functional/test_deadletter.py (in process)
