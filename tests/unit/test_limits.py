"""Firestore's and Pub/Sub's documented limits, checked before anything is written or published."""

from __future__ import annotations

import pytest
from dcm_status_contracts import deadletter as dl
from dcm_status_contracts import limits, timeutil
from dcm_status_contracts.errors import Reason, Rejected
from dcm_status_contracts.model import PubSubMessage


def nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize("value, rule", [
    ({"ok": [1, {"b": [2]}], "x.y": "dots are fine", "ü": "unicode too"}, None),
    (nested(16), None),
    (nested(17), "maxDepth"),
    ({"__name__": 1}, "propertyNames"),
    ({"": 1}, "propertyNames"),
    ({"k" * 1501: 1}, "propertyNames"),
    ({"m": [[1]]}, "items"),
    ({"n": 2 ** 63}, "maximum"),
    ({"n": -(2 ** 63)}, None),
])
def test_storable(value, rule):
    breach = limits.storable(value)
    assert (breach.rule if breach else None) == rule


def test_depth_is_checked_without_recursion():
    deep: list = []
    for _ in range(100_000):  # far beyond Python's recursion limit
        deep = [deep]
    breach = limits.too_deep(deep, limits.MAX_EVENT_DEPTH)
    assert breach.rule == "maxDepth" and breach.path.count("/") == limits.MAX_EVENT_DEPTH + 1


@pytest.mark.parametrize("value", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_timestamps_out_of_range_once_in_utc_are_a_value_error(value):
    with pytest.raises(ValueError, match="out of range"):
        timeutil.parse(value)


def test_a_dead_letter_never_exceeds_pubsubs_100_attributes():
    originals = {f"attr-{i:03d}": "v" for i in range(100)}
    exc = Rejected(Reason.SCHEMA_INVALID, "bad", {"path": "/data"}, key="aws/vm/i-1")
    attrs = dl.rejection_attributes(PubSubMessage(b"{}", originals, "m-1", None, "dcm-status-ingress-aws"),
                                    exc, "ingest", "aws", "2026-01-01T00:00:00.000000Z")
    assert len(attrs) == limits.PUBSUB_MAX_ATTRIBUTES - limits.TRACE_CONTEXT_ATTRIBUTES  # traceparent joins at publish
    kept = [k for k in attrs if k.startswith("attr-")]
    assert int(attrs[dl.ATTRIBUTES_DROPPED]) == 100 - len(kept) and attrs[dl.REASON] == "schema_invalid"


def test_a_dead_letter_leaves_out_the_originals_pubsub_refuses_and_counts_them():
    """A NATS header becomes an attribute: its key or value may be longer than Pub/Sub carries (issue 37)."""
    originals = {"ce-" + "k" * 300: "v", "ce-id": "x" * 2000, "ce-source": "dcm/providers/aws"}
    attrs = dl.rejection_attributes(PubSubMessage(b"{}", originals, "m-1"), Rejected(Reason.OVERSIZE, "x"),
                                    "nats_ingress", "aws", "now")
    assert attrs["ce-source"] == "dcm/providers/aws" and "ce-id" not in attrs and "ce-" + "k" * 300 not in attrs
    assert attrs[dl.ATTRIBUTES_DROPPED] == "2" and not limits.attribute_breaches(attrs)


@pytest.mark.parametrize("key, value, refused", [("k" * 256, "v" * 1024, False), ("k" * 257, "v", True),
                                                 ("k", "v" * 1025, True), ("é" * 129, "v", True), ("", "v", True),
                                                 ("googx", "v", True)])
def test_an_attribute_pubsub_refuses_is_named(key, value, refused):
    assert bool(limits.attribute_breach(key, value)) is refused


def test_a_dead_letter_with_few_attributes_keeps_them_all():
    attrs = dl.rejection_attributes(PubSubMessage(b"{}", {"a": "1"}, "m-1"), Rejected(Reason.OVERSIZE, "x"),
                                    "ingest", None, "now")
    assert attrs["a"] == "1" and dl.ATTRIBUTES_DROPPED not in attrs


@pytest.mark.parametrize("error, raised, reason", [
    ("ServiceUnavailable", "Transient", None),
    ("DeadlineExceeded", "Transient", None),
    ("InvalidArgument", "Rejected", Reason.UNSTORABLE),  # a limit nobody checked: never retried
])
def test_firestore_failures_map_to_retry_or_dead_letter(error, raised, reason):
    from dcm_status_contracts import errors
    from google.api_core import exceptions as gexc

    from shared.runtime import firestore as fs

    with pytest.raises(getattr(errors, raised)) as info:
        with fs.guard("write"):
            raise getattr(gexc, error)("boom")
    assert getattr(info.value, "reason", None) is reason


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.profile import examples  # noqa: E402

_keys = st.one_of(st.text(max_size=3), st.sampled_from(["", "__x__", "__name__", "a" * 1501, "é" * 400]))
_scalars = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False), st.text(max_size=3),
                     st.integers(min_value=-(2 ** 64), max_value=2 ** 64))
_json = st.recursive(_scalars, lambda children: st.one_of(st.lists(children, max_size=3),
                                                           st.dictionaries(_keys, children, max_size=3)),
                     max_leaves=30)


@settings(max_examples=examples(1500), deadline=None)
@given(_json, st.integers(min_value=0, max_value=5))
def test_the_fast_checks_agree_with_the_walks_that_say_where(value, limit):
    """storable() and too_deep() answer valid data from a fast check and walk again only on a breach: the
    fast check must never pass what the walk refuses."""
    from dcm_status_contracts import limits

    walk_ok = _walk_finds_nothing(value, limit)
    assert (limits.storable(value, max_depth=limit) is None) == walk_ok
    if limits._storable_fast(value, limit):
        assert walk_ok
    deep = any(depth > limit for _, _, depth, _ in limits._walk(value, ""))
    assert limits._depth_within(value, limit) == (not deep)
    assert (limits.too_deep(value, limit) is None) == (not deep)


def _walk_finds_nothing(value, limit) -> bool:
    from dcm_status_contracts import limits

    original = limits._storable_fast
    try:
        limits._storable_fast = lambda *_: False  # force the walk
        return limits.storable(value, max_depth=limit) is None
    finally:
        limits._storable_fast = original
