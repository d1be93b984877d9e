"""The dcm-project providers through the in-process pipeline (tests/pipeline.py; moved from tests/e2e, issue 41:
ordering rules need no stack): each one's wire form (rebuilt from its code, schemas/samples/upstream/) stored
under {provider}/{type}/{data.id}; whole-second clocks, the sequence extension, a provider clock far in the
future, and what a re-report costs."""

from __future__ import annotations

import uuid
from datetime import timedelta

import orjson
from dcm_status_contracts import timeutil
from dcm_status_contracts.model import ResourceKey, event_identity
from dcm_status_contracts.pubsub_binding import BindingMode, mode_of
from google.cloud.firestore_v1.base_query import FieldFilter

from tests import samples

UPSTREAM = samples.load("upstream")


def acm_event(cluster: str, status: str, time: str, **extra) -> bytes:
    """An ACM cluster SP event as its code marshals it (own struct, a random UUID id, whole-second time)."""
    return orjson.dumps({"specversion": "1.0", "id": str(uuid.uuid4()),
                         "source": "dcm/providers/acm-cluster-sp", "type": "dcm.status.cluster", "time": time,
                         "subject": "dcm.cluster", "datacontenttype": "application/json", **extra,
                         "data": {"id": cluster, "status": status, "message": ""}})


def test_every_upstream_producer_is_stored_under_its_data_id_with_a_recognised_status(pipeline):
    uid = "fn"
    expected = {}
    for s in UPSTREAM:
        body = orjson.loads(s.data)
        binary = mode_of(s.attributes) is BindingMode.BINARY
        data = body if binary else body["data"]
        data["id"] += f"-{uid}"  # unique to this run, the rest byte for byte as the producer sends it
        attributes = dict(s.attributes)
        if binary:
            attributes["ce-id"] += f"-{uid}"
        else:
            body["id"] += f"-{uid}"
        pipeline.publish(f"ingress:{s.provider}", orjson.dumps(body), **attributes)
        expected.setdefault(s.expect["key"] + f"-{uid}", []).append(s)
    pipeline.settle()
    for key, group in expected.items():
        doc = pipeline.resource(key)
        assert doc["statusRecognized"], (key, doc["rawStatus"])
        assert doc["status"] in {s.expect["status"] for s in group}, (key, doc["status"])
        assert doc["key"] == key and ResourceKey.parse(key).resource_id.endswith(uid)
    assert not pipeline.bus.on("dcm-status-deadletter")
    print(f"\n{len(UPSTREAM)} upstream samples from {len({s.provider for s in UPSTREAM})} producers: "
          f"{len(expected)} resources stored under provider/type/data.id, every status recognised")


def test_whole_second_clocks_the_later_publication_wins(pipeline):
    uid = "fn"
    """ACM and three-tier stamp whole seconds: PENDING then READY within one second, ten clusters. The
    event ids are random UUIDs, as ACM's are: a tie broken by id would leave about half of them PENDING."""
    second = timeutil.format(timeutil.now().replace(microsecond=0))[:19] + "Z"
    clusters = [f"c{i}-{uid}" for i in range(10)]
    for c in clusters:
        pipeline.publish("ingress:acm-cluster", acm_event(c, "PENDING", second))
        pipeline.publish("ingress:acm-cluster", acm_event(c, "READY", second))  # published after: it is later
    pipeline.settle()
    for c in clusters:
        doc = pipeline.resource(f"acm-cluster/cluster/{c}")
        assert doc["status"] == "ACTIVE" and doc["rawStatus"] == "READY"
    # and the PENDING published first, applied first here, never overwrote READY
    assert all(pipeline.resource(f"acm-cluster/cluster/{c}")["status"] == "ACTIVE" for c in clusters)


def test_the_sequence_extension_orders_one_source_over_its_clock(pipeline):
    uid = "fn"
    cluster = f"seq-{uid}"
    now = timeutil.now()
    steps = [(3, "READY", now - timedelta(minutes=10)),  # highest sequence, earliest clock: it wins
             (1, "PENDING", now - timedelta(minutes=5)),
             (2, "PROVISIONING", now)]
    for n, status, at in steps:
        pipeline.publish("ingress:acm-cluster", acm_event(cluster, status, timeutil.format(at), sequence=f"{n:05d}"))
    pipeline.settle()
    assert len(list(pipeline.db.collection("events").where(
        filter=FieldFilter("key", "==", f"acm-cluster/cluster/{cluster}")).stream())) == 3  # all three processed
    doc = pipeline.resource(f"acm-cluster/cluster/{cluster}")
    assert (doc["status"], doc["rawStatus"], doc["sequence"]) == ("ACTIVE", "READY", "00003")


def test_a_provider_clock_far_in_the_future_does_not_freeze_the_resource(pipeline):
    uid = "fn"
    cluster = f"skew-{uid}"
    pipeline.send("ingress:acm-cluster", acm_event(cluster, "PENDING", "2099-01-01T00:00:00Z"))
    first = pipeline.resource(f"acm-cluster/cluster/{cluster}")
    assert first["status"] == "PROGRESSING"
    assert first["reportedTime"] == "2099-01-01T00:00:00.000000Z"
    assert timeutil.parse(first["observedAt"]) < timeutil.now() + timedelta(minutes=5)  # clamped
    later = timeutil.format(timeutil.now() + timedelta(seconds=2))
    pipeline.send("ingress:acm-cluster", acm_event(cluster, "READY", later))
    doc = pipeline.resource(f"acm-cluster/cluster/{cluster}")
    assert doc["status"] == "ACTIVE"  # not refused as "stale" forever
    assert doc["reportedTime"] is None


def test_a_re_report_writes_no_history_and_announces_nothing(pipeline):
    uid = "fn"
    """OSAC's full resync republishes every resource unchanged: counted, last-seen recorded, nothing else."""
    vm = f"vm-{uid}"
    key = f"osac/vm/{vm}"

    def osac(n: int, at: str) -> bytes:
        return orjson.dumps({"specversion": "1.0", "id": f"osac-{uid}-{n}", "source": "dcm/providers/osac-sp-vm",
                             "type": "dcm.status.vm", "subject": "dcm.vm", "datacontenttype": "application/json",
                             "time": at, "data": {"id": vm, "status": "RUNNING", "message": "vm is running"}})

    start = timeutil.now()
    pipeline.send("ingress:osac", osac(0, timeutil.format(start)))
    assert pipeline.resource(key)["status"] == "RUNNING"
    for n in range(1, 4):  # one resync after another (each one applied before the next is sent)
        pipeline.send("ingress:osac", osac(n, timeutil.format(start + timedelta(seconds=n))))
        assert pipeline.resource(key).get("reReports") == n, f"re-report {n}"
    doc = pipeline.resource(key)
    assert doc["eventId"] == f"osac-{uid}-3" and doc["updates"] == 1
    ledger = [d.to_dict() for d in pipeline.db.collection("events").where(filter=FieldFilter("key", "==", key)).stream()]
    assert len([d for d in ledger if "recordedAt" in d]) == 1  # its history: the applied entry only (issue 32)
    assert [d["outcome"] for d in ledger] == ["applied"]  # a re-report writes its resource only (its ring)
    assert [e["id"] for e in doc["reReported"]] == [
        event_identity("osac", "dcm/providers/osac-sp-vm", f"osac-{uid}-{n}") for n in range(1, 4)]
    billing = pipeline.db.collection("billing_resources").document(ResourceKey.parse(key).doc_id).collection("transitions")
    assert len(billing.get()) == 1  # the one change's transition, written by upsert in its commit
