"""ingest through functions-framework's test client, in every delivery shape."""

from __future__ import annotations

import orjson
import pytest
from dcm_status_contracts import deadletter as dl

from tests import samples
from tests.functional.conftest import SHAPES

VALID = samples.load("valid") + samples.load("upstream")
INVALID = samples.load("invalid")



@pytest.mark.parametrize("shape", SHAPES)
def test_valid_event_is_forwarded_with_ordering_key(ingest, publisher, shape):
    sample = next(s for s in VALID if s.name == "vm-common-status")
    resp = SHAPES[shape](ingest, "dcm-status-ingress-aws", sample.data, sample.attributes)
    assert resp.status_code == 200, resp.data
    [out] = publisher.normalized()
    body = orjson.loads(out.data)
    assert body["key"] == "aws/vm/i-0abc" and body["status"] == "STOPPED"
    assert out.ordering_key == "aws/vm/i-0abc"
    assert body["ingress_topic"] == "dcm-status-ingress-aws"
    assert not publisher.on("dcm-status-deadletter")


@pytest.mark.parametrize("shape", SHAPES)
def test_invalid_event_is_dead_lettered_intact_and_acked(ingest, publisher, shape):
    sample = next(s for s in INVALID if s.name == "schema-invalid-status-type")
    resp = SHAPES[shape](ingest, "dcm-status-ingress-aws", sample.data, {"x-trace": "t1"})
    assert resp.status_code == 200
    [out] = publisher.on("dcm-status-deadletter")
    assert out.data == sample.data  # the original bytes, for replay
    assert out.attributes["x-trace"] == "t1"
    assert out.attributes[dl.REASON] == "schema_invalid"
    assert orjson.loads(out.attributes[dl.DETAIL])["path"] == "/data/status"
    assert out.attributes[dl.PROVIDER] == "aws"
    assert out.attributes[dl.SOURCE_TOPIC] == "dcm-status-ingress-aws"
    assert out.attributes[dl.KEY] == "aws/vm/i-0abc"
    assert not publisher.normalized()


@pytest.mark.parametrize("sample", VALID, ids=lambda s: s.name)
def test_every_valid_sample_is_forwarded(ingest, publisher, sample):
    resp = SHAPES["push"](ingest, f"dcm-status-ingress-{sample.provider}", sample.data, sample.attributes)
    assert resp.status_code == 200
    [out] = publisher.normalized()
    assert orjson.loads(out.data)["key"] == sample.expect["key"]


@pytest.mark.parametrize("sample", INVALID, ids=lambda s: s.name)
def test_every_invalid_sample_is_dead_lettered_with_its_reason(ingest, publisher, sample):
    resp = SHAPES["push"](ingest, f"dcm-status-ingress-{sample.provider}", sample.data, sample.attributes)
    assert resp.status_code == 200
    [out] = publisher.on("dcm-status-deadletter")
    assert out.attributes[dl.REASON] == sample.expect["reason"]
    assert out.attributes[dl.MESSAGE]


def test_pubsub_outage_raises_for_redelivery_and_resumes_ordering(ingest, publisher):
    sample = next(s for s in VALID if s.name == "vm-common-status")
    publisher.fail = True
    resp = SHAPES["push"](ingest, "dcm-status-ingress-aws", sample.data)
    assert resp.status_code == 500  # Pub/Sub will redeliver
    assert publisher.resumed == [("projects/dcm-test/topics/dcm-status-normalized-aws", "aws/vm/i-0abc")]


def test_push_without_topic_in_path_is_dead_lettered_as_provider_mismatch(ingest, publisher):
    sample = next(s for s in VALID if s.name == "vm-common-status")
    body = sample.push_body()
    resp = ingest.post("/", json=body)  # endpoint path without /projects/P/topics/T
    assert resp.status_code == 200
    [out] = publisher.on("dcm-status-deadletter")
    assert out.attributes[dl.REASON] == "provider_mismatch"


def test_direct_cloudevent_over_http_is_dead_lettered_not_applied(ingest, publisher):
    """A provider event POSTed straight to the function bypasses provider isolation."""
    event = {"specversion": "1.0", "id": "d1", "source": "aws-prod",
             "type": "dcm.providers.aws.vm.instances.i-9.status", "data": {"status": "RUNNING", "message": ""}}
    resp = ingest.post("/", data=orjson.dumps(event), headers={"content-type": "application/cloudevents+json"})
    assert resp.status_code == 200
    [out] = publisher.on("dcm-status-deadletter")
    assert out.attributes[dl.REASON] == "provider_mismatch"
    assert orjson.loads(out.data)["id"] == "d1"


def test_garbage_request_is_refused_not_acked(ingest, publisher):
    resp = ingest.post("/", data=b"hello", headers={"content-type": "text/plain"})
    assert resp.status_code >= 400  # not acked: a real subscription would redeliver, then dead-letter
    assert not publisher.messages


def test_pubsub_outage_while_dead_lettering_raises_for_redelivery(ingest, publisher):
    sample = next(s for s in INVALID if s.name == "schema-invalid-status-type")
    publisher.fail = True
    assert SHAPES["push"](ingest, "dcm-status-ingress-aws", sample.data).status_code == 500


