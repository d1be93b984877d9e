"""timeutil, diff, logs, config and model: the small shared parts."""

import json
import logging

import pytest
from dcm_status_contracts import timeutil
from dcm_status_contracts.diff import changes
from dcm_status_contracts.model import ResourceKey, event_identity

from infra.topology import load
from shared.runtime import settings
from shared.runtime.logs import CloudLoggingFormatter


@pytest.mark.parametrize("text,canonical", [
    ("2026-01-01T00:00:00Z", "2026-01-01T00:00:00.000000Z"),
    ("2026-01-01T01:00:00+01:00", "2026-01-01T00:00:00.000000Z"),
    ("2026-01-01t00:00:00.123456789z", "2026-01-01T00:00:00.123456Z"),
    ("2025-12-31T23:59:59.5-00:30", "2026-01-01T00:29:59.500000Z"),
])
def test_timestamps_are_canonical_and_sortable(text, canonical):
    assert timeutil.canonical(text) == canonical


@pytest.mark.parametrize("text", ["2026-13-01T00:00:00Z", "2026-01-01", "yesterday", "2026-01-01T00:00:00",
                                  "2026-02-30T00:00:00Z", "2026-01-01T24:00:00Z", "2026-01-01T00:00:60Z",
                                  "0000-01-01T00:00:00Z", "0001-01-01T00:00:00+01:00"])
def test_bad_timestamps_raise(text):
    with pytest.raises(ValueError):
        timeutil.parse(text)
    with pytest.raises(ValueError):  # the UTC fast path refuses what the datetime round trip refuses
        timeutil.canonical(text)


@pytest.mark.parametrize("text", ["2026-01-01T00:00:00Z", "2026-06-30T23:59:59.9z", "9999-12-31T23:59:59.999999Z",
                                  "0999-03-04T05:06:07.000001Z", "2024-02-29T12:00:00.1234567Z"])
def test_the_utc_fast_path_writes_what_the_round_trip_writes(text):
    assert timeutil.canonical(text) == timeutil.format(timeutil.parse(text))


def test_a_year_below_1000_keeps_four_digits_so_canonical_times_sort_as_text():
    early, late = timeutil.canonical("0999-01-01T00:00:00+00:00"), timeutil.canonical("1000-01-01T00:00:00Z")
    assert early == "0999-01-01T00:00:00.000000Z" and early < late


def test_diff_reports_json_pointers():
    old = {"status": "PENDING", "metadata": {"a": 1, "b/c": 2}, "gone": 1}
    new = {"status": "RUNNING", "metadata": {"a": 1, "b/c": 3}, "added": True}
    assert changes(old, new) == [
        {"attribute": "/added", "old": None, "new": True},
        {"attribute": "/gone", "old": 1, "new": None},
        {"attribute": "/metadata/b~1c", "old": 2, "new": 3},
        {"attribute": "/status", "old": "PENDING", "new": "RUNNING"},
    ]
    assert changes(None, {"status": "X"}) == [{"attribute": "/status", "old": None, "new": "X"}]


def test_log_lines_are_cloud_logging_json():
    record = logging.LogRecord("dcm.test", logging.WARNING, __file__, 1, "hello %s", ("x",), None)
    record.labels = {"provider": "aws"}
    record.key = "aws/vm/1"
    line = json.loads(CloudLoggingFormatter().format(record))
    assert line["severity"] == "WARNING" and line["message"] == "hello x"
    assert line["logging.googleapis.com/labels"] == {"provider": "aws"}
    assert line["key"] == "aws/vm/1"


def test_function_defaults_agree_with_the_topology_declaration():
    topo = load()
    s = settings.from_env()
    assert s.normalized_topic("aws") == topo.topic("normalized", "aws")
    assert s.topic_changed == topo.topic("changed")
    assert s.topic_deadletter == topo.deadletter_topic
    assert s.ingress_topic_template == topo.ingress_template
    assert s.topic_providers == topo.topic("providers")
    assert settings.from_env({**topo.env(), "DCM_PROJECT": "p"}).flapping == s.flapping  # the same defaults


def test_topic_provider():
    s = settings.from_env()
    assert s.origins.topic_provider("dcm-status-ingress-aws") == "aws"
    assert s.origins.topic_provider("dcm-status-ingress-") is None
    assert s.origins.topic_provider("dcm-status-normalized") is None


def test_resource_key_round_trips_through_document_ids():
    key = ResourceKey("aws", "vm", "a/b~c%d")
    assert "/" not in key.doc_id
    assert ResourceKey.from_doc_id(key.doc_id) == key
    assert ResourceKey.parse(str(key)) == key


def test_dedup_identity_is_provider_source_and_id():
    assert event_identity("aws", "s", "1") == event_identity("aws", "s", "1")
    assert event_identity("aws", "s", "1") != event_identity("aws", "t", "1")
    assert event_identity("aws", "a", "b\x00c") != event_identity("aws", "a\x00b", "c")
    assert event_identity("aws", "s", "1") != event_identity("azure", "s", "1")  # issue 25 item 1
    assert event_identity("a", "ws", "1") != event_identity("aw", "s", "1")
