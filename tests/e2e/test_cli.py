"""The dcm-status command line: the contract other tools and tests use."""

from __future__ import annotations

import json

import pytest
from google.cloud import pubsub_v1

from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.e2e


def test_env_describes_the_stack(e2e):
    env = json.loads(e2e.cli("env", "--json").stdout)
    assert env["project"] == e2e.project
    assert env["pubsub_emulator_host"] == e2e.state.pubsub_host
    assert env["firestore_emulator_host"] == e2e.state.firestore_host
    assert env["topics"]["ingress"]["aws"] == f"projects/{e2e.project}/topics/dcm-status-ingress-aws"
    assert set(env["topics"]["ingress"]) == set(e2e.state.providers)


def test_up_is_idempotent(e2e):
    before = json.loads(e2e.cli("env", "--json").stdout)
    e2e.cli("up", "--providers", ",".join(e2e.state.providers))
    assert json.loads(e2e.cli("env", "--json").stdout) == before


def test_publish_get_list_stats(e2e, uid):
    e2e.cli("publish", "--provider", "azure", "--type", "volume", "--id", f"vol-{uid}", "--status", "in-use",
            "--message", "attached", "--time", "2026-02-03T10:00:00Z")
    e2e.cli("publish", "--provider", "azure", "--type", "volume", "--id", f"vol2-{uid}", "--status", "AVAILABLE",
            "--mode", "binary")
    wait_until(lambda: e2e.cli("get", f"azure/volume/vol-{uid}", check=False).returncode == 0,
               what="the volume to be stored")
    doc = json.loads(e2e.cli("get", f"azure/volume/vol-{uid}", "--json", "--history").stdout)
    assert doc["status"] == "RUNNING" and doc["rawStatus"] == "in-use" and doc["message"] == "attached"
    assert doc["lastTransitionTime"] == "2026-02-03T10:00:00.000000Z" and doc["eventId"]
    assert [h["status"] for h in doc["history"]] == ["RUNNING"]
    e2e.wait_for_status(f"azure/volume/vol2-{uid}", "AVAILABLE")
    listed = json.loads(e2e.cli("list", "--provider", "azure", "--type", "volume", "--status", "RUNNING",
                                "--json").stdout)
    assert f"azure/volume/vol-{uid}" in {d["key"] for d in listed}
    assert all(d["status"] == "RUNNING" and d["provider"] == "azure" for d in listed)
    stats = json.loads(e2e.cli("stats", "--json").stdout)
    assert {"received", "applied", "duplicate", "stale", "deadlettered"} <= set(stats)
    assert stats["received"] == stats["applied"] + stats["duplicate"] + stats["stale"] + stats["deadlettered"]


def test_get_unknown_resource_exits_1(e2e, uid):
    result = e2e.cli("get", f"aws/vm/nothing-{uid}", "--json", check=False)
    assert result.returncode == 1 and "unknown resource" in result.stderr


def test_bad_input_gets_a_clear_error(e2e):
    bad_key = e2e.cli("get", "not-a-key", check=False)
    assert bad_key.returncode == 2 and "PROVIDER/TYPE/ID" in bad_key.stderr
    bad_provider = e2e.cli("provider", "add", "Bad_Name", check=False)
    assert bad_provider.returncode == 2 and "lowercase" in bad_provider.stderr


def test_provider_add_creates_its_topic_and_subscription(e2e, uid):
    name = f"p{uid[:6]}"
    e2e.cli("provider", "add", name)
    subscriber = pubsub_v1.SubscriberClient()
    sub = subscriber.get_subscription(subscription=f"projects/{e2e.project}/subscriptions/dcm-ingest-{name}")
    assert sub.topic == f"projects/{e2e.project}/topics/dcm-status-ingress-{name}"
    assert sub.push_config.push_endpoint.endswith(f"/topics/dcm-status-ingress-{name}")
    e2e.cli("publish", "--provider", name, "--type", "network", "--id", f"net-{uid}", "--status", "ACTIVE")
    e2e.wait_for_status(f"{name}/network/net-{uid}", "READY")  # network v1's ACTIVE, stored in v2's words