def malformed_eventarc(client, topic: str):
    """A messagePublished CloudEvent whose data holds no Pub/Sub message."""
    event = {"specversion": "1.0", "id": "m-x", "type": "google.cloud.pubsub.topic.v1.messagePublished",
             "source": f"//pubsub.googleapis.com/projects/dcm-test/topics/{topic}",
             "datacontenttype": "application/json", "data": {"subscription": "s"}}
    return client.post("/", data=orjson.dumps(event), headers={"content-type": "application/cloudevents+json"})


def malformed_push(client, topic: str):
    """A raw push whose message data is not base64."""
    body = {"message": {"data": "not base64!!", "messageId": "m-b"}, "subscription": "s"}
    return client.post(f"/projects/dcm-test/topics/{topic}", json=body)


@pytest.mark.parametrize("deliver, why", [(malformed_eventarc, "without a 'message'"),
                                          (malformed_push, "not base64")])
def test_malformed_push_delivery_is_dead_lettered_and_acked_not_retried(ingest, publisher, deliver, why):
    """A delivery that is not a Pub/Sub message can never succeed: dead-letter it as it came, ack (200)."""
    assert deliver(ingest, "dcm-status-ingress-aws").status_code == 200  # a retry would only exhaust
    [out] = publisher.on("dcm-status-deadletter")
    assert out.attributes[dl.REASON] == "malformed_push" and why in out.attributes[dl.MESSAGE]
    assert out.attributes[dl.SOURCE_TOPIC] == "dcm-status-ingress-aws"
    assert out.attributes[dl.PROVIDER] == "aws"
    delivered = orjson.loads(out.data)
    assert delivered == {"subscription": "s"} or delivered["message"]["data"] == "not base64!!"
    assert not publisher.normalized()


def test_long_multibyte_resource_id_is_refused_precisely_and_its_dead_letter_fits_pubsub(ingest, publisher):
    """512 '€' (1,536 bytes; 4,608 once percent-encoded into a document id) cannot be stored: Firestore
    document ids hold 1,500 bytes. A precise rejection, and every attribute of the dead letter within
    Pub/Sub's 1,024 bytes (the key is clipped by bytes, on a character boundary)."""
    from dcm_status_contracts.pubsub_binding import to_message
    from dcm_status_contracts.status_report import build_event

    resource_id = "€" * 512
    data, attrs = to_message(build_event("aws", "vm", resource_id, "RUNNING", "up", event_id="mb-1"))
    assert SHAPES["push"](ingest, "dcm-status-ingress-aws", data, attrs).status_code == 200
    [out] = publisher.on("dcm-status-deadletter")
    assert out.attributes[dl.REASON] == "invalid_identity" and "1500" in out.attributes[dl.DETAIL]
    assert all(len(v.encode()) <= 1024 for v in out.attributes.values())
    assert not publisher.normalized()


def _counting_arrivals(monkeypatch) -> list[str | None]:
    """The topics ``Origins.arrival`` (the ingress trust rules: which provider a topic is for) is asked about."""
    from dcm_status_contracts.ingress import Origins

    asked: list[str | None] = []
    real = Origins.arrival
    monkeypatch.setattr(Origins, "arrival", lambda self, topic: asked.append(topic) or real(self, topic))
    return asked


def test_the_ingress_trust_rules_are_asked_once_per_message_and_the_answer_passed_on(ingest, publisher, monkeypatch):
    """Issue 39: the entry point asks which provider the topic is for (tracing's edge); admit, normalize
    and a rejection's dead letter read that answer instead of asking again."""
    asked = _counting_arrivals(monkeypatch)
    sample = next(s for s in VALID if s.name == "vm-common-status")
    assert SHAPES["push"](ingest, "dcm-status-ingress-aws", sample.data, sample.attributes).status_code == 200
    assert asked == ["dcm-status-ingress-aws"] and len(publisher.normalized()) == 1
    asked.clear()
    invalid = next(s for s in INVALID if s.name == "schema-invalid-status-type")
    assert SHAPES["push"](ingest, "dcm-status-ingress-aws", invalid.data, {}).status_code == 200
    assert asked == ["dcm-status-ingress-aws"]
    assert publisher.on("dcm-status-deadletter")[0].attributes[dl.PROVIDER] == "aws"


def test_a_replay_asks_once_more_of_the_ingress_topic_it_names(ingest, publisher, monkeypatch):
    """From the replay topic the message stands for its ingress topic (``dcm-replay-topic``): that one topic is
    asked about too, and it says who the provider is."""
    asked = _counting_arrivals(monkeypatch)
    sample = next(s for s in VALID if s.name == "vm-common-status")
    attributes = {**sample.attributes, dl.REPLAY_TOPIC: "dcm-status-ingress-aws", dl.REPLAY_OF: "entry-1"}
    assert SHAPES["push"](ingest, "dcm-status-replay", sample.data, attributes).status_code == 200
    assert asked == ["dcm-status-replay", "dcm-status-ingress-aws"]
    [out] = publisher.normalized()
    assert orjson.loads(out.data)["ingress_topic"] == "dcm-status-ingress-aws"
