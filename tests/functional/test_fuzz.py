"""Property-based fuzzing of ingest, upsert and deadletter through functions-framework.

Every golden sample (the proposal's forms and the real producers') is mutated by hypothesis: a
node replaced by arbitrary JSON, removed, or buried up to 240 levels deep (deeper is a golden sample);
bytes cut. The property: every input is acked (HTTP 200), as applied, duplicate, stale, unchanged
or dead-lettered with a reason; never a 500, which would mean retries into ``delivery_exhausted``. The one
answer allowed before the ack is a 503 (``Transient``: the Firestore emulator did not answer within the
functions' deadline, on a loaded machine), and the redelivery that follows must be acked: a 503 the input
itself causes comes back on every attempt and fails the property (counted: ``redelivered after 503``).
Each input goes through the in-process pipeline (tests/pipeline.py): what ingest forwards through upsert and
on to the changed topic's consumers, what anyone dead-letters through deadletter, with Pub/Sub's real limits.

``DCM_FUZZ_EXAMPLES`` sets the number of inputs per test (CI runs a few hundred; ``make
reliability`` runs 10,000 and reports the counts).
"""

from __future__ import annotations

import base64
import collections
from typing import Any

import orjson
import pytest
from dcm_status_contracts import deadletter as dl
from dcm_status_contracts import status_update
from google.api_core import exceptions as gexc
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests import samples
from tests.fakes import FakePublisher, runtime_of
from infra.topology import load
from tests.functional.conftest import PROJECT, bind_all, client_for
from tests.pipeline import pipeline_of
from tests.profile import examples

EXAMPLES = examples(300, fuzz=True)  # DCM_FUZZ_EXAMPLES, or 300 (a fifth in `make check`: tests/profile.py)
SEEDS = samples.load("valid") + samples.load("upstream")
TALLY: collections.Counter = collections.Counter()

NASTY = ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "2099-01-01T00:00:00Z", "__x__", "", "dcm.vm",
         "€" * 600, "\U0001F600" * 300, "x" * 2000, "RUNNING", "Running", "dcm.status.vm", "dcm/providers/other"]
leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70), st.floats(allow_nan=False),
                 st.text(max_size=40), st.sampled_from(NASTY))
keys = st.one_of(st.text(max_size=12), st.sampled_from(["__x__", "", "id", "status", "message", "k" * 1600]))
json_value = st.recursive(leaf, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(keys, inner, max_size=4)), max_leaves=16)


def buried(depth: int, kind: str) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


mutation = st.tuples(st.sampled_from(["replace", "delete", "insert", "bury", "attribute", "truncate"]),
                     st.integers(0, 10 ** 6), json_value, st.integers(14, 240), st.sampled_from(["list", "dict"]))


