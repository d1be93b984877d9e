"""Every golden sample normalises exactly as its file says (checked in CI)."""

from __future__ import annotations

import orjson
import pytest
from dcm_status_contracts.errors import Rejected
from dcm_status_contracts.pubsub_binding import BindingMode, mode_of

from shared.ingest.normalize import normalize_message
from shared.runtime import settings
from tests import samples

UPSTREAM = samples.load("upstream")
VALID = samples.load("valid") + UPSTREAM
INVALID = samples.load("invalid")
PRODUCERS = {"kubevirt", "acm-cluster", "osac", "k8s-storage", "k8s-container", "three-tier-app"}


def test_there_are_samples_of_every_kind():
    reasons = {s.expect["reason"] for s in INVALID}
    assert {"malformed_json", "not_a_cloudevent", "schema_invalid", "unknown_schema", "unknown_resource_type",
            "provider_mismatch", "oversize", "invalid_identity"} <= reasons
    assert {s.expect["key"].split("/")[1] for s in VALID} == {"vm", "container", "cluster", "volume", "network",
                                                              "storage"}


def test_every_upstream_producer_has_a_structured_and_a_binary_sample_naming_its_source():
    shapes = {(s.provider, "binary" if any(k.lower().startswith("ce-") for k in s.attributes) else "structured")
              for s in UPSTREAM}
    assert shapes == {(p, shape) for p in PRODUCERS for shape in ("structured", "binary")}
    for s in UPSTREAM:
        assert s.upstream["repo"].startswith("dcm-project/"), s.name
        assert len(s.upstream["commit"]) == 40 and int(s.upstream["commit"], 16) >= 0, s.name
        assert s.upstream["files"], s.name
        assert s.expect["key"].startswith(f"{s.provider}/"), s.name


@pytest.mark.parametrize("sample", UPSTREAM, ids=lambda s: s.name)
def test_upstream_sample_is_stored_under_its_data_id_with_a_recognised_status(sample):
    update = normalize_message(sample.message(), settings.from_env())
    body = orjson.loads(sample.data)
    binary = mode_of(sample.attributes) is BindingMode.BINARY
    assert update.key.resource_id == (body if binary else body["data"])["id"]  # never the subject or the source
    assert update.status_recognized and update.raw_status == sample.expect["rawStatus"]
    assert update.status != "UNKNOWN" or update.raw_status == "Unknown"  # KubeVirt's own "I cannot tell"


@pytest.mark.parametrize("sample", VALID, ids=lambda s: s.name)
def test_valid_sample_normalises(sample):
    update = normalize_message(sample.message(), settings.from_env())
    expect = sample.expect
    assert str(update.key) == expect["key"]
    assert update.status == expect["status"]
    assert update.status_recognized is expect["recognized"]
    for field, attr in (("rawStatus", "raw_status"), ("schema", "dataschema"), ("schemaDefaulted", "schema_defaulted"),
                        ("lastTransitionTime", "last_transition_time"), ("observedAt", "observed_at")):
        if field in expect:
            assert getattr(update, attr) == expect[field], field
    assert (update.output_spec, update.outputs) == (expect.get("outputSpec"), expect.get("outputs"))
    assert not update.extra.keys() & {"output_spec", "outputs"}


@pytest.mark.parametrize("sample", INVALID, ids=lambda s: s.name)
def test_invalid_sample_is_rejected_with_its_reason(sample):
    with pytest.raises(Rejected) as info:
        normalize_message(sample.message(), settings.from_env())
    exc = info.value
    assert exc.reason.value == sample.expect["reason"], exc.message
    assert exc.message  # a human-readable reason
    for field in ("path", "rule", "missing"):
        if field in sample.expect:
            assert exc.detail[field] == sample.expect[field], exc.detail
    if "invalid" in sample.expect:
        assert set(sample.expect["invalid"]) <= set(exc.detail["invalid"]), exc.detail
    if "output" in sample.name:  # an output may be a credential: never repeated in a reason
        assert "s3cret" not in exc.message + repr(exc.detail)
