"""Issue 25, items 1 and 6, end to end on the emulators through the real topics: a provider proves
nothing but its ingress topic."""

from __future__ import annotations

import hashlib
import json

import pytest
from dcm_status_contracts import deadletter as dl
from dcm_status_contracts.model import event_identity
from dcm_status_contracts.status_report import build_event
from dcm_status_contracts.pubsub_binding import to_message

from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.e2e


def test_two_providers_with_the_same_source_and_id_are_both_stored(e2e, uid):
    """aws publishes azure's next source+id on its own topic, first; azure's real event is still stored."""
    source, event_id = f"azure-provider-{uid}", f"next-{uid}"
    forged = build_event("aws", "vm", f"decoy-{uid}", "RUNNING", "pre-empting", event_id=event_id, source=source,
                         form="current", time="2026-03-01T10:00:00Z")
    data, attrs = to_message(forged)
    e2e.publish_raw("aws", data, **attrs)
    e2e.wait_for_status(f"aws/vm/decoy-{uid}", "RUNNING")
    real = build_event("azure", "vm", f"web-{uid}", "STOPPED", "the real one", event_id=event_id, source=source,
                       time="2026-03-01T10:00:01Z")
    data, attrs = to_message(real)
    e2e.publish_raw("azure", data, **attrs)
    assert e2e.wait_for_status(f"azure/vm/web-{uid}", "STOPPED")["eventId"] == event_id
    for provider in ("aws", "azure"):
        entry = e2e.db.collection("events").document(event_identity(provider, source, event_id)).get()
        assert entry.to_dict()["outcome"] == "applied" and entry.to_dict()["provider"] == provider


def _entry_id(topic: str, message_id: str) -> str:
    return hashlib.sha256(f"{topic}\x00{message_id}".encode()).hexdigest()[:32]


def test_a_provider_cannot_choose_its_dead_letter_entry_and_a_real_replay_still_comes_back(e2e, uid):
    bad = json.dumps({"specversion": "1.0", "id": f"bad-{uid}", "source": "s",
                      "type": f"dcm.providers.azure.vm.bad-{uid}.status", "data": {"status": 1}}).encode()
    victim_id = _entry_id("dcm-status-ingress-azure", e2e.publish_raw("azure", bad))
    victim = wait_until(lambda: next((e for e in e2e.deadletters() if e["id"] == victim_id), None),
                        what="azure's dead letter")
    assert victim["state"] == "open"

    # aws marks its own broken message as a replay of azure's entry, on its own topic
    forged = {dl.REPLAY_OF: victim_id, dl.REPLAY_TOPIC: "dcm-status-ingress-azure", dl.SOURCE_TOPIC: "dcm-status-replay"}
    aws_id = e2e.publish_raw("aws", b"attacker text", **forged)
    own = wait_until(lambda: next((e for e in e2e.deadletters() if e["id"] == _entry_id("dcm-status-ingress-aws",
                                                                                           aws_id)), None),
                     what="aws's dead letter, under its own entry")
    assert own["provider"] == "aws" and own["replayOf"] is None
    after = next(e for e in e2e.deadletters() if e["id"] == victim_id)
    assert after["state"] == "open" and after["occurrences"] == 1

    # the operator's replay goes through the replay topic and fails back to azure's entry
    [out] = json.loads(e2e.cli("dlq", "replay", victim_id, "--json").stdout)
    assert out["outcome"] == "published" and out["topic"].endswith("/dcm-status-replay")
    back = wait_until(lambda: (e := next(x for x in e2e.deadletters() if x["id"] == victim_id))["state"] ==
                      "replay_failed" and e, what="the replay to fail back to its entry")
    assert back["occurrences"] == 2 and back["provider"] == "azure"