def _nodes(doc: Any) -> list[tuple[Any, Any]]:
    """(container, key) of every node below the root, without recursion."""
    out, stack = [], [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            out.append((node, k))
            stack.append(v)
    return out


def mutate(seed: samples.Sample, steps: list[tuple]) -> tuple[bytes, dict[str, str]]:
    doc = orjson.loads(seed.data)
    attributes = dict(seed.attributes)
    raw: bytes | None = None
    for kind, pick, value, depth, shape in steps:
        nodes = _nodes(doc)
        container, key = nodes[pick % len(nodes)] if nodes else (doc, None)
        if kind == "replace" and key is not None:
            container[key] = value
        elif kind == "delete" and key is not None:
            del container[key]
        elif kind == "insert" and isinstance(container, dict):
            container[str(value)[:20] if not isinstance(value, str) else value[:20]] = value
        elif kind == "bury" and key is not None:
            container[key] = buried(depth, shape)
        elif kind == "attribute":
            name = str(value)[:30] if attributes or pick % 2 else "ce-id"
            attributes[name or "ce-x"] = str(value)[:3000]
        elif kind == "truncate":
            raw = (raw or _dumps(doc))[: pick % (len(raw or _dumps(doc)) + 1)]
    return (raw if raw is not None else _dumps(doc)), attributes


def _dumps(doc: Any) -> bytes:
    try:
        return orjson.dumps(doc)
    except TypeError:  # two burials compounded past what orjson writes (255 levels): not an input
        assume(False)
        raise


def push(client, topic: str, data: bytes, attributes: dict[str, str], message_id: str):
    body = {"message": {"data": base64.b64encode(data).decode(), "attributes": attributes,
                        "messageId": message_id, "publishTime": "2026-01-01T00:00:01Z"},
            "subscription": f"projects/{PROJECT}/subscriptions/fuzz"}
    return client.post(f"/projects/{PROJECT}/topics/{topic}", json=body)


@pytest.fixture(scope="module")
def clients():
    return {"upsert": client_for("upsert")}


PROVIDERS = tuple(dict.fromkeys((*load().providers, *(s.provider for s in SEEDS))))  # each seed's own topic


@pytest.fixture
def pipeline(firestore):
    """One pipeline for all the examples of a test (its handlers built once), every seed's provider's topics."""
    yield from pipeline_of(firestore, PROVIDERS)


def acked_in_the_end(answers: list[int]) -> bool:
    """Acked (200) at last, after nothing but 503s (``Transient``: redelivered, as Pub/Sub does)."""
    return bool(answers) and answers[-1] == 200 and set(answers[:-1]) <= {503}


def until_acked(post, attempts: int = 5):
    """``post()`` again after each 503, as Pub/Sub redelivers (``attempts`` in all): the last answer."""
    for _ in range(attempts - 1):
        resp = post()
        if resp.status_code != 503:
            return resp
        TALLY["redelivered after 503"] += 1
    return post()


def through_the_pipeline(pipeline, data: bytes, attributes: dict[str, str], provider: str) -> str:
    """Publish one message on ``provider``'s ingress topic and settle (tests/pipeline.py: every function the
    topology routes it to, Pub/Sub's limits as production's); every push must be acked at its first try."""
    pipeline.bus.forget()
    try:
        pipeline.publish(f"ingress:{provider}", data, **attributes)
    except gexc.InvalidArgument:  # e.g. cut to nothing, no attributes: never reaches the platform
        return "refused by Pub/Sub"
    settled = pipeline.settle()
    assert all(acked_in_the_end(d.answers) for d in settled) and not pipeline.bus.undelivered, (
        [(d.subscription.name, d.answers) for d in settled], data[:300], attributes)
    TALLY["redelivered after 503"] += sum(len(d.answers) - 1 for d in settled)
    assert all(m.attributes[dl.REASON] for m in pipeline.bus.on("dcm-status-deadletter"))
    return "forwarded" if pipeline.bus.normalized() else "dead-lettered"


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(seed=st.sampled_from(SEEDS), steps=st.lists(mutation, min_size=1, max_size=3))
def test_every_mutated_event_is_acked_by_every_function(pipeline, seed, steps):
    data, attributes = mutate(seed, steps)
    TALLY["ingest inputs"] += 1
    TALLY[through_the_pipeline(pipeline, data, attributes, seed.provider)] += 1


def normalized_seed(sample: samples.Sample) -> dict:
    from shared.ingest.normalize import normalize_message
    from shared.runtime import settings as settings_module

    return status_update.to_document(normalize_message(sample.message(), settings_module.from_env()))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(seed=st.sampled_from(SEEDS), steps=st.lists(mutation, min_size=1, max_size=3))
def test_every_mutated_internal_message_is_acked_by_upsert(clients, firestore, seed, steps):
    """What reaches upsert without ingest (a bug, a replay of something old): acked, or dead-lettered."""
    internal = samples.Sample("n", "", seed.provider, orjson.dumps(normalized_seed(seed)), {}, {})
    data, attributes = mutate(internal, steps)
    fake = FakePublisher()
    bind_all(runtime_of(publisher=fake, firestore=firestore, DCM_PROJECT=PROJECT))
    TALLY["upsert inputs"] += 1
    message_id = f"u-{TALLY['upsert inputs']}"
    resp = until_acked(lambda: push(clients["upsert"], "dcm-status-normalized-aws", data, attributes, message_id))
    assert resp.status_code == 200, (resp.status_code, data[:300])
    TALLY["upsert dead-lettered" if fake.on("dcm-status-deadletter") else "upsert acked"] += 1


def test_fuzz_tally():
    """Runs last in this module: the counts, for `make reliability`."""
    print(f"\nfuzz: {dict(TALLY)}")
    assert TALLY["ingest inputs"] >= EXAMPLES and TALLY["upsert inputs"] >= EXAMPLES
