"""Cloud Native Events through ingest and upsert (functions-framework's test client, the Firestore
emulator): one event, several resources; a metrics-only event keeps the status; a redelivery adds nothing."""

from __future__ import annotations

import orjson

from tests.functional.conftest import SHAPES
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


def through(ingest, upsert, publisher, body: bytes, message_id: str) -> list[int]:
    """Push to ingest, then every normalised message it published to upsert; the upsert answers."""
    before = len(publisher.normalized())
    assert SHAPES["push"](ingest, TOPIC, body, {}, message_id).status_code == 200
    return [SHAPES["push"](upsert, "dcm-status-normalized-aws", m.data, m.attributes, f"{message_id}-{i}").status_code
            for i, m in enumerate(publisher.normalized()[before:])]


def stored(firestore, address: str, rtype: str = "sync") -> dict | None:
    snap = firestore.collection("resources").document(f"ptp~{rtype}~{address.lstrip('/').replace('/', '%2F')}").get()
    return snap.to_dict() if snap.exists else None


def test_one_event_stores_each_resource_it_reports_on(ingest, upsert, firestore, publisher):
    body = orjson.dumps(orjson.loads((SAMPLES / "spec-mixed-example.json").read_bytes())["message"]["data"])
    assert through(ingest, upsert, publisher, body, "cne-1") == [200, 200]
    sync = stored(firestore, "/sync/sync-status/sync-state")
    assert (sync["status"], sync["rawStatus"], sync["resourceSpecific"]["metrics"]) == \
        ("FREERUN", "ACQUIRING-SYNC", {"decimal64.3": 100.3})
    hardware = stored(firestore, "/cluster/node/temp", "hardware")
    assert hardware["status"] == "UNKNOWN" and hardware["resourceSpecific"]["redfish"]["@odata.type"] == \
        "#Event.v1_3_0.Event"


def test_a_metrics_only_event_keeps_the_status_and_announces_no_change(ingest, upsert, firestore, publisher):
    through(ingest, upsert, publisher, event("e1", value("notification", "enumeration", "LOCKED"),
                                             value("metric", "decimal64.3", -5)), "m-1")
    changes = len(publisher.on("dcm-status-changed"))
    through(ingest, upsert, publisher, event("e2", value("metric", "decimal64.3", "-7"),
                                             time="2026-11-20T10:00:05Z"), "m-2")
    doc = stored(firestore, LOCK)
    assert (doc["status"], doc["resourceSpecific"]["metrics"], doc["updates"]) == ("LOCKED", {"decimal64.3": -7.0}, 2)
    assert len(publisher.on("dcm-status-changed")) == changes  # new metrics are no status change
    through(ingest, upsert, publisher, event("e3", value("notification", "enumeration", "HOLDOVER"),
                                             time="2026-11-20T10:00:09Z"), "m-3")
    assert stored(firestore, LOCK)["status"] == "HOLDOVER"
    assert orjson.loads(publisher.on("dcm-status-changed")[-1].data)["data"]["newStatus"] == "HOLDOVER"


def test_a_redelivered_event_adds_nothing_to_any_of_its_resources(ingest, upsert, firestore, publisher):
    other = "/cluster/node/n2/sync/ptp-status/lock-state"
    body = event("e9", value("notification", "enumeration", "LOCKED"),
                 value("notification", "enumeration", "FREERUN", resource=other))
    through(ingest, upsert, publisher, body, "r-1")
    through(ingest, upsert, publisher, body, "r-2")  # the same event, delivered again
    assert stored(firestore, LOCK)["updates"] == 1 and stored(firestore, other)["updates"] == 1
    assert stored(firestore, other)["status"] == "FREERUN"
