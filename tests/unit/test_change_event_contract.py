"""The fan-out contract: every change event upsert emits validates against its schema
and has exactly the shape of the sample kept in the repository for its kind.

Samples live in ``schemas/events/samples/status-changed-v{MAJOR}/{kind}.json`` as
the Pub/Sub message a consumer receives: ``{"attributes": {...}, "event": {...}}``.
A change to the emitted shape fails here until the sample, the schema and the
version follow the rule (docs/billing.md, "Change events"): MINOR when fields are
only added (consumers ignore what they do not know), MAJOR and a new schema file
when a field is removed, renamed or changes type or meaning.

Regenerate the samples after an intended change:
    .venv/bin/python -m tests.unit.test_change_event_contract --write
"""

from __future__ import annotations

import sys
from typing import Any

import orjson
import pytest
from dcm_status_contracts import status_changed
from dcm_status_contracts.model import ResourceKey
from dcm_status_contracts.outputs import Redaction
from dcm_status_contracts.schemas import registry, schemas_dir
from dcm_status_contracts.status_update import StatusUpdate

from shared.upsert.decide import resource_document
from tests.samples import SCHEMAS

SAMPLES = SCHEMAS / "events" / "samples" / "status-changed-v1"
KINDS = ("created", "changed", "late", "recreated", "flapping", "outputs")
NOW = "2026-03-01T09:00:02.000000Z"


def update(status: str, raw: str, at: str, observed: str, event_id: str, message: str,
           output_spec: dict[str, Any] | None = None, **metadata: Any) -> StatusUpdate:
    return StatusUpdate(
        key=ResourceKey("aws", "vm", "i-0abc123"), status=status, raw_status=raw, status_recognized=True,
        message=message, reason=None, last_transition_time=at, observed_at=observed,
        metadata={"tenant": "acme", "region": "eu-west-1", "environment": "prod", **metadata},
        resource_specific={"instanceType": "t3.micro"}, event_id=event_id, event_source="aws-provider",
        event_type="dcm.providers.aws.vm.instances.i-0abc123.status", event_subject=None,
        dataschema="https://schemas.dcm.org/vm/status-v1.json", schema_defaulted=False,
        ingress_message_id="1001", ingress_topic="dcm-status-ingress-aws", received_at=NOW,
        published_at=observed, output_spec=output_spec)


def build(kind: str) -> status_changed.ChangeEvent:
    """The change event upsert emits for each kind, built as upsert builds it."""
    provisioning = update("PROVISIONING", "pending", "2026-03-01T08:59:00.000000Z", "2026-03-01T08:59:00.000000Z",
                          "ev-1", "Instance is pending.")
    running = update("RUNNING", "running", "2026-03-01T09:00:00.000000Z", "2026-03-01T09:00:01.000000Z",
                     "ev-2", "Instance is running.")
    stopped = update("STOPPED", "stopped", "2026-03-01T08:59:30.000000Z", "2026-03-01T08:59:30.000000Z",
                     "ev-0", "Instance stopped.")
    if kind == "created":  # first sight of a resource: oldStatus null
        return status_changed.build(provisioning, None, resource_document(provisioning, NOW), late=False)
    if kind == "changed":
        old = resource_document(provisioning, NOW)
        return status_changed.build(running, old, resource_document(running, NOW), late=False)
    if kind == "late":  # refused as stale for the current state: announced with late=true, no old state
        return status_changed.build(stopped, None, resource_document(stopped, NOW), late=True)
    if kind == "recreated":  # a report newer than the resource's deletion: it exists again
        deleted = update("DELETED", "terminated", "2026-03-01T08:59:30.000000Z", "2026-03-01T08:59:30.000000Z",
                         "ev-d", "Instance terminated.")
        return status_changed.build(running, resource_document(deleted, NOW), resource_document(running, NOW),
                                   late=False)
    if kind == "flapping":  # more changes in the window than the policy allows (as upsert stores it)
        new = {**resource_document(running, NOW), "flapping": {"changes": 6, "windowSeconds": 600}}
        return status_changed.build(running, resource_document(provisioning, NOW), new, late=False)
    if kind == "outputs":  # new output maps alone (since 1.3): same status, same transition time; a hidden value
        before = update("RUNNING", "running", "2026-03-01T09:00:00.000000Z", "2026-03-01T09:00:01.000000Z", "ev-2",
                        "Instance is running.", {"host": "10.0.1.5", "port": 5432, "password": "old-secret"})
        after = update("RUNNING", "running", "2026-03-01T09:00:00.000000Z", "2026-03-01T09:05:00.000000Z", "ev-3",
                       "Instance is running.", {"host": "10.0.1.6", "port": 5432, "password": "new-secret"})
        return status_changed.build(after, resource_document(before, NOW), resource_document(after, NOW), late=False,
                                   redaction=Redaction.default())
    raise ValueError(kind)


def as_message(event: status_changed.ChangeEvent) -> dict[str, Any]:
    return {"attributes": dict(event.attributes), "event": orjson.loads(event.body)}


def load_sample(kind: str) -> dict[str, Any]:
    return orjson.loads((SAMPLES / f"{kind}.json").read_bytes())


