"""Contract modules: the internal status-update contract and Pub/Sub's byte limits."""

from __future__ import annotations

import orjson
import pytest
from dcm_status_contracts import status_update
from dcm_status_contracts.errors import Reason, Rejected
from dcm_status_contracts.model import MAX_ATTRIBUTE_BYTES, PubSubMessage, clip
from dcm_status_contracts.pubsub_binding import to_message
from dcm_status_contracts.status_report import build_event

from shared.ingest.normalize import normalize_message
from shared.runtime import settings


def update(resource_id: str = "i-1") -> status_update.StatusUpdate:
    data, attrs = to_message(build_event("aws", "vm", resource_id, "RUNNING", "up", event_id="e-1",
                                         time="2026-01-01T00:00:00Z"))
    return normalize_message(PubSubMessage(data, attrs, "m-1", None, "dcm-status-ingress-aws"),
                             settings.from_env({"DCM_PROJECT": "unit"}))


def test_status_update_round_trips_with_its_version():
    original = update()
    body = orjson.loads(status_update.to_bytes(original))
    assert body["version"] == status_update.VERSION and body["key"] == "aws/vm/i-1"
    assert status_update.from_bytes(status_update.to_bytes(original)) == original


def test_another_major_version_is_unknown_schema_not_malformed():
    body = orjson.loads(status_update.to_bytes(update()))
    body["version"] = status_update.VERSION + 1
    with pytest.raises(Rejected) as info:
        status_update.from_bytes(orjson.dumps(body))
    assert info.value.reason is Reason.UNKNOWN_SCHEMA and info.value.key == "aws/vm/i-1"


@pytest.mark.parametrize("change, path", [
    (lambda b: b.pop("observed_at"), "/"),
    (lambda b: b.update(status_recognized="yes"), "/status_recognized"),
    (lambda b: b.update(observed_at="yesterday"), "/observed_at"),
])
def test_a_broken_internal_message_is_malformed_internal_with_the_path(change, path):
    body = orjson.loads(status_update.to_bytes(update()))
    change(body)
    with pytest.raises(Rejected) as info:
        status_update.from_bytes(orjson.dumps(body))
    assert info.value.reason is Reason.MALFORMED_INTERNAL
    assert info.value.detail["path"].startswith(path) and info.value.key == "aws/vm/i-1"


@pytest.mark.parametrize("data", [b"not json", b"[1]"])
def test_not_an_object_is_malformed_internal(data):
    with pytest.raises(Rejected) as info:
        status_update.from_bytes(data)
    assert info.value.reason is Reason.MALFORMED_INTERNAL


def test_clip_counts_bytes_and_cuts_on_a_character_boundary():
    resource_key = "aws/vm/" + "€" * 512  # 512 multibyte characters: 1,536 bytes
    clipped = clip(resource_key)
    assert len(clipped.encode()) <= MAX_ATTRIBUTE_BYTES and clipped.endswith("...")
    assert clipped.startswith("aws/vm/€") and clipped[:-3].strip("aws/vm/€") == ""  # no broken character
    assert clip("aws/vm/i-1") == "aws/vm/i-1"
    exact = "é" * (MAX_ATTRIBUTE_BYTES // 2)
    assert clip(exact) == exact  # exactly at the limit: untouched


def test_the_internal_schema_requires_every_field_the_dataclass_requires():
    """Found by the fuzz: a message without 'reason' passed the schema and crashed the constructor."""
    from dataclasses import MISSING, fields

    from dcm_status_contracts.schemas import registry

    schema = registry().get(status_update.SCHEMA_URI).schema
    needed = {f.name for f in fields(status_update.StatusUpdate)
              if f.default is MISSING and f.default_factory is MISSING} - {"key"}
    assert needed <= set(schema["required"])
