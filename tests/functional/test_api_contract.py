"""Property-based run of schemathesis against the api function, in process (moved from tests/e2e, issue 41:
the functional tier serves the api on the Firestore emulator; tests/pipeline.py seeds it through the pipeline).

Every operation of the OpenAPI document gets generated requests, valid ones and
invalid ones; every answer must be documented (status, content type, schema),
never a 500, and a refusal is a JSON problem naming what was wrong. The live
stream is left out (it never ends by design); tests/e2e/test_change_feed.py
drives it.

(Driven through schemathesis' strategies and hypothesis directly: its pytest
fixture integration does not run under pytest 9.)
"""

from __future__ import annotations

import time

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.generation import GenerationMode

from infra.local.stack import LOCAL_SETTINGS
from tests.pipeline import pipeline_of
from tests.profile import examples

MAX_EXAMPLES = examples(30)  # per operation and mode (ten in `make check`: tests/profile.py)
RETRIES = 4  # a 503 asked again (after its Retry-After) this many times in all


# A hook is judged beyond what a schema can say (it must resolve, to an address we may call): a positive
# case gets one that passes. Callbacks registered here point at a closed loopback port, and are removed.
CONTRACT_HOOK = "http://127.0.0.1:9/contract"


@pytest.fixture
def api_schema(firestore):
    """The api as the local stack runs it (its settings: the example rate card...), one resource stored."""
    for pipeline in pipeline_of(firestore, **LOCAL_SETTINGS):
        pipeline.reporter("aws").publish_now("vm", "contract-1", "RUNNING", "seed").result(timeout=30)
        pipeline.settle()
        assert pipeline.resource("aws/vm/contract-1")["status"] == "RUNNING"
        yield schemathesis.openapi.from_wsgi("/v1/openapi.json", pipeline.bind("api").application)


def operations(schema) -> list:
    found = [result.ok() for result in schema.get_all_operations()]
    return [op for op in found if op.path != "/v1/changes/stream"]


OPAQUE = ("pageToken", "after")  # valid only as this API gave them: a generated one is rightly a 400


SPELLINGS = (("hook", "track_hook"), ("token", "track_token"))  # PUT .../callback: one of each pair, not both


def acceptable(case) -> bool:
    """A positive case the API can accept: no made-up opaque token, no after together with last; a resource
    callback's hook in one spelling (the document cannot say "one of these two parameters")."""
    query = case.query or {}
    if case.path.endswith("/callback") and case.method.upper() == "PUT":
        if any(a in query and b in query for a, b in SPELLINGS) or not ("hook" in query or "track_hook" in query):
            return False
    return not any(k in query for k in OPAQUE) and not ("after" in query and "last" in query)


def with_a_hook_we_may_call(case):
    for name in ("hook", "track_hook"):  # the tracker's spelling too (PUT of the resource and of .../callback)
        if case.query and name in case.query and case.query[name] != "none":
            case.query[name] = CONTRACT_HOOK
    if isinstance(case.body, dict) and "hook" in case.body:
        case.body["hook"] = CONTRACT_HOOK
    return case


USAGE_WINDOW = {"from": "2026-03-01", "to": "2026-03-31"}  # a window /v1/usage takes (92 days at most, past)
USAGE_RATES = "example"  # the local stack's rate card (DCM_RATE_CARDS)


def with_a_window_we_accept(case):
    """/v1/usage's days and card, /v1/trends' since and step are judged beyond what a schema can say (a real
    day, not in the future, a bounded range, a configured card; a duration or a time, a whole number of
    minutes): a positive case gets ones that pass, the rest of it as generated."""
    query = case.query
    if query is None:
        return case
    if case.path == "/v1/usage":
        query.update(USAGE_WINDOW)
        if "rates" in query:
            query["rates"] = USAGE_RATES
        query.pop("pageToken", None)
    elif case.path == "/v1/trends":
        query["since"] = "6h"
        if "step" in query:
            query["step"] = max(60, int(query["step"]) // 60 * 60)
    return case


def call_as_a_client_does(case):
    """The answer to ``case``, asked again after its ``Retry-After`` while it is a 503 (the documented answer
    of a state store slow to answer: a loaded emulator's), ``RETRIES`` times at most: a 503 that lasts is
    still a failure."""
    for _ in range(RETRIES):
        response = case.call()
        retry_after = response.headers.get("retry-after")  # schemathesis: lower-case names, lists of values
        if response.status_code != 503 or not retry_after:
            return response
        time.sleep(min(10.0, float(retry_after[0])))
    return response


def check(case) -> None:
    response = call_as_a_client_does(case)
    assert response.status_code < 500, f"{case.method} {case.formatted_path} {case.query}: {response.status_code}"
    case.validate_response(response)
    if response.status_code >= 400:
        assert response.headers["content-type"][0].startswith("application/problem+json")
        problem = response.json()
        assert problem["status"] == response.status_code and problem["detail"]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_generated_request_gets_a_server_error_or_an_undocumented_answer(api_schema, mode):
    ops = operations(api_schema)
    assert {op.path for op in ops} >= {"/v1/resources", "/v1/changes", "/v1/resources/{provider}/{type}/{id}"}
    for op in ops:
        if mode is GenerationMode.NEGATIVE and not op.definition.raw.get("parameters"):
            continue  # nothing to make invalid
        strategy = op.as_strategy(generation_mode=mode)
        if mode is GenerationMode.POSITIVE:
            strategy = strategy.filter(acceptable).map(with_a_hook_we_may_call).map(with_a_window_we_accept)

        @given(case=strategy)
        @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def run(case) -> None:
            check(case)

        try:
            run()
        except Exception as exc:
            exc.add_note(f"operation: {op.method.upper()} {op.path} ({mode.value} cases)")
            raise
