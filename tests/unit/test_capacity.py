"""benchmarks/capacity.py reads the design from its declarations: the sequential fields it models are
the data model's, and the data model's are the code's."""

from __future__ import annotations

from benchmarks import capacity
from shared.state.model import RESOURCE_SHARDS, SEQUENTIAL_FIELDS, SHARD, SHARDED, SHARDS


def test_the_models_sequential_indexed_fields_are_what_the_data_model_declares():
    declared = capacity.data_model()
    assert capacity.sequential_indexed_fields(declared) == SEQUENTIAL_FIELDS
    assert declared["shard"] == SHARD and capacity.design().shards == {"events": SHARDS, "resources": RESOURCE_SHARDS}


def test_every_sharded_field_is_modelled_behind_the_shard_at_its_rate_over_the_shards():
    d = capacity.design()
    hyperscale = next(f for f in capacity.FLEETS if f.name == "hyperscale")
    rows = {row.limit: row for row in capacity.firestore_rows(hyperscale, d)}
    for collection, fields in SEQUENTIAL_FIELDS.items():
        for name, how in fields.items():
            if how == SHARDED:
                assert all(c[-2] == SHARD for c in d.composite(collection, name)), (collection, name)
                [row] = [r for key, r in rows.items() if key.startswith(f"{collection}.{name}:")]
                assert f"sharded x{d.shards[collection]}" in row.limit
    assert not [key for key in rows if "unsharded" in key]


def test_an_index_without_the_shard_in_front_of_a_sequential_field_shows_as_indexed_unsharded():
    d = capacity.design()
    bare = [{"collection": "events", "fields": [{"field_path": "provider"}, {"field_path": "processedAt"}]}]
    worse = capacity.Design(**{**d.__dict__, "indexes": d.indexes + bare})
    fleet = capacity.FLEETS[0]
    assert [r.limit for r in capacity.firestore_rows(fleet, worse) if "unsharded" in r.limit] == [
        "events.processedAt: writes/s, indexed unsharded!"]
