"""The BigQuery table schema of an export (``exports:`` of infra/topology.yaml), generated from JSON schemas.

A Pub/Sub BigQuery subscription with ``use_table_schema`` writes each message's JSON into the table's
columns, and with ``write_metadata`` adds the message's own: so the table is

- the metadata columns (subscription_name, message_id, publish_time, attributes), ``publish_time`` being
  the day partition;
- the CloudEvent envelope (schemas/envelope/cloudevent-v1.json), one column per context attribute;
- ``data``: a RECORD with one field per property of the event's data schema (e.g.
  schemas/events/status-changed-v1.json).

Type rules (JSON schema -> BigQuery): string -> STRING (``date-time`` too: the contract's RFC 3339 text,
kept exact; ``TIMESTAMP(col)`` reads it), boolean -> BOOLEAN, integer -> INTEGER, number -> FLOAT, object
and array -> JSON (open objects such as the resource snapshot keep every field they carry). Every column
is NULLABLE: presence is the JSON schema's job (upsert checks it), and BigQuery can add a NULLABLE column to
a table but never a REQUIRED one. A field the table does not know (a later MINOR version's) is dropped
(``drop_unknown_fields``) until this schema is regenerated: ``python -m infra.bigquery_schema --write``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Mapping

from infra import topology as topo

REPO_ROOT = Path(__file__).resolve().parents[1]
ENVELOPE_SCHEMA = "schemas/envelope/cloudevent-v1.json"
OUT_DIR = REPO_ROOT / "terraform" / "bigquery"
# Envelope attributes that never reach an export: the camelCase legacy alias (BigQuery column names are
# case-insensitive: it would clash with dataschema) and data_base64 (the platform's events carry JSON data).
ENVELOPE_LEFT_OUT = {"dataSchema": "legacy alias of dataschema, accepted at ingress only",
                     "data_base64": "the platform's events carry JSON data"}
METADATA_COLUMNS = (
    {"name": "subscription_name", "type": "STRING", "mode": "NULLABLE",
     "description": "Pub/Sub: the subscription that wrote the row."},
    {"name": "message_id", "type": "STRING", "mode": "NULLABLE",
     "description": "Pub/Sub: the message id (at-least-once: deduplicate on it, or on id)."},
    {"name": "publish_time", "type": "TIMESTAMP", "mode": "NULLABLE",
     "description": "Pub/Sub: when the event was published. The table's day partition."},
    {"name": "attributes", "type": "JSON", "mode": "NULLABLE",
     "description": "Pub/Sub: the message attributes."},
)
PARTITION_FIELD = "publish_time"
SCALARS = {"string": "STRING", "boolean": "BOOLEAN", "integer": "INTEGER", "number": "FLOAT"}


def column_type(schema: Mapping[str, Any]) -> str:
    """The BigQuery type of one JSON schema property (a nullable type is its non-null one)."""
    types = schema.get("type", [])
    kinds = [t for t in (types if isinstance(types, list) else [types]) if t != "null"]
    if len(kinds) == 1 and kinds[0] in SCALARS:
        return SCALARS[kinds[0]]
    return "JSON"  # object, array, several types, or none said


def column(name: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    col = {"name": name, "type": column_type(schema), "mode": "NULLABLE"}
    if schema.get("description"):
        col["description"] = schema["description"][:1024]
    return col


def _read(relative: str) -> dict[str, Any]:
    return json.loads((REPO_ROOT / relative).read_text())


def table_schema(event_schema: str) -> list[dict[str, Any]]:
    """The columns of the export of events whose data follows ``event_schema`` (a repository path)."""
    envelope = _read(ENVELOPE_SCHEMA)["properties"]
    data = _read(event_schema)
    return [
        *METADATA_COLUMNS,
        *(column(name, spec) for name, spec in envelope.items() if name not in ENVELOPE_LEFT_OUT),
        {"name": "data", "type": "RECORD", "mode": "NULLABLE",
         "description": f"The event's data: {data.get('title', event_schema)}."[:1024],
         "fields": [column(name, spec) for name, spec in data["properties"].items()]},
    ]


def render(columns: list[dict[str, Any]]) -> str:
    return json.dumps(columns, indent=2) + "\n"


def out_path(export: topo.ExportSpec) -> Path:
    return OUT_DIR / f"{export.table}.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate terraform/bigquery/<table>.json for each export.")
    parser.add_argument("--write", action="store_true", help="write the files (default: check they are current)")
    args = parser.parse_args(argv)
    stale = []
    for export in topo.load().exports:
        text, path = render(table_schema(export.event_schema)), out_path(export)
        if args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        elif not path.exists() or path.read_text() != text:
            stale.append(str(path.relative_to(REPO_ROOT)))
    if stale:
        print(f"out of date: {', '.join(stale)}; run python -m infra.bigquery_schema --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
