"""output_spec and outputs through the real topics (ingress -> ingest -> normalized -> upsert -> Firestore, the
change feed, the API): stored, replaced whole, kept when omitted, announced with JSON pointers, a credential
among them redacted for readers and never in a function's log, a malformed map dead-lettered with its path."""

from __future__ import annotations

from typing import Any

import orjson
import requests

from tests.e2e.conftest import wait_until

SECRET = "e2e-s3cret-value"


def api(e2e, path: str, **params: Any) -> Any:
    response = requests.get(e2e.api_url + path, params=params, timeout=30)
    response.raise_for_status()
    return response.json()


def test_outputs_travel_the_pipeline_redacted_for_readers_and_never_logged(e2e, uid):
    aws = e2e.reporter("aws")
    rid, key = f"out-{uid}", f"aws/vm/out-{uid}"
    spec = {"host": "10.0.1.5", "port": 5432, "password": SECRET}
    aws.publish_now("vm", rid, "RUNNING", "up", time="2026-05-01T10:00:00Z", last_transition_time="2026-05-01T10:00:00Z",
                    output_spec=spec, outputs={"connectionString": f"postgres://app:{SECRET}@10.0.1.5/db"}).result(30)
    assert e2e.wait_for_status(key, "RUNNING")["output_spec"] == spec
    # New outputs alone (same status, no transition): stored whole, announced; then a report without them keeps them.
    moved = {"host": "10.0.1.6", "port": 5432, "password": SECRET}
    aws.publish_now("vm", rid, "RUNNING", "up", time="2026-05-01T10:01:00Z", output_spec=moved).result(30)
    wait_until(lambda: e2e.resource(key)["output_spec"] == moved, 30, what="the new output_spec stored")
    aws.publish_now("vm", rid, "STOPPED", "down", time="2026-05-01T10:02:00Z",
                    last_transition_time="2026-05-01T10:02:00Z").result(30)
    doc = e2e.wait_for_status(key, "STOPPED")
    assert doc["output_spec"] == moved and doc["outputs"]["connectionString"].startswith("postgres://app:")

    shown = api(e2e, f"v1/resources/{key}")
    assert shown["output_spec"] == {**moved, "password": "[redacted]"}
    assert shown["outputs"] == {"connectionString": "postgres://app:[redacted]@10.0.1.5/db"}
    feed = wait_until(lambda: (c := [c for c in api(e2e, "v1/changes", last=50)["changes"] if c["key"] == key])
                      and len(c) == 3 and c, 30, what="the three changes in the feed")
    outputs_only = next(c for c in feed if c["oldStatus"] == c["newStatus"] == "RUNNING")
    assert {"attribute": "/output_spec/host", "old": "10.0.1.5", "new": "10.0.1.6"} in outputs_only["changes"]
    assert SECRET not in orjson.dumps(feed).decode()

    # A map that is not one is dead-lettered with its path; its value is in no log line.
    bad = {"specversion": "1.0", "id": f"bad-{uid}", "source": "aws-provider", "time": "2026-05-01T10:03:00Z",
           "type": f"dcm.providers.aws.vm.instances.{rid}.status",
           "data": {"status": "RUNNING", "output_spec": f"postgres://app:{SECRET}@h/db"}}
    e2e.publish_raw("aws", orjson.dumps(bad), **{"content-type": "application/cloudevents+json"})
    [entry] = wait_until(lambda: [e for e in e2e.deadletters(reason="schema_invalid") if e.get("key") == key], 60,
                         what="the malformed output_spec dead-lettered")
    assert entry["reason"] == "schema_invalid" and entry["message"].startswith("/data/output_spec")
    for log in e2e.stack.paths.log_dir.glob("*.log"):
        assert SECRET not in log.read_text(errors="replace"), f"{log.name} logs an output value"
