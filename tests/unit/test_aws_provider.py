"""The AWS reference provider against moto's EC2."""

from __future__ import annotations

import boto3
import orjson
import pytest
from moto import mock_aws

from infra.providers.aws_ec2 import EC2_STATES, Ec2Bridge, transition_time
from infra.providers.reporter import StatusReporter
from shared.contracts import timeutil
from shared.contracts.model import PubSubMessage
from shared.ingest.normalize import normalize_message
from shared.runtime import settings
from tests.fakes import FakePublisher


@pytest.fixture
def ec2(monkeypatch):
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    with mock_aws():
        yield boto3.client("ec2", region_name="us-east-1")


@pytest.fixture
def bridge(ec2):
    publisher = FakePublisher()
    return Ec2Bridge(ec2, StatusReporter(publisher, "p", "aws"), "us-east-1"), publisher


def launch(ec2, **tags) -> str:
    spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
    return ec2.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1, InstanceType="t3.small",
                             TagSpecifications=spec)["Instances"][0]["InstanceId"]


def published(publisher) -> list[dict]:
    return [orjson.loads(m.data) for m in publisher.messages]


def test_the_mapping_is_the_proposals():
    assert EC2_STATES == {"pending": "PROVISIONING", "running": "RUNNING", "stopping": "STOPPING",
                          "stopped": "STOPPED", "shutting-down": "DELETING", "terminated": "DELETED"}


def test_a_running_instance_is_reported_once(bridge, ec2):
    b, publisher = bridge
    iid = launch(ec2, tenant="acme", environment="prod")
    [obs] = b.poll_once()
    assert (obs.instance_id, obs.status) == (iid, "RUNNING")
    assert b.poll_once() == []  # unchanged: debounced
    [event] = published(publisher)
    assert event["type"] == f"dcm.providers.aws.vm.instances.{iid}.status"
    assert event["data"]["metadata"]["tenant"] == "acme" and event["data"]["metadata"]["region"] == "us-east-1"
    assert event["data"]["resourceSpecific"]["ipAddress"]


def test_lifecycle_stop_and_terminate(bridge, ec2):
    b, publisher = bridge
    iid = launch(ec2)
    b.poll_once()
    ec2.stop_instances(InstanceIds=[iid])
    [stopped] = b.poll_once()
    ec2.terminate_instances(InstanceIds=[iid])
    [terminated] = b.poll_once()
    assert [e["data"]["status"] for e in published(publisher)] == ["RUNNING", "STOPPED", "DELETED"]
    assert stopped.transition_time <= terminated.transition_time


def test_a_restarted_bridge_publishes_exact_duplicates(ec2):
    launch(ec2)
    first, second = FakePublisher(), FakePublisher()
    Ec2Bridge(ec2, StatusReporter(first, "p", "aws"), "us-east-1").poll_once()
    Ec2Bridge(ec2, StatusReporter(second, "p", "aws"), "us-east-1").poll_once()
    a, b = published(first)[0], published(second)[0]
    assert (a["id"], a["source"], a["time"]) == (b["id"], b["source"], b["time"])  # deduplicated downstream


def test_what_the_bridge_publishes_passes_ingest(bridge, ec2):
    b, publisher = bridge
    iid = launch(ec2, tenant="acme")
    b.poll_once()
    [m] = publisher.messages
    message = PubSubMessage(m.data, m.attributes, "1", None, "dcm-status-ingress-aws")
    update = normalize_message(message, settings.from_env())
    assert str(update.key) == f"aws/vm/{iid}" and update.status == "RUNNING" and update.status_recognized


def test_transition_time_comes_from_the_reason_then_launch_time():
    now = timeutil.parse("2026-01-02T00:00:00Z")
    stopped = {"State": {"Name": "stopped"}, "StateTransitionReason": "User initiated (2026-01-01 10:00:00 UTC)"}
    running = {"State": {"Name": "running"}, "LaunchTime": timeutil.parse("2026-01-01T09:00:00Z")}
    unknown = {"State": {"Name": "stopped"}, "StateTransitionReason": ""}
    assert transition_time(stopped, now) == "2026-01-01T10:00:00.000000Z"
    assert transition_time(running, now) == "2026-01-01T09:00:00.000000Z"
    assert transition_time(unknown, now) == "2026-01-02T00:00:00.000000Z"