def shape_differences(sample: Any, actual: Any, path: str = "") -> list[str]:
    """Where ``actual`` differs in shape (keys, JSON types; recursively) from ``sample``."""
    kind = lambda v: "null" if v is None else "boolean" if isinstance(v, bool) else \
        "number" if isinstance(v, (int, float)) else type(v).__name__  # noqa: E731
    if kind(sample) != kind(actual):
        return [f"{path or '/'}: {kind(sample)} in the sample, {kind(actual)} emitted"]
    out: list[str] = []
    if isinstance(sample, dict):
        for k in sorted(set(sample) | set(actual)):
            if k not in actual:
                out.append(f"{path}/{k}: in the sample, not emitted")
            elif k not in sample:
                out.append(f"{path}/{k}: emitted, not in the sample")
            else:
                out += shape_differences(sample[k], actual[k], f"{path}/{k}")
    elif isinstance(sample, list):
        if len(sample) != len(actual):
            out.append(f"{path}: {len(sample)} items in the sample, {len(actual)} emitted")
        for i, (s, a) in enumerate(zip(sample, actual)):
            out += shape_differences(s, a, f"{path}/{i}")
    return out


def test_every_kind_has_a_sample():
    assert sorted(p.stem for p in SAMPLES.glob("*.json")) == sorted(KINDS)


def test_samples_are_not_loaded_as_schemas():
    assert all("samples" not in uri for uri in registry().compiled)
    assert (schemas_dir() / "events" / "status-changed-v1.json").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_sample_validates_against_its_schema(kind):
    sample = load_sample(kind)
    schema = registry().get(sample["event"]["dataschema"])
    assert schema.violations(sample["event"]["data"]) == []
    assert sample["event"]["dataschema"] == status_changed.SCHEMA_URI


@pytest.mark.parametrize("kind", KINDS)
def test_emitted_event_validates_against_its_schema(kind):
    event = orjson.loads(build(kind).body)
    schema = registry().get(event["dataschema"])
    assert schema.violations(event["data"]) == []


@pytest.mark.parametrize("kind", KINDS)
def test_emitted_event_has_the_shape_of_its_sample(kind):
    assert shape_differences(load_sample(kind), as_message(build(kind))) == []


@pytest.mark.parametrize("kind", KINDS)
def test_version_follows_the_schema_file(kind):
    event = as_message(build(kind))["event"]
    major = int(event["data"]["version"].split(".")[0])
    assert event["dataschema"].endswith(f"status-changed-v{major}.json")
    assert event["data"]["version"] == status_changed.VERSION
    assert load_sample(kind)["event"]["data"]["version"].split(".")[0] == str(major)


@pytest.mark.parametrize("kind", KINDS)
def test_filter_attributes_repeat_the_data(kind):
    message = as_message(build(kind))
    attrs, data = message["attributes"], message["event"]["data"]
    assert attrs["provider"] == data["provider"] and attrs["resourceType"] == data["resourceType"]
    assert attrs["newStatus"] == data["newStatus"]
    assert attrs["oldStatus"] == (data["oldStatus"] or "")
    assert attrs["late"] == ("true" if data["late"] else "false")
    assert attrs["recreated"] == ("true" if data["recreated"] else "false")
    assert attrs["flapping"] == ("true" if data["flapping"] else "false")
    assert attrs["key"] == data["key"]


def test_the_kinds_differ_where_they_should():
    created, changed, late, recreated, flapping, outputs = (as_message(build(k))["event"]["data"] for k in KINDS)
    assert created["oldStatus"] is None and created["late"] is False
    assert not any(d["recreated"] or d["flapping"] for d in (created, changed, late))
    assert recreated["recreated"] is True and recreated["oldStatus"] == "DELETED"
    assert flapping["flapping"] == {"changes": 6, "windowSeconds": 600} and not flapping["recreated"]
    assert changed["oldStatus"] == "PROVISIONING" and changed["newStatus"] == "RUNNING"
    assert {"attribute": "/status", "old": "PROVISIONING", "new": "RUNNING"} in changed["changes"]
    assert late["late"] is True and late["oldStatus"] is None
    assert outputs["oldStatus"] == outputs["newStatus"] and outputs["oldTransitionTime"] == outputs["newTransitionTime"]
    assert outputs["changes"] == [
        {"attribute": "/output_spec/host", "old": "10.0.1.5", "new": "10.0.1.6"},
        {"attribute": "/output_spec/password", "old": "[redacted]", "new": "[redacted]"}]
    assert outputs["resource"]["output_spec"] == {"host": "10.0.1.6", "port": 5432, "password": "[redacted]"}
    assert "secret" not in build("outputs").body.decode()


def test_shape_check_catches_drift():
    sample = load_sample("changed")
    drifted = orjson.loads(orjson.dumps(sample))
    drifted["event"]["data"]["newTransitionTime"] = 12
    del drifted["event"]["data"]["cause"]["source"]
    drifted["event"]["data"]["extra"] = 1
    assert shape_differences(sample, drifted) == [
        "/event/data/cause/source: in the sample, not emitted",
        "/event/data/extra: emitted, not in the sample",
        "/event/data/newTransitionTime: str in the sample, number emitted",
    ]


def test_consumers_read_every_sample():
    from dcm_status_contracts.model import PubSubMessage
    from dcm_status_contracts.status_changed import from_message

    for kind in KINDS:
        sample = load_sample(kind)
        change = from_message(PubSubMessage(orjson.dumps(sample["event"]), sample["attributes"], "1"))
        assert change.new_status == sample["event"]["data"]["newStatus"]
        assert change.labels == {"tenant": "acme", "region": "eu-west-1", "environment": "prod"}
        assert (change.recreated, change.flapping) == (sample["event"]["data"]["recreated"],
                                                       sample["event"]["data"]["flapping"])
        assert change.transition is (kind != "outputs")


def write_samples() -> None:
    SAMPLES.mkdir(parents=True, exist_ok=True)
    for kind in KINDS:
        (SAMPLES / f"{kind}.json").write_bytes(
            orjson.dumps(as_message(build(kind)), option=orjson.OPT_INDENT_2) + b"\n")
        print(f"wrote {SAMPLES / f'{kind}.json'}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.unit.test_change_event_contract --write")
    write_samples()
