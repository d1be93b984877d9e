"""The AWS reference provider (on the provider kit) against moto's EC2."""

from __future__ import annotations

import boto3
import orjson
import pytest
from dcm_status_contracts import timeutil
from dcm_status_contracts.model import PubSubMessage
from dcm_status_sdk import Reporter, ReporterConfig
from moto import mock_aws

from infra.providers.aws_ec2 import Ec2Bridge, transition_time
from shared.ingest.normalize import normalize_message
from shared.runtime import settings
from tests.fakes import FakePublisher


@pytest.fixture
def ec2(monkeypatch):
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                 # moto's catalogue of public AMIs, parsed for each mocked account and region (the file took 11.4 s
                 # with it, 6.0 s without): the bridge launches its own image id and reads none of them
                 "MOTO_EC2_LOAD_DEFAULT_AMIS": "false"}.items():
        monkeypatch.setenv(k, v)
    with mock_aws():
        yield boto3.client("ec2", region_name="us-east-1")


def kit(publisher: FakePublisher) -> Reporter:
    return Reporter(ReporterConfig(project="p", provider="aws", debounce_seconds=0), publisher=publisher)


class Polled(Ec2Bridge):
    def poll_once(self):
        changed = super().poll_once()
        self.reporter.flush(timeout=5)  # the kit publishes in the background
        return changed


@pytest.fixture
def bridge(ec2):
    publisher = FakePublisher()
    polled = Polled(ec2, kit(publisher), "us-east-1")
    yield polled, publisher
    polled.reporter.close()


def launch(ec2, **tags) -> str:
    spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
    return ec2.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1, InstanceType="t3.small",
                             TagSpecifications=spec)["Instances"][0]["InstanceId"]


def published(publisher) -> list[dict]:
    return [orjson.loads(m.data) for m in publisher.messages]


def test_a_running_instance_is_reported_once(bridge, ec2):
    b, publisher = bridge
    iid = launch(ec2, tenant="acme", environment="prod")
    [obs] = b.poll_once()
    assert (obs.instance_id, obs.status.status) == (iid, "RUNNING")
    assert b.poll_once() == []  # unchanged: debounced
    [event] = published(publisher)
    assert event["type"] == "dcm.status.vm" and event["data"]["id"] == iid
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
    for publisher in (first, second):
        with kit(publisher) as reporter:
            Ec2Bridge(ec2, reporter, "us-east-1").poll_once()
    a, b = published(first)[0], published(second)[0]
    assert (a["id"], a["source"], a["time"]) == (b["id"], b["source"], b["time"])  # deduplicated downstream


def test_a_terminated_spot_instance_is_failed_not_deleted(bridge, ec2):
    b, publisher = bridge
    iid = launch(ec2)
    b.poll_once()
    instance = ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]
    instance["State"] = {"Code": 48, "Name": "terminated"}
    instance["StateReason"] = {"Code": "Server.SpotInstanceTermination", "Message": "spot capacity reclaimed"}
    b.ec2 = FrozenEc2([instance])
    [failed] = b.poll_once()
    assert failed.status.status == "FAILED"
    assert published(publisher)[-1]["data"]["reason"] == failed.status.raw


def test_every_tenth_poll_is_a_resync_of_the_whole_inventory(bridge, ec2):
    b, publisher = bridge
    ids = {launch(ec2), launch(ec2)}
    for _ in range(10):
        b.poll_once()
    batch = [e for e in published(publisher) if "resyncid" in e]
    assert {e["data"]["id"] for e in batch} == ids and {e["resynctotal"] for e in batch} == {2}


class FrozenEc2:
    """An EC2 client whose DescribeInstances answers what it is given (a state moto cannot produce)."""

    def __init__(self, instances: list[dict]):
        self.instances = instances

    def get_paginator(self, name: str):
        assert name == "describe_instances"
        return self

    def paginate(self):
        return [{"Reservations": [{"Instances": self.instances}]}]


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
