"""Cloud Native Events through the in-process pipeline (tests/pipeline.py: ingest, upsert, the Firestore
emulator): one event, several resources; a metrics-only event keeps the status; a redelivery adds nothing;
a producer on the provider kit reports several clocks per event (moved from tests/e2e, issue 41)."""

from __future__ import annotations

import orjson
import pytest
from dcm_status_sdk import DataType, Reporter, ReporterConfig, Value

from infra.topology import load
from tests.functional.conftest import PROJECT
from tests.pipeline import pipeline_of
from tests.samples import SCHEMAS

SAMPLES = SCHEMAS / "samples" / "cloud-native-events"
TOPIC = "dcm-status-ingress-ptp"
LOCK = "/cluster/node/n1/sync/ptp-status/lock-state"




def event(event_id: str, *values: dict, time: str = "2026-11-20T10:00:00Z") -> bytes:
    return orjson.dumps({"specversion": "1.0", "id": event_id, "source": LOCK, "time": time,
                         "type": "event.sync.ptp-status.ptp-state-change",
                         "data": {"version": "1.0", "values": list(values)}})


def value(data_type: str, value_type: str, v, resource: str = LOCK) -> dict:
    return {"resource": resource, "dataType": data_type, "valueType": value_type, "value": v}


@pytest.fixture
def pipeline(firestore):
    """The topology's providers and ``ptp``, the PTP producer these events come from."""
    yield from pipeline_of(firestore, providers=(*load().providers, "ptp"))


def through(pipeline, body: bytes) -> list[int]:
    """Published on ptp's ingress topic; what upsert answered to each normalised message ingest published."""
    pipeline.publish(TOPIC, body)
    return [a for d in pipeline.settle() if d.subscription.push == "upsert" for a in d.answers]


def stored(firestore, address: str, rtype: str = "sync") -> dict | None:
    snap = firestore.collection("resources").document(f"ptp~{rtype}~{address.lstrip('/').replace('/', '%2F')}").get()
    return snap.to_dict() if snap.exists else None


def test_one_event_stores_each_resource_it_reports_on(pipeline, firestore):
    body = orjson.dumps(orjson.loads((SAMPLES / "spec-mixed-example.json").read_bytes())["message"]["data"])
    assert through(pipeline, body) == [200, 200]
    sync = stored(firestore, "/sync/sync-status/sync-state")
    assert (sync["status"], sync["rawStatus"], sync["resourceSpecific"]["metrics"]) == \
        ("FREERUN", "ACQUIRING-SYNC", {"decimal64.3": 100.3})
    hardware = stored(firestore, "/cluster/node/temp", "hardware")
    assert hardware["status"] == "UNKNOWN" and hardware["resourceSpecific"]["redfish"]["@odata.type"] == \
        "#Event.v1_3_0.Event"


def test_a_metrics_only_event_keeps_the_status_and_announces_no_change(pipeline, firestore):
    through(pipeline, event("e1", value("notification", "enumeration", "LOCKED"),
                            value("metric", "decimal64.3", -5)))
    changes = len(pipeline.bus.on("dcm-status-changed"))
    through(pipeline, event("e2", value("metric", "decimal64.3", "-7"),
                            time="2026-11-20T10:00:05Z"))
    doc = stored(firestore, LOCK)
    assert (doc["status"], doc["resourceSpecific"]["metrics"], doc["updates"]) == ("LOCKED", {"decimal64.3": -7.0}, 2)
    assert len(pipeline.bus.on("dcm-status-changed")) == changes  # new metrics are no status change
    through(pipeline, event("e3", value("notification", "enumeration", "HOLDOVER"),
                            time="2026-11-20T10:00:09Z"))
    assert stored(firestore, LOCK)["status"] == "HOLDOVER"
    assert orjson.loads(pipeline.bus.on("dcm-status-changed")[-1].data)["data"]["newStatus"] == "HOLDOVER"


def test_a_redelivered_event_adds_nothing_to_any_of_its_resources(pipeline, firestore):
    other = "/cluster/node/n2/sync/ptp-status/lock-state"
    body = event("e9", value("notification", "enumeration", "LOCKED"),
                 value("notification", "enumeration", "FREERUN", resource=other))
    through(pipeline, body)
    through(pipeline, body)  # the same event, published again
    assert stored(firestore, LOCK)["updates"] == 1 and stored(firestore, other)["updates"] == 1
    assert stored(firestore, other)["status"] == "FREERUN"


def test_a_ptp_producer_on_the_kit_reports_several_clocks_per_event(pipeline):
    uid = "fn"
    event_type = "event.sync.ptp-status.ptp-state-change"
    n1, n2 = (f"/cluster/node/{n}-{uid}/sync/ptp-status/lock-state" for n in ("n1", "n2"))
    key1, key2 = (f"aws/sync{a}" for a in (n1, n2))
    with Reporter(ReporterConfig(project=PROJECT, provider="aws"), pipeline.bus) as reporter:
        reporter.report_values([Value(n1, DataType.NOTIFICATION, "enumeration", "LOCKED"),
                                Value(n1, DataType.METRIC, "decimal64.3", -5),
                                Value(n2, DataType.NOTIFICATION, "enumeration", "FREERUN")], event_type=event_type,
                               source=n1)
        reporter.flush()
        pipeline.settle()
        assert pipeline.resource(key1)["status"] == "LOCKED" and pipeline.resource(key2)["status"] == "FREERUN"
        reporter.report_values([Value(n1, DataType.METRIC, "decimal64.3", -9)], event_type=event_type, source=n1)
        reporter.flush()
        pipeline.settle()
        assert pipeline.resource(key1)["resourceSpecific"]["metrics"] == {"decimal64.3": -9.0}
        assert pipeline.resource(key1)["status"] == "LOCKED"  # metrics only: the status stays
        reporter.report_values([Value(n1, DataType.NOTIFICATION, "enumeration", "HOLDOVER")], event_type=event_type,
                               source=n1)
    pipeline.settle()
    held = pipeline.resource(key1)
    assert held["status"] == "HOLDOVER"
    assert held["updates"] == 3 and pipeline.resource(key2)["updates"] == 1
    shown = pipeline.cli("get", key1, "--json")
    assert shown.exit_code == 0 and '"HOLDOVER"' in shown.stdout
