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
                # behind the shard, or behind a resource's key (one resource's entries: events.recordedAt for ?at=)
                behind = {c[-2] for c in d.composite(collection, name)}
                assert SHARD in behind and behind <= {SHARD, "key"}, (collection, name)
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


def test_no_index_range_caps_the_design_below_10000_changes_a_second():
    """The issue's bar: at 10,000 applied changes/s (and every heartbeat), every sequential field's index
    range stays under 70% of Firestore's 500 writes/s; a shard count lowered would fail here."""
    d = capacity.design()
    for fleet in capacity.FLEETS[:3]:
        assert fleet.changes <= 10_000
        ranges = [r for r in capacity.firestore_rows(fleet, d) if "per index range" in r.limit]
        assert len(ranges) == sum(how == SHARDED for fields in SEQUENTIAL_FIELDS.values() for how in fields.values())
        assert all(r.use <= capacity.TARGET for r in ranges), [(r.limit, r.use) for r in ranges]
