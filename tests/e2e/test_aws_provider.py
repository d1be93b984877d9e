"""The AWS reference provider end to end: moto's EC2 server -> bridge -> pipeline -> Firestore."""

from __future__ import annotations

import boto3
import pytest
from google.cloud.firestore_v1.base_query import FieldFilter
from moto.server import ThreadedMotoServer

from infra.local.emulators import free_port
from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.e2e
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "MOTO_EC2_LOAD_DEFAULT_AMIS": "false"}  # moto's catalogue of public AMIs: none is read here


@pytest.fixture
def moto_ec2(monkeypatch):
    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", boto3.client("ec2", region_name="us-east-1",
                                                       endpoint_url=f"http://127.0.0.1:{port}")
    finally:
        server.stop()


def test_ec2_instance_states_reach_firestore(e2e, moto_ec2):
    endpoint, ec2 = moto_ec2
    iid = ec2.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1, InstanceType="t3.small",
                            TagSpecifications=[{"ResourceType": "instance",
                                                "Tags": [{"Key": "tenant", "Value": "acme"}]}])["Instances"][0]["InstanceId"]
    e2e.cli("provider", "run-aws", "--once", "--endpoint-url", endpoint)
    running = e2e.wait_for_status(f"aws/vm/{iid}", "RUNNING")
    assert running["metadata"]["tenant"] == "acme" and running["eventSource"] == "dcm/providers/aws"
    ec2.stop_instances(InstanceIds=[iid])
    e2e.cli("provider", "run-aws", "--once", "--endpoint-url", endpoint)
    e2e.cli("provider", "run-aws", "--once", "--endpoint-url", endpoint)  # a restarted bridge: a duplicate
    stopped = e2e.wait_for_status(f"aws/vm/{iid}", "STOPPED")
    wait_until(lambda: list(e2e.db.collection("duplicates").where(
        filter=FieldFilter("key", "==", f"aws/vm/{iid}")).stream()), what="the restarted bridge's duplicate")
    assert e2e.resource(f"aws/vm/{iid}")["updates"] == 2 == stopped["updates"]
