"""Every golden sample normalises exactly as its file says (checked in CI)."""

from __future__ import annotations

import pytest

from shared.contracts.errors import Rejected
from shared.ingest.normalize import normalize_message
from shared.runtime import settings
from tests import samples

VALID = samples.load("valid")
INVALID = samples.load("invalid")


def test_there_are_samples_of_every_kind():
    reasons = {s.expect["reason"] for s in INVALID}
    assert {"malformed_json", "not_a_cloudevent", "schema_invalid", "unknown_schema", "unknown_resource_type",
            "provider_mismatch", "oversize", "invalid_identity"} <= reasons
    assert {s.expect["key"].split("/")[1] for s in VALID} == {"vm", "container", "cluster", "volume", "network"}


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
