"""output_spec and outputs on the Firestore emulator: upsert stores, replaces, keeps them (as the DCM
control-plane does), announces a change of them alone, carries them through a hot resource; the API shows
them with the redaction list applied."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from dcm_status_contracts import status_update
from dcm_status_contracts.model import PubSubMessage
from dcm_status_contracts.outputs import REDACTED
from dcm_status_contracts.pubsub_binding import to_message
from dcm_status_contracts.status_report import build_event
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.ingest.normalize import normalize_message
from shared.runtime import settings
from shared.state.documents import Outcome
from shared.state.resources import newest
from shared.upsert.handler import Upsert
from shared.upsert.store import StateStore
from tests.fakes import runtime_of
from tests.functional.conftest import PROJECT, Checked, bind_all
from tests.functional.test_hot_resource import make_hot
from tests.functional.test_upsert import post, resource

SPEC = {"host": "10.0.1.5", "port": 5432, "password": "s3cret"}


def normalized(status: str, time: str, event_id: str, rid: str = "i-1", transition: bool = True,
               **maps: Any) -> bytes:
    data, attrs = to_message(build_event("aws", "vm", rid, status, event_id=event_id, time=time,
                                                last_transition_time=time if transition else None, **maps))
    msg = PubSubMessage(data, attrs, f"in-{event_id}", time, "dcm-status-ingress-aws")
    return status_update.to_bytes(normalize_message(msg, settings.from_env()))


def history(db, rid: str = "i-1") -> list[dict[str, Any]]:
    """The resource's history as stored: its ledger entries that carry it (issue 32), oldest observation first."""
    entries = [s.to_dict() for s in
               db.collection("events").where(filter=FieldFilter("key", "==", f"aws/vm/{rid}")).stream()]
    return sorted((e for e in entries if "recordedAt" in e), key=lambda e: e["observedAt"])


def changes_published(publisher) -> list[dict[str, Any]]:
    return [orjson.loads(m.data)["data"] for m in publisher.on("dcm-status-changed")]


def test_a_map_is_stored_replaced_whole_and_kept_when_an_event_omits_it(upsert, firestore, publisher):
    post(upsert, normalized("RUNNING", "2026-01-01T10:00:00Z", "e1", output_spec=SPEC, outputs={"port": 1}))
    doc = resource(firestore)
    assert doc["output_spec"] == SPEC and doc["outputs"] == {"port": 1}
    post(upsert, normalized("RUNNING", "2026-01-01T10:01:00Z", "e2", transition=False,
                            output_spec={"host": "10.0.1.6"}), "n-2")
    assert resource(firestore)["output_spec"] == {"host": "10.0.1.6"}  # whole: port and password gone
    post(upsert, normalized("STOPPED", "2026-01-01T10:02:00Z", "e3"), "n-3")
    doc = resource(firestore)
    assert doc["status"] == "STOPPED" and doc["output_spec"] == {"host": "10.0.1.6"} and doc["outputs"] == {"port": 1}
    post(upsert, normalized("STOPPED", "2026-01-01T10:03:00Z", "e4", transition=False, outputs={}), "n-4")
    assert resource(firestore)["outputs"] == {}  # {} clears, as the control-plane's non-nil empty map does
    entries = history(firestore)
    assert [e.get("output_spec") for e in entries] == [SPEC] + [{"host": "10.0.1.6"}] * 3  # as held after each
    assert [e.get("outputs") for e in entries] == [{"port": 1}] * 3 + [{}]


def test_a_stale_event_never_touches_the_maps(upsert, firestore, publisher):
    post(upsert, normalized("RUNNING", "2026-01-01T10:00:00Z", "e1", output_spec={"host": "new"}))
    post(upsert, normalized("PROVISIONING", "2026-01-01T09:00:00Z", "e0", output_spec={"host": "old"}), "n-0")
    assert resource(firestore)["output_spec"] == {"host": "new"}
    stale, applied = history(firestore)
    assert (stale["outcome"], stale["output_spec"]) == ("stale", {"host": "old"})  # what it said, not applied
    assert applied["output_spec"] == {"host": "new"}


