"""The BigQuery exports (terraform/exports.tf): the table's schema is the one generated from the change-event
JSON schema, every sample change event fits it, and the subscription writes it with no function between."""

from __future__ import annotations

import json

import pytest

from infra import bigquery_schema as bq
from infra import topology as topo
from tests.deploy import tf
from tests.deploy.tf import block

EXPORTS = topo.load().exports
BQ_TYPES = {str: "STRING", bool: "BOOLEAN", int: "INTEGER", float: "FLOAT"}


def fits(value, col: dict) -> bool:
    """Would BigQuery take this JSON value in this column (a JSON column takes any)?"""
    if value is None or col["type"] == "JSON":
        return True
    if col["type"] == "RECORD":
        fields = {f["name"]: f for f in col["fields"]}
        return isinstance(value, dict) and all(k in fields and fits(v, fields[k]) for k, v in value.items())
    return BQ_TYPES.get(type(value)) == col["type"] or (col["type"] == "FLOAT" and isinstance(value, int))


@pytest.mark.parametrize("export", EXPORTS, ids=lambda e: e.name)
def test_the_table_schema_is_the_one_generated_from_the_event_schema(export):
    committed = bq.out_path(export)
    assert committed.exists() and committed.read_text() == bq.render(bq.table_schema(export.event_schema)), \
        "run python -m infra.bigquery_schema --write"
    assert bq.main([]) == 0


@pytest.mark.parametrize("export", EXPORTS, ids=lambda e: e.name)
def test_every_field_of_the_event_schema_has_its_column_and_no_other(export):
    columns = {c["name"]: c for c in json.loads(bq.out_path(export).read_text())}
    data_schema = json.loads((tf.REPO_ROOT / export.event_schema).read_text())
    assert {f["name"] for f in columns["data"]["fields"]} == set(data_schema["properties"])
    envelope = json.loads((tf.REPO_ROOT / bq.ENVELOPE_SCHEMA).read_text())["properties"]
    assert set(envelope) - set(bq.ENVELOPE_LEFT_OUT) <= set(columns)
    assert len({name.lower() for name in columns}) == len(columns)  # BigQuery names are case-insensitive
    assert columns[bq.PARTITION_FIELD]["type"] == "TIMESTAMP"
    assert all(c["mode"] == "NULLABLE" for c in columns.values())  # a REQUIRED column can never be added later


def test_every_sample_change_event_fits_the_table():
    [export] = [e for e in EXPORTS if e.topic_key == "changed"]
    columns = {c["name"]: c for c in json.loads(bq.out_path(export).read_text())}
    samples = sorted((tf.REPO_ROOT / "schemas" / "events" / "samples" / "status-changed-v1").glob("*.json"))
    assert samples
    for path in samples:
        event = json.loads(path.read_text())["event"]
        unknown = set(event) - set(columns)
        assert not unknown, f"{path.name}: no column for {unknown} (drop_unknown_fields would lose them)"
        for key, value in event.items():
            assert fits(value, columns[key]), f"{path.name}: {key} does not fit {columns[key]['type']}"


def test_the_fit_check_refuses_what_bigquery_would():
    col = {"name": "data", "type": "RECORD", "fields": [{"name": "late", "type": "BOOLEAN"},
                                                        {"name": "resource", "type": "JSON"}]}
    assert fits({"late": True, "resource": {"any": [1]}}, col)
    assert not fits({"late": "yes"}, col) and not fits({"extra": 1}, col)


def test_the_export_is_a_bigquery_subscription_on_a_day_partitioned_table(config: tf.Config):
    table = config.resource("google_bigquery_table", "export")
    assert table["for_each"] == "${local.exports}"
    assert table["schema"] == '${file("${path.module}/bigquery/${each.value.table}.json")}'
    partition = block(table, "time_partitioning")
    assert (partition["type"], partition["field"]) == ("DAY", bq.PARTITION_FIELD)
    assert table["deletion_protection"] is True and table["require_partition_filter"] is True
    sub = config.resource("google_pubsub_subscription", "export")
    assert sub["for_each"] == "${local.exports}" and "push_config" not in sub and "dynamic" not in sub
    bigquery = block(sub, "bigquery_config")
    assert (bigquery["use_table_schema"], bigquery["write_metadata"], bigquery["drop_unknown_fields"]) == (
        True, True, True)
    grant = config.resource("google_bigquery_table_iam_member", "pubsub_agent_writer")
    assert grant["member"] == "${local.pubsub_service_agent}" and grant["role"] == "roles/bigquery.dataEditor"
    # no function reads the export: it is no push subscription of the functions
    assert not {e.name for e in EXPORTS} & {s.name for s in topo.load().subscriptions}
