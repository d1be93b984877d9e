"""Cloud Native Events on a provider's ingress topic (shared/contracts/cloud_native_event.py,
docs/cloud-native-events.md): the samples in schemas/samples/cloud-native-events/, the spec's own
examples among them, each normalised as its file says; a provider's side builds what ingest takes."""

from __future__ import annotations

import orjson
import pytest
from dcm_status_contracts import cloud_native_event as cne
from dcm_status_contracts.errors import Rejected
from dcm_status_contracts.model import PubSubMessage
from dcm_status_contracts.pubsub_binding import to_message
from dcm_status_contracts.status_update import from_bytes
from dcm_status_contracts.status_update import to_bytes

from shared.ingest.normalize import normalize
from shared.runtime import settings
from tests.samples import SCHEMAS

SAMPLES = sorted((SCHEMAS / "samples" / "cloud-native-events").glob("*.json"))
SETTINGS = settings.from_env()


def message(doc: dict, provider: str = "ptp", message_id: str = "m1") -> PubSubMessage:
    return PubSubMessage(orjson.dumps(doc), {}, message_id, "2026-11-20T09:50:00Z", f"dcm-status-ingress-{provider}")


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_every_sample_normalises_as_its_file_says(path):
    sample = orjson.loads(path.read_bytes())
    msg = message(sample["message"]["data"], sample["topicProvider"])
    expect = sample["expect"]
    if "reason" in expect:
        with pytest.raises(Rejected) as refused:
            normalize(msg, SETTINGS)
        assert refused.value.reason.value == expect["reason"]
        if "path" in expect:
            assert refused.value.detail["path"] == expect["path"]
        assert expect.get("says", "") in refused.value.message
        return
    updates = normalize(msg, SETTINGS)
    assert [str(u.key) for u in updates] == [r["key"] for r in expect["resources"]]
    for update, want in zip(updates, expect["resources"]):
        assert (update.status, update.raw_status, update.status_recognized) == \
            (want["status"], want["rawStatus"], want["recognized"])
        assert update.metrics_only == want.get("metricsOnly", False)
        assert update.resource_specific.get("metrics", {}) == want.get("metrics", {})
        if "redfish" in want:
            assert update.resource_specific["redfish"] == want["redfish"]  # intact
        assert from_bytes(to_bytes(update)) == update  # crosses the internal topic as it is


def test_the_resources_of_one_event_are_separate_updates_and_a_redelivery_is_the_same_ones():
    doc = orjson.loads((SAMPLES[0].parent / "spec-mixed-example.json").read_bytes())["message"]["data"]
    first = normalize(message(doc, message_id="m1"), SETTINGS)
    again = normalize(message(doc, message_id="m2"), SETTINGS)  # Pub/Sub redelivered (or the producer resent)
    assert len({u.dedup_id for u in first}) == 2
    assert [u.dedup_id for u in first] == [u.dedup_id for u in again]


def test_a_cloud_native_event_off_a_provider_topic_is_refused():
    doc = orjson.loads((SAMPLES[0].parent / "sdk-go-ptp-state-change.json").read_bytes())["message"]["data"]
    off = PubSubMessage(orjson.dumps(doc), {}, "m1", None, "somewhere-else")
    with pytest.raises(Rejected, match="did not arrive on a provider ingress topic") as refused:
        normalize(off, SETTINGS)
    assert refused.value.reason.value == "provider_mismatch"


def test_too_many_values_are_refused_before_any_fan_out():
    value = {"resource": "/c/s/n1/sync/sync-state", "dataType": "notification", "valueType": "enumeration",
             "value": "LOCKED"}
    doc = {"specversion": "1.0", "id": "x", "source": "/c", "type": "event.sync",
           "data": {"version": "1.0", "values": [value] * (cne.MAX_VALUES + 1)}}
    with pytest.raises(Rejected, match="at most 100 per event"):
        normalize(message(doc), SETTINGS)


@pytest.mark.parametrize("value", ["inf", "-Infinity", "fast", True, None, [1], {"v": 1}])
def test_a_metric_must_be_a_finite_number(value):
    doc = {"specversion": "1.0", "id": "x", "source": "/c", "type": "event.sync", "data": {"version": "1.0", "values": [
        {"resource": "/c/s/n1/sync/offset", "dataType": "metric", "valueType": "decimal64.3", "value": value}]}}
    with pytest.raises(Rejected, match="/data/values/0/value") as refused:
        normalize(message(doc), SETTINGS)
    assert refused.value.reason.value == "schema_invalid"


def test_a_dcm_status_event_is_not_read_as_cloud_native_even_with_values_in_its_data():
    doc = {"specversion": "1.0", "id": "x", "source": "dcm/providers/aws", "type": "dcm.status.vm",
           "data": {"id": "i-1", "status": "RUNNING", "version": "1.0", "values": []}}
    [update] = normalize(message(doc, "aws"), SETTINGS)
    assert str(update.key) == "aws/vm/i-1" and update.part is None


def test_what_a_provider_builds_is_what_ingest_takes():
    event = cne.build_event([
        cne.Value("/cluster/node/n1/sync/ptp-status/lock-state", cne.DataType.NOTIFICATION, "enumeration", "LOCKED"),
        cne.Value("/cluster/node/n1/sync/ptp-status/lock-state", cne.DataType.METRIC, "decimal64.3", -5),
    ], source="/cluster/node/n1/sync/ptp-status/lock-state", event_type="event.sync.ptp-status.ptp-state-change")
    for mode in ("structured", "binary"):
        data, attrs = to_message(event, mode)
        [update] = normalize(PubSubMessage(data, attrs, "m", None, "dcm-status-ingress-ptp"), SETTINGS)
        assert (str(update.key), update.status) == ("ptp/sync/cluster/node/n1/sync/ptp-status/lock-state", "LOCKED")
        assert update.resource_specific["metrics"] == {"decimal64.3": -5.0}