def test_new_outputs_alone_are_a_change_announced_with_pointers_and_the_same_ones_a_re_report(
        upsert, firestore, publisher):
    post(upsert, normalized("RUNNING", "2026-01-01T10:00:00Z", "e1", output_spec=SPEC))
    first = changes_published(publisher)[0]
    assert {"attribute": "/output_spec", "old": None, "new": {**SPEC, "password": REDACTED}} in first["changes"]
    moved = {**SPEC, "host": "10.0.1.6", "password": "rotated"}
    post(upsert, normalized("RUNNING", "2026-01-01T10:01:00Z", "e2", transition=False, output_spec=moved), "n-2")
    assert firestore.collection("events").where(filter=FieldFilter("eventId", "==", "e2")).get()[0].to_dict()["outcome"] == "applied"
    [_, change] = changes_published(publisher)
    assert (change["oldStatus"], change["newStatus"]) == ("RUNNING", "RUNNING")
    assert change["oldTransitionTime"] == change["newTransitionTime"]
    assert change["changes"] == [{"attribute": "/output_spec/host", "old": "10.0.1.5", "new": "10.0.1.6"},
                                 {"attribute": "/output_spec/password", "old": REDACTED, "new": REDACTED}]
    assert change["resource"]["output_spec"]["password"] == REDACTED
    assert resource(firestore)["output_spec"]["password"] == "rotated"  # the store keeps the value
    post(upsert, normalized("RUNNING", "2026-01-01T10:02:00Z", "e3", transition=False, output_spec=moved), "n-3")
    post(upsert, normalized("RUNNING", "2026-01-01T10:03:00Z", "e4", transition=False), "n-4")
    outcomes = {e.to_dict()["eventId"]: e.to_dict()["outcome"] for e in firestore.collection("events").stream()}
    assert "e3" not in outcomes and "e4" not in outcomes  # the same map, or none: a re-report, no ledger entry
    assert resource(firestore)["reReports"] == 2 and resource(firestore)["eventId"] == "e4"
    assert len(changes_published(publisher)) == 2 and resource(firestore)["flapping"] is None


def test_a_hot_resource_carries_its_maps_on_the_ledger(firestore, publisher):
    upsert = Upsert(StateStore(firestore), publisher, "projects/p/topics/dcm-status-changed")
    last = make_hot(upsert, "hot-1")
    assert firestore.document("resources/aws~vm~hot-1").get().to_dict()["hot"] is True
    update = status_update.from_bytes(normalized("STOPPED", "2026-01-01T10:00:30Z", "hot-o", rid="hot-1",
                                             transition=False, output_spec={"host": "h2"}))
    assert upsert.apply(update).outcome is Outcome.APPLIED
    kept = status_update.from_bytes(normalized("STOPPED", "2026-01-01T10:00:31Z", "hot-k", rid="hot-1",
                                           transition=False))
    assert upsert.apply(kept).outcome is Outcome.UNCHANGED
    state = newest(firestore, firestore.document("resources/aws~vm~hot-1").get().to_dict())
    assert state["output_spec"] == {"host": "h2"} and state["eventId"] != last


@pytest.fixture
def redacting_api(client, firestore):
    bind_all(runtime_of(firestore=firestore, DCM_PROJECT=PROJECT, DCM_OUTPUT_REDACT="port,/output_spec/db"))
    return Checked(client)


def test_the_api_shows_the_maps_redacted_in_every_representation(upsert, firestore, publisher, api):
    spec = {**SPEC, "url": "postgres://app:pw@db:5432/x"}
    post(upsert, normalized("RUNNING", "2026-01-01T10:00:00Z", "e1", output_spec=spec, outputs={"port": 5432}))
    got = api.get("/v1/resources/aws/vm/i-1").get_json()
    assert got["output_spec"] == {"host": "10.0.1.5", "port": 5432, "password": REDACTED,
                                  "url": f"postgres://app:{REDACTED}@db:5432/x"}
    assert got["outputs"] == {"port": 5432}
    listed = api.get("/v1/resources?provider=aws").get_json()["resources"][0]
    [entry] = api.get("/v1/resources/aws/vm/i-1/history").get_json()["entries"]
    at = api.get("/v1/resources/aws/vm/i-1?at=2027-01-01T00:00:00Z").get_json()["state"]
    assert listed["output_spec"] == entry["output_spec"] == at["output_spec"] == got["output_spec"]
    assert "s3cret" not in api.get("/v1/changes").get_data(as_text=True)


