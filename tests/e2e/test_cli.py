"""The dcm-status command line: the contract other tools and tests use."""

from __future__ import annotations

import json
import signal

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
    up = e2e.cli("up", "--providers", ",".join(e2e.state.providers))
    assert json.loads(e2e.cli("env", "--json").stdout) == before
    assert "loopback hooks are allowed" in up.stderr  # the local stack says what production would refuse


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
    outcomes = ("applied", "unchanged", "duplicate", "stale", "deadlettered")
    assert stats["applied"] >= 2  # these two, beside what other tests stored on the shared stack
    assert stats["received"] == sum(stats[o] for o in outcomes)  # re-reports (unchanged) are received too


def test_provider_add_creates_its_topic_and_subscription(e2e, uid):
    name = f"p{uid[:6]}"
    e2e.cli("provider", "add", name)
    subscriber = pubsub_v1.SubscriberClient()
    sub = subscriber.get_subscription(subscription=f"projects/{e2e.project}/subscriptions/dcm-ingest-{name}")
    assert sub.topic == f"projects/{e2e.project}/topics/dcm-status-ingress-{name}"
    assert sub.push_config.push_endpoint.endswith(f"/topics/dcm-status-ingress-{name}")
    e2e.cli("publish", "--provider", name, "--type", "network", "--id", f"net-{uid}", "--status", "ACTIVE")
    e2e.wait_for_status(f"{name}/network/net-{uid}", "READY")  # network v1's ACTIVE, stored in v2's words


PUBLISH_MISTAKES = [
    # (what, publish arguments, what stderr says)
    ("provider not added", ["--provider", "nosuch", "--type", "vm", "--status", "RUNNING"],
     "provider nosuch not added; run 'dcm-status provider add nosuch'"),
    # the others (ingest's checks, no stack needed): tests/functional/test_cli_mistakes.py, as are `get` of an
    # unknown resource, an unknown status's warning, and `publish --no-validate` with `dlq show` of a short id
]


@pytest.mark.parametrize("what, args, says", PUBLISH_MISTAKES, ids=[m[0] for m in PUBLISH_MISTAKES])
def test_publish_refuses_what_the_pipeline_would_reject(e2e, uid, what, args, says):
    result = e2e.cli("publish", *(args if "--id" in args else ["--id", f"refused-{uid}", *args]), check=False)
    assert result.returncode == 1 and says in result.stderr and "Traceback" not in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1


def test_status_logs_and_watch(e2e, uid):
    status = e2e.cli("status")
    assert "function upsert" in status.stdout and status.stdout.count(" up ") >= 7
    logs = e2e.cli("logs", "upsert", "-n", "5", "--json")
    assert all(json.loads(line) for line in logs.stdout.splitlines())
    named = e2e.cli("logs", "-n", "1").stdout.splitlines()
    assert {line.split()[0] for line in named} <= set(e2e.stack.topology(e2e.state).functions)
    watcher = e2e.cli_process("watch", "--provider", "aws", "--json")
    try:
        assert "watching" in watcher.stderr.readline()
        e2e.cli("publish", "--provider", "aws", "--type", "vm", "--id", f"watched-{uid}", "--status", "RUNNING")
        line = wait_until(lambda: _line_with(watcher, f"watched-{uid}"), 30, what="the change in watch")
        assert json.loads(line)["data"]["newStatus"] == "RUNNING"
    finally:
        watcher.send_signal(signal.SIGINT)
        watcher.wait(timeout=15)  # Ctrl-C is answered within one pull (PULL_WAIT)
    subscriber = pubsub_v1.SubscriberClient()
    assert not [s for s in subscriber.list_subscriptions(project=f"projects/{e2e.project}")
                if "dcm-watch-" in s.name]  # its own subscription is gone with it


def _line_with(process, text: str) -> str | None:
    line = process.stdout.readline()
    return line if text in line else None


def test_demo_does_not_erase_what_a_user_stored_without_asking(e2e, uid):
    e2e.cli("publish", "--provider", "aws", "--type", "vm", "--id", f"mine-{uid}", "--status", "RUNNING")
    e2e.wait_for_status(f"aws/vm/mine-{uid}", "RUNNING")
    refused = e2e.cli("demo", "--resources", "1", check=False, input="")
    assert refused.returncode == 1 and "demo --reset" in refused.stderr and "Traceback" not in refused.stderr
    assert e2e.resource(f"aws/vm/mine-{uid}") is not None


@pytest.mark.timeout(240)
def test_chaos_on_a_running_stack_moves_it_behind_the_fault_proxy_and_keeps_its_data(e2e):
    """`up --chaos` on a stack started without the fault proxy (the session's: conftest's
    _move_behind_the_fault_proxy) moves the functions behind one, keeping every stored state; the
    functions then read and write through it. (`down`'s wording: tests/functional/test_cli_mistakes.py.)"""
    move = e2e.chaos_move
    assert move.answer.returncode == 0, move.answer.stderr
    assert "behind a Firestore fault proxy (data kept)" in move.answer.stderr
    assert e2e.state.firestore_proxy and e2e.state.functions_firestore_host != e2e.state.firestore_host
    assert json.loads(e2e.cli("get", move.kept, "--json").stdout)["status"] == "RUNNING"
    assert e2e.cli("status").returncode == 0
