"""The writes shared/runtime/firestore_writes.py encodes are the Firestore client library's own, byte for byte:
generated documents and upsert's real decisions, for create, set and update with a precondition; what it does not
encode (dotted paths, nested transforms, DELETE_FIELD) is the library's, errors included. No Firestore: a batch only
collects its writes until it is committed."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from google.cloud import firestore
from google.cloud.firestore_v1 import _helpers
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.runtime import firestore_writes
from shared.upsert.store import _firestore_value
from tests.profile import examples
from tests.unit.test_upsert_decide import NOW, POLICY, decide, nothing_stored, stored_as, update

@pytest.fixture(scope="module")
def db(monkeypatch_module):
    return firestore.Client(project="p")


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FIRESTORE_EMULATOR_HOST", "localhost:1")  # never called: a batch is built, not committed
        yield mp


def written(batch) -> list[bytes]:
    return [w._pb.SerializeToString(deterministic=True) for w in batch._write_pbs]


def both(db, verb: str, data: dict, **option) -> tuple[list[bytes], list[bytes]]:
    """The batch the library builds for ``verb`` and the one firestore_writes builds."""
    ref = db.collection("c").document("d")
    ours, theirs = db.batch(), db.batch()
    getattr(theirs, verb)(ref, data, **option)
    getattr(firestore_writes, verb)(ours, ref, data, *option.values())
    return written(theirs), written(ours)


keys = st.text(min_size=1, max_size=12)
plain_keys = st.from_regex(r"[_a-zA-Z][_a-zA-Z0-9]{0,10}", fullmatch=True)
leaves = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1),
                   st.floats(allow_nan=False), st.text(max_size=20), st.binary(max_size=8),
                   st.datetimes(timezones=st.just(timezone.utc)))
values = st.recursive(leaves, lambda inner: st.one_of(st.lists(inner, max_size=4).filter(
    lambda xs: not any(isinstance(x, list) for x in xs)),  # Firestore has no array in an array
    st.dictionaries(keys, inner, max_size=4)), max_leaves=12)
transforms = st.sampled_from([firestore.SERVER_TIMESTAMP, firestore.Increment(1), firestore.Increment(2.5)])
documents = st.dictionaries(plain_keys, st.one_of(values, transforms), min_size=1, max_size=10)


@settings(max_examples=examples(100), deadline=None)
@given(documents)
def test_a_generated_document_is_written_as_the_library_writes_it(db, doc):
    for verb in ("create", "set"):
        theirs, ours = both(db, verb, doc)
        assert ours == theirs, verb
    theirs, ours = both(db, "update", doc, option=db.write_option(last_update_time=datetime(2026, 1, 1,
                                                                                               tzinfo=timezone.utc)))
    assert ours == theirs


def test_upserts_own_writes_are_the_librarys_for_a_new_and_an_existing_resource(db):
    first = update()
    later = update(status="STOPPED", minute=5, event_id="e2")
    for u, stored in ((first, nothing_stored(first)), (later, stored_as(first))):
        for w in decide(POLICY, u, stored, NOW).writes:
            data = {k: _firestore_value(v) for k, v in w.data.items()}
            option = {"option": db.write_option(last_update_time=NOW)} if w.op.value == "update" else {}
            theirs, ours = both(db, w.op.value, data, **option)
            assert ours == theirs, (w.collection, w.op)


@pytest.mark.parametrize("verb, data", [
    ("update", {"ring.e1": "x", "n": 1}),  # a dotted path: a nested field
    ("create", {"m": {"at": firestore.SERVER_TIMESTAMP}}),  # a nested transform
    ("set", {"xs": [1, 2], "u": firestore.ArrayUnion([3])}),
    ("update", {"gone": firestore.DELETE_FIELD}),
    ("set", {"a b": 1, "t": firestore.SERVER_TIMESTAMP}),  # a quoted field name in a transform's path
    ("create", {"when": datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=1)}),
])
def test_what_it_does_not_encode_itself_is_the_librarys(db, verb, data):
    option = {"option": db.write_option(last_update_time=NOW)} if verb == "update" else {}
    theirs, ours = both(db, verb, data, **option)
    assert ours == theirs


@pytest.mark.parametrize("verb, data", [("create", {"gone": firestore.DELETE_FIELD}),
                                        ("set", {"xs": [firestore.SERVER_TIMESTAMP]}),
                                        ("create", {"m": {1: "not a field name"}})])
def test_a_write_the_library_refuses_is_refused_the_same_way(db, verb, data):
    ref = db.collection("c").document("d")
    with pytest.raises(Exception) as theirs:
        getattr(db.batch(), verb)(ref, data)
    with pytest.raises(type(theirs.value)):
        getattr(firestore_writes, verb)(db.batch(), ref, data)


def test_the_library_still_builds_writes_as_this_module_expects():
    """The module leans on two things of the library's: ``pbs_for_create`` sets no mask and the batch collects
    proto-plus ``Write`` messages; a release that changes either fails here first."""
    [pb] = _helpers.pbs_for_create("projects/p/databases/(default)/documents/c/d", {"a": 1})
    assert not pb._pb.HasField("update_mask") and pb._pb.current_document.exists is False