def test_the_redaction_list_is_the_operators(upsert, firestore, publisher, redacting_api):
    post(upsert, normalized("RUNNING", "2026-01-01T10:00:00Z", "e1", output_spec={**SPEC, "db": {"u": "x"}},
                            outputs={"port": 5432}))
    got = redacting_api.get("/v1/resources/aws/vm/i-1").get_json()
    assert got["output_spec"] == {"host": "10.0.1.5", "port": REDACTED, "password": "s3cret", "db": REDACTED}
    assert got["outputs"] == {"port": REDACTED}


# ---- the whole pipeline (moved from tests/e2e/test_outputs.py, issue 41) -------------------------------
def test_outputs_travel_the_pipeline_redacted_for_readers_and_never_logged(pipeline, logged):
    """ingress -> ingest -> normalized -> upsert -> Firestore, the change feed, the API: stored, replaced whole,
    kept when omitted, announced with JSON pointers, a credential among them redacted for readers and never in a
    function's log, a malformed map dead-lettered with its path."""
    from shared.deadletter.store import DeadLetterStore

    secret, uid = "e2e-s3cret-value", "fn"
    aws = pipeline.reporter("aws")
    rid, key = f"out-{uid}", f"aws/vm/out-{uid}"
    spec = {"host": "10.0.1.5", "port": 5432, "password": secret}
    aws.publish_now("vm", rid, "RUNNING", "up", time="2026-05-01T10:00:00Z", last_transition_time="2026-05-01T10:00:00Z",
                    output_spec=spec, outputs={"connectionString": f"postgres://app:{secret}@10.0.1.5/db"}).result(30)
    pipeline.settle()
    assert pipeline.resource(key)["status"] == "RUNNING" and pipeline.resource(key)["output_spec"] == spec
    # New outputs alone (same status, no transition): stored whole, announced; then a report without them keeps them.
    moved = {"host": "10.0.1.6", "port": 5432, "password": secret}
    aws.publish_now("vm", rid, "RUNNING", "up", time="2026-05-01T10:01:00Z", output_spec=moved).result(30)
    pipeline.settle()
    assert pipeline.resource(key)["output_spec"] == moved
    aws.publish_now("vm", rid, "STOPPED", "down", time="2026-05-01T10:02:00Z",
                    last_transition_time="2026-05-01T10:02:00Z").result(30)
    pipeline.settle()
    doc = pipeline.resource(key)
    assert doc["status"] == "STOPPED"
    assert doc["output_spec"] == moved and doc["outputs"]["connectionString"].startswith("postgres://app:")

    shown = pipeline.api.get(f"/v1/resources/{key}").json
    assert shown["output_spec"] == {**moved, "password": "[redacted]"}
    assert shown["outputs"] == {"connectionString": "postgres://app:[redacted]@10.0.1.5/db"}
    feed = [c for c in pipeline.api.get("/v1/changes?last=50").json["changes"] if c["key"] == key]
    assert len(feed) == 3
    outputs_only = next(c for c in feed if c["oldStatus"] == c["newStatus"] == "RUNNING")
    assert {"attribute": "/output_spec/host", "old": "10.0.1.5", "new": "10.0.1.6"} in outputs_only["changes"]
    assert secret not in orjson.dumps(feed).decode()

    # A map that is not one is dead-lettered with its path; its value is in no log line.
    bad = {"specversion": "1.0", "id": f"bad-{uid}", "source": "aws-provider", "time": "2026-05-01T10:03:00Z",
           "type": f"dcm.providers.aws.vm.instances.{rid}.status",
           "data": {"status": "RUNNING", "output_spec": f"postgres://app:{secret}@h/db"}}
    pipeline.send("ingress:aws", orjson.dumps(bad), **{"content-type": "application/cloudevents+json"})
    [entry] = [e for e in DeadLetterStore(pipeline.db).query(reason="schema_invalid") if e.get("key") == key]
    assert entry["reason"] == "schema_invalid" and entry["message"].startswith("/data/output_spec")
    assert secret not in logged.text(), "a function logs an output value"
