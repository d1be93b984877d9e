"""The in-process pipeline (tests/pipeline.py) routes as the topology declares and Pub/Sub delivers: each failure
mode of the stand-in named by a test, so a test built on it cannot pass on a stand-in that routes wrongly."""

from __future__ import annotations

import base64

import orjson
import pytest
from dcm_status_contracts.pubsub_binding import to_message
from dcm_status_contracts.status_report import build_event
from google.api_core import exceptions as gexc

from tests.pipeline import _Filter


def test_a_report_reaches_firestore_and_its_change_every_consumer_of_the_changed_topic(pipeline):
    pipeline.reporter("aws").publish_now("vm", "web-1", "STOPPED", "down").result()
    settled = pipeline.settle()
    assert pipeline.resource("aws/vm/web-1")["status"] == "STOPPED"
    # billing is no consumer of the changed topic (issue 40): upsert recorded the transition in its commit
    assert [d.subscription.name for d in settled] == ["dcm-ingest-aws", "dcm-upsert-aws", "dcm-audit-stopped"]
    assert len(list(pipeline.db.collection_group("transitions").stream())) == 1
    # no callback is registered: upsert marks the change notify="0" and the subscription's filter keeps it
    assert [d.subscription.name for d in pipeline.bus.filtered] == ["dcm-notify"]
    assert all(a == 200 for d in settled for a in d.answers)


def test_a_subscription_filter_keeps_what_it_refuses_from_the_function(pipeline):
    pipeline.reporter("aws").publish_now("vm", "web-1", "RUNNING", "up").result()
    pipeline.settle()
    assert [d.subscription.name for d in pipeline.bus.filtered] == ["dcm-audit-stopped", "dcm-notify"]  # not a stop
    assert "dcm-audit-stopped" not in [d.subscription.name for d in pipeline.bus.delivered]


@pytest.mark.parametrize("text, attributes, expected", [
    ('attributes.newStatus = "STOPPED"', {"newStatus": "STOPPED"}, True),
    ('attributes.newStatus = "STOPPED"', {}, False),
    ('NOT attributes.notify = "0"', {}, True),
    ('NOT attributes.notify = "0"', {"notify": "0"}, False),
    ('attributes:a AND (attributes.b != "x" OR hasPrefix(attributes.c, "pre"))', {"a": "", "c": "prefix"}, True),
    ('-attributes:a', {"a": "1"}, False),
])
def test_filters_read_as_pubsub_reads_them(text, attributes, expected):
    assert _Filter(text).matches(attributes) is expected


def test_a_filter_it_cannot_read_is_an_error_not_a_match():
    with pytest.raises(ValueError):
        _Filter('data.x = "1"').matches({})


def test_publishes_production_refuses_are_refused(pipeline):
    with pytest.raises(gexc.NotFound):
        pipeline.publish("dcm-status-nowhere", b"x")
    with pytest.raises(gexc.InvalidArgument):
        pipeline.publish("ingress:aws", b"")  # neither data nor attributes
    with pytest.raises(gexc.InvalidArgument):
        pipeline.publish("ingress:aws", b"x", **{"googx": "1"})
    with pytest.raises(TypeError):
        pipeline.publish("ingress:aws", b"x", n=1)
    assert not pipeline.bus.queue


def test_a_message_nacked_max_delivery_attempts_times_is_dead_lettered_with_pubsubs_attributes(pipeline):
    real = pipeline.bus._push
    pipeline.bus._push = lambda function, topic, body: 500 if function == "upsert" else real(function, topic, body)
    data, attrs = to_message(build_event("aws", "vm", "web-1", "RUNNING", time="2026-03-01T10:00:00Z"))
    pipeline.send("ingress:aws", data, **attrs)
    [upsert] = [d for d in pipeline.bus.delivered if d.subscription.name == "dcm-upsert-aws"]
    assert upsert.answers == [500] * 5
    [dead] = pipeline.bus.on("dcm-status-deadletter")
    assert dead.attributes["CloudPubSubDeadLetterSourceSubscription"] == "dcm-upsert-aws"
    assert dead.attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == "5"
    assert pipeline.bus.pulled["dcm-deadletter-archive"][0].data == dead.data


def test_an_ordered_subscription_holds_a_keys_later_messages_behind_a_nacked_one(pipeline):
    answers = iter([500, 200, 200, 200])
    seen: list[int] = []

    def push(function, topic, body):
        seen.append(orjson.loads(base64.b64decode(body["message"]["data"]))["n"])
        return next(answers)

    pipeline.bus._push = push
    for n in (1, 2):
        pipeline.publish("normalized:aws", orjson.dumps({"n": n}), ordering_key="k")
    pipeline.publish("normalized:aws", orjson.dumps({"n": 3}), ordering_key="other")
    pipeline.settle()
    assert seen == [1, 1, 2, 3]  # 1 again before 2; key 'other' waited for nothing but the queue
