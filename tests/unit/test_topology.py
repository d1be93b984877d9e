"""The topology declaration expands as the design requires."""

import pytest
import yaml

from infra.topology import TOPOLOGY_FILE, load, read


def test_one_ingress_topic_and_push_subscription_per_provider():
    topo = load(["aws", "azure"])
    ingress = [t.name for t in topo.topics if t.key == "ingress"]
    assert ingress == ["dcm-status-ingress-aws", "dcm-status-ingress-azure"]
    subs = {s.name: s for s in topo.subscriptions}
    assert subs["dcm-ingest-aws"].topic == "dcm-status-ingress-aws" and subs["dcm-ingest-aws"].push == "ingest"


def test_every_subscription_has_retry_and_dead_letter_except_the_dead_letter_readers_and_ticks():
    topo = load()
    ticks = {t.name for t in topo.topics if t.key == "sweep"}  # a failed tick expires; the next does its work
    for s in topo.subscriptions:
        assert s.minimum_backoff >= 1 and s.maximum_backoff >= s.minimum_backoff
        assert s.dead_letter is (s.topic != topo.deadletter_topic and s.topic not in ticks), s.name
    assert ticks
    readers = [s for s in topo.subscriptions if s.topic == topo.deadletter_topic]
    assert any(s.push == "deadletter" for s in readers) and any(s.push is None for s in readers)


def test_upsert_subscription_is_ordered_and_every_function_has_a_trigger():
    topo = load()
    assert next(s for s in topo.subscriptions if s.push == "upsert").enable_message_ordering
    pushed = {s.push for s in topo.subscriptions if s.push}
    assert set(topo.functions) - set(topo.http_functions) <= pushed
    assert topo.http_functions == ("api",) and not pushed & set(topo.http_functions)  # people call it, not Pub/Sub


def test_exports_are_production_only_and_the_local_stack_says_it_skips_them():
    from infra.local.stack import production_only

    topo = load()
    [export] = topo.exports
    assert (export.name, export.topic, export.production_only) == ("dcm-changes-bigquery", "dcm-status-changed", True)
    assert export.name not in {s.name for s in topo.subscriptions}  # never created on the emulator
    [line] = production_only(topo)
    assert line.startswith("export dcm-changes-bigquery: dcm-status-changed -> BigQuery dcm_status.status_changes")
    assert "production only" in line


def test_oldest_unacked_alerts_come_from_the_declaration():
    subs = {s.name: s.oldest_unacked_alert for s in load().subscriptions}
    assert subs["dcm-ingest-aws"] == 300 and subs["dcm-sweep"] == 180 and subs["dcm-callbacks-retry"] == 86400
    assert subs["dcm-deadletter-archive"] is None  # keeps every dead letter on purpose: no alert


def test_the_declaration_is_read_by_libyaml_exactly_as_safe_load_reads_it():
    """read() takes libyaml's safe parser when PyYAML has it (a tenth of the pure-Python parser's CPU): the same
    document, and nothing but plain data (a tag that would build an object is refused as by safe_load)."""
    assert read() == yaml.safe_load(TOPOLOGY_FILE.read_text())
    assert yaml.__with_libyaml__  # PyYAML's wheels carry it: the fast path is the one taken


def test_a_tag_that_would_build_an_object_is_refused(tmp_path):
    doc = tmp_path / "topology.yaml"
    doc.write_text("topics: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(yaml.constructor.ConstructorError):
        read(doc)
