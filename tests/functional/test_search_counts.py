"""A search's ``withCounts`` (issue 42): its total and counts per status read in one pass of its rows' statuses
(``DCM_SEARCH_COUNT_ROWS``, the local stack's) instead of one aggregation per status, each of which the emulator
answers with a scan of the whole collection; exact: the answers equal a full recount, status by status."""

from __future__ import annotations

import pytest

from shared.api import queries
from shared.api.queries import ResourceFilter
from tests.fakes import runtime_of
from tests.functional.conftest import PROJECT, Checked, bind_all
from tests.functional.test_api import seed
from tests.functional.test_usage_api import CountingCounts

FLEET = [("aws", "i-1", "RUNNING"), ("aws", "i-2", "STOPPED"), ("azure", "i-3", "RUNNING"),
         ("azure", "i-4", "FAILED"), ("vmware", "i-5", "PROVISIONING"), ("aws", "web-1", "RUNNING")]


class CountingQueries(CountingCounts):
    """The client's Firestore API with its queries counted too (one RPC each)."""

    def __init__(self, api, aggregations: list, queries: list):
        super().__init__(api, aggregations)
        self.queries = queries

    def run_query(self, *args, **kwargs):
        self.queries.append(1)
        return self.api.run_query(*args, **kwargs)


@pytest.fixture
def fleet(firestore):
    for n, (provider, rid, status) in enumerate(FLEET):
        seed(firestore, provider, "vm", rid, status, f"2026-03-01T10:00:0{n}Z", f"s{n}")


def _api(client, firestore, rows: str) -> Checked:
    bind_all(runtime_of(firestore=firestore, DCM_PROJECT=PROJECT, DCM_FEED_SETTLE_SECONDS="0",
                        DCM_SEARCH_COUNT_ROWS=rows))
    return Checked(client)


def _spied(firestore) -> tuple[list, list]:
    """The queries and the aggregation queries the api runs from now on (one item per RPC)."""
    queries_run: list = []
    aggregations: list = []
    firestore._firestore_api_internal = CountingQueries(firestore._firestore_api, aggregations, queries_run)
    return queries_run, aggregations


def _recount(firestore, where: ResourceFilter) -> tuple[int, dict[str, int]]:
    """Every status of the registry counted over the filter, one aggregation each: the full recount."""
    got = queries.counts({s: queries._of_status(firestore, where, s) for s in queries.statuses(where.resource_type)})
    return queries.count(where.query(firestore)), {s: n for s, n in got.items() if n}


@pytest.mark.parametrize("path, where", [
    ("q=i-", ResourceFilter(search="i-")),
    ("q=i-&provider=aws", ResourceFilter(provider="aws", search="i-")),
    ("q=nothing", ResourceFilter(search="nothing")),
])
def test_a_search_counts_its_statuses_in_one_pass_of_its_rows_exactly(client, firestore, fleet, path, where):
    api = _api(client, firestore, "10")
    run, aggregations = _spied(firestore)
    body = api.get(f"/v1/resources?{path}&withCounts=true&pageSize=2").json
    assert (len(run), len(aggregations)) == (2, 0)  # the page and the one pass (was: the total + 1 per status)
    total, counts = _recount(firestore, where)
    assert (body["total"], body["counts"]) == (total, counts)


def test_a_search_with_more_rows_than_one_pass_reads_is_counted_as_before(client, firestore, fleet):
    api = _api(client, firestore, "3")  # "i-" matches 5
    run, aggregations = _spied(firestore)
    body = api.get("/v1/resources?q=i-&withCounts=true").json
    assert len(run) == 2 and len(aggregations) >= 1 + 4  # the pass that stopped at 4 rows, then counts
    assert (body["total"], body["counts"]) == _recount(firestore, ResourceFilter(search="i-"))


def test_production_counts_a_search_with_aggregations_and_a_status_filter_needs_no_pass(client, firestore, fleet):
    api = _api(client, firestore, "0")  # production's default
    run, aggregations = _spied(firestore)
    body = api.get("/v1/resources?q=i-&withCounts=true").json
    assert len(run) == 1 and len(aggregations) >= 1 + 4
    assert (body["total"], body["counts"]) == _recount(firestore, ResourceFilter(search="i-"))
    api = _api(client, firestore, "10")
    run, aggregations = _spied(firestore)
    body = api.get("/v1/resources?q=i-&status=RUNNING&withCounts=true").json
    assert (len(run), len(aggregations)) == (1, 1)  # the total is the status's count
    assert (body["total"], body["counts"]) == (2, {"RUNNING": 2})

