"""Usage and trends over the api (issue 40), on the Firestore emulator.

``/v1/usage`` answers the rows of ``dcm-status billing report`` (the CLI, locally on Firestore and as the api's
client with ``--api``) for the same fleet: billing's known lifecycles, exact seconds, every ``by``; its CSV
parsed back equals its JSON; every mistake is a 400 problem, and no parameters make it answer 500. Every answer
is checked against the OpenAPI document (the ``api`` fixture's client).
"""

from __future__ import annotations

import csv
import io
import json
import os
from datetime import datetime, timedelta, timezone
from urllib.parse import urlencode, urlsplit

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.cli import cli
from infra.cli import usage_api
from shared.state import aggregates, trends
from shared.state.usage import report as usage_report
from shared.state.usage.report import FORMULA_STARTS, safe_cell, to_csv
from tests.fakes import FakePublisher, runtime_of
from tests.functional.conftest import PROJECT, Checked, bind_all
from tests.functional.test_billing import deliver, lifecycle
from tests.profile import examples

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RATES = os.path.join(REPO, "examples", "rates.yaml")
D1, D2, D3 = "2026-03-01", "2026-03-02", "2026-03-03"
H = 3600
ACME, ZETA = {"tenant": "acme"}, {"tenant": "zeta"}
# (key, steps): known lifecycles, and the seconds each bills (UTC days)
FLEET = {
    "aws/vm/i-1": [(f"{D1}T10:00:00Z", "RUNNING", ACME), (f"{D1}T12:00:00Z", "STOPPED", ACME),
                   (f"{D1}T14:00:00Z", "RUNNING", ZETA), (f"{D2}T06:00:00Z", "DELETED", ZETA)],
    "aws/vm/i-2": [(f"{D1}T00:00:00Z", "RUNNING", ACME), (f"{D2}T12:30:00Z", "STOPPED", ACME)],
    "azure/vm/web-1": [(f"{D1}T22:00:00Z", "RUNNING", {}), (f"{D2}T01:15:00Z", "FAILED", {})],
    "kubernetes/cluster/k-1": [(f"{D1}T08:00:00Z", "PROVISIONING", ZETA), (f"{D1}T09:00:00Z", "ACTIVE", ZETA),
                               (f"{D2}T09:00:00Z", "DELETED", ZETA)],
    "aws/volume/=cmd|calc": [(f"{D2}T00:00:00Z", "AVAILABLE", {"tenant": "@evil"}),
                             (f"{D2}T02:00:00Z", "DELETED", {"tenant": "@evil"})],
}
EXPECTED_SECONDS = {  # by resource: (day, key) -> seconds
    (D1, "aws/vm/i-1"): 12 * H, (D2, "aws/vm/i-1"): 6 * H,
    (D1, "aws/vm/i-2"): 24 * H, (D2, "aws/vm/i-2"): 12.5 * H,
    (D1, "azure/vm/web-1"): 2 * H, (D2, "azure/vm/web-1"): 1.25 * H,
    (D1, "kubernetes/cluster/k-1"): 15 * H, (D2, "kubernetes/cluster/k-1"): 9 * H,
    (D2, "aws/volume/=cmd|calc"): 2 * H,
}
BY = {"tenant": "tenant", "provider": "provider", "type": "resourceType", "resource": "resource"}


@pytest.fixture
def usage(client, firestore, upsert):
    bind_all(runtime_of(publisher=FakePublisher(), firestore=firestore, DCM_PROJECT=PROJECT,
                        DCM_RATE_CARDS=f"example={RATES}"))
    for key, steps in FLEET.items():
        deliver(upsert, lifecycle(key, steps))
    return Checked(client)


def cli_env(firestore_emulator, tmp_path) -> dict[str, str]:
    return {"DCM_STATE_DIR": str(tmp_path / "no-stack"), "DCM_PROJECT": PROJECT,
            "FIRESTORE_EMULATOR_HOST": firestore_emulator.host, "DCM_API_TOKEN": ""}


def cli_rows(env: dict[str, str], *args: str) -> list[dict]:
    got = CliRunner().invoke(cli, ["billing", "report", "--from", D1, "--to", D3, "--json", *args], env=env)
    assert got.exit_code == 0, got.output
    return json.loads(got.stdout)["rows"]


def all_rows(api, query: str, size: int = 500) -> list[dict]:
    rows, token = [], None
    while True:
        body = api.get(f"/v1/usage?{query}&pageSize={size}" + (f"&pageToken={token}" if token else "")).json
        rows += body["rows"]
        token = body["nextPageToken"]
        if token is None:
            return rows


@pytest.mark.parametrize("by", list(BY))
def test_usage_over_the_api_is_the_clis_report_for_every_by(usage, firestore_emulator, tmp_path, by):
    env = cli_env(firestore_emulator, tmp_path)
    api_rows = all_rows(usage, f"from={D1}&to={D3}&by={by}", size=2)  # paged by 2: the cursor too
    assert api_rows == cli_rows(env, "--by", BY[by])
    assert api_rows == usage_report.report(firestore_emulator_db(), D1 + "T00:00:00Z", D3 + "T00:00:00Z", [BY[by]])
    if by == "resource":
        assert {(r["day"], r["resource"]): r["seconds"] for r in api_rows} == EXPECTED_SECONDS
    assert sum(r["seconds"] for r in api_rows) == sum(EXPECTED_SECONDS.values())


def firestore_emulator_db():
    from google.cloud import firestore as gfirestore

    return gfirestore.Client(project=PROJECT)


def test_the_cli_with_api_reads_v1_usage_and_prints_the_same_report(usage, firestore_emulator, tmp_path,
                                                                    monkeypatch):
    """``billing report --api URL``: the api's rows, paged, printed as the local report prints them; a
    named rate card, not a file."""
    asked = []

    def get(url, params=None, headers=None, timeout=None):  # the api's test client plays the network
        asked.append((urlsplit(url).path, dict(params)))
        got = usage.get(f"{urlsplit(url).path}?{urlencode(params)}", headers=headers)
        return FakeResponse(got)

    monkeypatch.setattr(usage_api.requests, "get", get)
    monkeypatch.setattr(usage_api, "PAGE_SIZE", 3)
    env = cli_env(firestore_emulator, tmp_path)
    for by in BY.values():
        assert cli_rows(env, "--by", by, "--api", "http://api.example") == cli_rows(env, "--by", by)
    assert len([a for a in asked if a[1]["by"] == "resource"]) == 3  # 9 rows, pages of 3
    rated = cli_rows(env, "--by", "type", "--api", "http://api.example", "--rate-card", "example")
    assert rated == cli_rows(env, "--by", "type", "--rates", RATES)
    got = CliRunner().invoke(cli, ["billing", "report", "--from", D1, "--to", D3, "--api", "http://api.example",
                                   "--rate-card", "nope"], env=env)
    assert got.exit_code != 0 and "no rate card 'nope'" in got.output
    got = CliRunner().invoke(cli, ["billing", "report", "--from", D1, "--api", "http://x", "--rates", RATES], env=env)
    assert got.exit_code == 2 and "--rate-card" in got.output


class FakeResponse:
    def __init__(self, got):
        self.status_code, self.text, self._json = got.status_code, got.get_data(as_text=True), got.json

    def json(self):
        return self._json


@pytest.mark.parametrize("by", list(BY))
def test_the_csv_parsed_back_is_the_json(usage, by):
    body = usage.get(f"/v1/usage?from={D1}&to={D3}&by={by}&rates=example").json
    got = usage.get(f"/v1/usage?from={D1}&to={D3}&by={by}&rates=example&format=csv")
    assert got.mimetype == "text/csv" and got.headers["Content-Disposition"].startswith("attachment;")
    text = got.get_data(as_text=True)
    assert text.endswith("\r\n")  # RFC 4180
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert list(parsed[0]) == ["day", BY[by], "resources", "seconds", "hours", "cost", "currency"]
    assert len(parsed) == len(body["rows"])
    for row, want in zip(parsed, body["rows"]):
        for column, value in want.items():
            cell = row[column]
            if value is None:
                assert cell == ""
            elif isinstance(value, (int, float)):
                assert float(cell) == value
            else:  # text: as the JSON says, or neutralised when a spreadsheet would run it
                assert cell == value or (value.startswith(FORMULA_STARTS) and cell == "'" + value)
    accepted = usage.get(f"/v1/usage?from={D1}&to={D3}&by={by}&rates=example", headers={"Accept": "text/csv"})
    assert accepted.get_data(as_text=True) == text


def test_csv_cells_a_spreadsheet_would_run_are_neutralised(usage):
    text = usage.get(f"/v1/usage?from={D1}&to={D3}&by=tenant&format=csv").get_data(as_text=True)
    assert "\r\n2026-03-02,'@evil,1," in text and ",@evil" not in text
    assert "aws/volume/=cmd|calc" in usage.get(f"/v1/usage?from={D1}&to={D3}&by=resource&format=csv").get_data(
        as_text=True)  # a key starts with its provider: no formula
    assert [safe_cell(v) for v in ("=1", "+1", "-1", "@a", "\tx", "a=b", 3, None)] == [
        "'=1", "'+1", "'-1", "'@a", "'\tx", "a=b", 3, ""]
    assert to_csv([], ["day", "tenant"], "\r\n") == "day,tenant\r\n"  # an empty window still has its header


def test_an_empty_window_says_so(usage):
    body = usage.get("/v1/usage?from=2026-01-01&to=2026-02-01&by=provider").json
    assert body["rows"] == [] and body["total"] == {"seconds": 0, "hours": 0.0} and body["nextPageToken"] is None
    text = usage.get("/v1/usage?from=2026-01-01&to=2026-02-01&by=provider&format=csv").get_data(as_text=True)
    assert text == "day,provider,resources,seconds,hours\r\n"


@pytest.mark.parametrize("query, parameter", [
    ("", "from"),
    (f"from={D1}&to={D1}", "to"),
    (f"from={D2}&to={D1}", "to"),
    ("from=2026-01-01&to=2026-06-01", "to"),  # beyond 92 days
    ("from=2026-3-1", "from"),
    ("from=2026-02-30", "from"),
    (f"from={D1}&to=tomorrow", "to"),
    (f"from={D1}&to={D3}&by=region", "by"),
    (f"from={D1}&to={D3}&rates=nope", "rates"),
    (f"from={D1}&to={D3}&rates=../../etc/passwd", "rates"),
    (f"from={D1}&to={D3}&rates={RATES}", "rates"),  # a file path is no card's name
    (f"from={D1}&to={D3}&format=xml", "format"),
    (f"from={D1}&to={D3}&format=csv&pageToken=abc", "pageToken"),
    (f"from={D1}&to={D3}&pageToken=garbage", "pageToken"),
    (f"from={D1}&to={D3}&pageSize=0", "pageSize"),
    (f"from={D1}&tenant=acme", "tenant"),
    ("from=2999-01-01&to=2999-02-01", "from"),
])
def test_bad_usage_requests_are_400_problems_naming_the_parameter(usage, query, parameter):
    got = usage.get(f"/v1/usage?{query}")
    assert got.status_code == 400 and got.json["parameter"] == parameter, got.json


def test_a_page_token_of_another_by_is_refused(usage):
    token = usage.get(f"/v1/usage?from={D1}&to={D3}&by=resource&pageSize=1").json["nextPageToken"]
    got = usage.get(f"/v1/usage?from={D1}&to={D3}&by=tenant&pageToken={token}")
    assert got.status_code == 400 and got.json["parameter"] == "pageToken"


TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
VALUE = st.one_of(TEXT, st.sampled_from(["2026-03-01", "2026-03-03", "2025-12-31", "2026-06-30", "tenant", "type",
                                         "resource", "provider", "csv", "json", "example", "0", "5000", "-1"]))
NAMES = st.sampled_from(["from", "to", "by", "rates", "format", "pageSize", "pageToken", "since", "step", "provider",
                         "x"])


@settings(max_examples=examples(60, fuzz=True), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(params=st.dictionaries(NAMES, VALUE, max_size=5), path=st.sampled_from(["/v1/usage", "/v1/trends"]),
       accept=st.sampled_from(["", "text/csv", "application/json", "text/csv, application/json", "*/*"]))
def test_no_parameters_make_usage_or_trends_answer_500(usage, params, path, accept):
    got = usage.get(f"{path}?{urlencode(params)}", headers={"Accept": accept} if accept else {})
    assert got.status_code in (200, 400), (params, got.status_code, got.get_data(as_text=True)[:300])


# ---- trends ------------------------------------------------------------------------------------------
def test_trends_count_each_minute_per_provider_and_the_api_buckets_them(api, firestore):
    """The sweep's windowed counts of what the pipeline already wrote (ledger history entries, duplicate
    records, dead letters), one document a minute; /v1/trends sums them per step."""
    now = datetime.now(timezone.utc).replace(second=30, microsecond=0)
    m = trends.floor_minute(now)
    at = lambda minute, s=5: (m - timedelta(minutes=minute) + timedelta(seconds=s)).strftime(  # noqa: E731
        "%Y-%m-%dT%H:%M:%S.000000Z")
    ledger = firestore.collection("events")
    for i in range(3):
        ledger.document(f"a{i}").set({"provider": "aws", "outcome": "applied", "recordedAt": at(2), "shard": i})
    ledger.document("s0").set({"provider": "aws", "outcome": "stale", "recordedAt": at(1), "shard": 0})
    ledger.document("z0").set({"provider": "azure", "outcome": "applied", "recordedAt": at(0, 10), "shard": 0})
    firestore.collection("duplicates").document("d0").set({"provider": "azure", "at": at(1)})
    firestore.collection("deadletters").document("x0").set({"provider": "aws", "firstSeen": at(2)})
    written = trends.record(firestore, ("aws", "azure"), now, 60)
    assert len(written) == trends.CATCH_UP + 1  # five minutes completed, and the current one so far
    assert trends.record(firestore, ("aws", "azure"), now, 60) == []  # nothing due again
    doc = firestore.collection("trends").document(trends.doc_id(m - timedelta(minutes=2))).get().to_dict()
    assert doc["complete"] and doc["providers"] == {
        "aws": {"applied": 3, "stale": 0, "duplicate": 0, "deadlettered": 1}}
    since = (m - timedelta(minutes=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = api.get(f"/v1/trends?since={since}&step=60").json
    assert [b["applied"] for b in body["buckets"]] == [0, 3, 0, 1]
    assert [b["received"] for b in body["buckets"]] == [0, 4, 2, 1]
    assert body["buckets"][1]["providers"]["aws"]["deadlettered"] == 1
    assert body["providers"] == ["aws", "azure"]
    two = api.get(f"/v1/trends?since={since}&step=120").json
    assert [b["received"] for b in two["buckets"]] == [4, 3]
    only = api.get(f"/v1/trends?since={since}&provider=azure").json
    assert [b["received"] for b in only["buckets"]] == [0, 0, 1, 1]
    # the current minute's document holds the minute before's final counts: a reader that keeps up reads one
    current = api.get(f"/v1/trends?since={m.strftime('%Y-%m-%dT%H:%M:%SZ')}").json
    assert len(current["buckets"]) == 1 and current["buckets"][0]["applied"] == 1
    assert current["before"]["received"] == 2 and current["before"]["providers"]["aws"]["stale"] == 1
    assert current["before"]["at"] == (m - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S.000000Z")


def test_the_current_minute_is_written_again_at_the_summarys_pace():
    m = datetime(2026, 3, 1, 10, 0, tzinfo=timezone.utc)
    done = {m - timedelta(minutes=i): trends.Written(m - timedelta(minutes=i), m - timedelta(minutes=i - 1))
            for i in range(1, trends.CATCH_UP + 1)}
    assert trends.due(m + timedelta(seconds=20), {**done, m: trends.Written(m, m + timedelta(seconds=5))}, 30) == []
    assert trends.due(m + timedelta(seconds=40), {**done, m: trends.Written(m, m + timedelta(seconds=5))}, 30) == [
        (m, m + timedelta(seconds=40))]
    left_open = {**done, m - timedelta(minutes=1): trends.Written(m - timedelta(minutes=1), m - timedelta(seconds=20))}
    assert trends.due(m + timedelta(seconds=1), left_open, 30) == [(m - timedelta(minutes=1), m),
                                                                    (m, m + timedelta(seconds=1))]


T0 = datetime(2026, 3, 1, 10, 0, tzinfo=timezone.utc)  # the trends' minute below (any past minute will do)


def _at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _entry(db, name: str, provider: str, outcome: str, seconds: float) -> None:
    db.collection("events").document(name).set(
        {"provider": provider, "outcome": outcome, "recordedAt": _at(seconds), "shard": len(name) % 30})


class CountingCounts:
    """The client's Firestore API with its aggregation queries counted (one RPC each)."""

    def __init__(self, api, tally: list):
        self.api, self.tally = api, tally

    def __getattr__(self, name):
        return getattr(self.api, name)

    def run_aggregation_query(self, *args, **kwargs):
        self.tally.append(1)  # (from the counting threads: list.append is atomic)
        return self.api.run_aggregation_query(*args, **kwargs)


def test_a_trends_tick_counts_per_provider_only_what_moved_since_the_minutes_counts(firestore):
    """Issue 42: a window's 4 totals over every provider first; an idle window (nothing in it, or the same
    applied / stale totals as its stored counts) costs those 4 and no per-provider count; a change is counted
    per provider, one count per provider for its kind only, a late commit into the minute completed included."""
    tally: list = []
    firestore._firestore_api_internal = CountingCounts(firestore._firestore_api, tally)
    providers = ("aws", "azure", "vmware")
    _entry(firestore, "a1", "aws", "applied", 2)
    firestore.collection("duplicates").document("d1").set({"provider": "azure", "at": _at(-90)})

    def tick(seconds: float) -> tuple[int, dict]:
        del tally[:]
        trends.record(firestore, providers, T0 + timedelta(seconds=seconds), 5)
        return len(tally), firestore.document(f"trends/{trends.doc_id(T0)}").get().to_dict()

    first, _ = tick(10)  # 6 windows (5 completed, the current), 4 totals each; duplicate (m-2), applied (m)
    assert first == 6 * 4 + 3 + 3
    aws = {"aws": {"applied": 1, "stale": 0, "duplicate": 0, "deadlettered": 0}}
    n, doc = tick(20)
    assert n == 4 and doc["providers"] == aws  # idle: the totals only, the counts kept
    _entry(firestore, "a2", "azure", "applied", 5)  # committed late: before the stored counts' end
    n, doc = tick(30)
    assert n == 4 + 3 and doc["providers"] == {**aws, "azure": {**aws["aws"]}}  # applied counted again, alone
    assert tick(40)[0] == 4
    _entry(firestore, "s1", "vmware", "stale", 55)  # late into the minute the next tick completes
    n, doc = tick(61)  # the minute completed (stale moved: 3), the new one (nothing in it: its 4 totals)
    assert n == 4 + 3 + 4 and doc["complete"] and doc["providers"]["vmware"]["stale"] == 1
    assert doc["providers"]["aws"]["applied"] == doc["providers"]["azure"]["applied"] == 1
    after = firestore.document(f"trends/{trends.doc_id(T0 + timedelta(minutes=1))}").get().to_dict()
    assert after["providers"] == {} and after["previous"] == doc["providers"]


def test_trends_kept_without_a_recount_equal_a_full_recount_whatever_moved(firestore):
    """The skip is exact: after every tick the stored minute equals every provider's every count taken again
    (the way before issue 42), through what an equal total could hide: a dead letter deleted as another
    provider's came, a duplicate's record rewritten out of the minute as another's came, a provider added to
    those counted, an entry of a provider not counted, and late commits into the part already counted."""
    providers = ["aws", "azure"]
    dead, dups = firestore.collection("deadletters"), firestore.collection("duplicates")
    steps = [
        lambda: _entry(firestore, "a1", "aws", "applied", 1),
        lambda: dead.document("x1").set({"provider": "aws", "firstSeen": _at(3)}),
        lambda: (dead.document("x1").delete(), dead.document("x2").set({"provider": "azure", "firstSeen": _at(4)})),
        lambda: dups.document("d1").set({"provider": "aws", "at": _at(6)}),
        lambda: (dups.document("d1").set({"provider": "aws", "at": _at(70)}),
                 dups.document("d2").set({"provider": "azure", "at": _at(7)})),
        lambda: providers.append("vmware"),  # its entry was there before it was counted
        lambda: _entry(firestore, "a9", "gcp", "applied", 2),  # not a provider counted: in the total only
        lambda: (_entry(firestore, "a2", "azure", "applied", 1), _entry(firestore, "s1", "aws", "stale", 2)),
    ]
    _entry(firestore, "v1", "vmware", "applied", 0.5)
    for i, step in enumerate([lambda: None] + steps + [lambda: None]):
        step()
        now = T0 + timedelta(seconds=10 + 5 * i)
        trends.record(firestore, providers, now, 5)
        full = trends.per_provider(aggregates.counts(trends.queries(firestore, providers, T0, now)))
        stored = firestore.document(f"trends/{trends.doc_id(T0)}").get().to_dict()
        assert stored["providers"] == full, (i, stored["providers"], full)
    assert full["vmware"]["applied"] == 1 and full["azure"] == {"applied": 1, "stale": 0, "duplicate": 1,
                                                                "deadlettered": 1}


@pytest.mark.parametrize("query, parameter", [
    ("since=yesterday", "since"), ("since=2999-01-01T00:00:00Z", "since"), ("since=40d", "since"),
    ("step=90", "step"), ("step=30", "step"), ("since=7d&step=60", "step"), ("stepp=60", "stepp"),
])
def test_bad_trends_requests_are_400_problems(api, query, parameter):
    got = api.get(f"/v1/trends?{query}")
    assert got.status_code == 400 and got.json["parameter"] == parameter, got.json


class CountingReads:
    """The client's Firestore API with the documents its queries return counted (Firestore bills one read per
    document a query returns, and at least one per query)."""

    def __init__(self, api, tally: dict):
        self.api, self.tally = api, tally

    def __getattr__(self, name):
        return getattr(self.api, name)

    def run_query(self, *args, **kwargs):
        self.tally["queries"] += 1
        for response in self.api.run_query(*args, **kwargs):
            if response.document and response.document.name:
                self.tally["documents"] += 1
            yield response


def test_a_usage_call_reads_every_transition_once_whatever_the_window_and_nothing_while_kept(usage, firestore):
    """The cost of one call (docs/cost.md "Usage and trends"): every stored transition document once, in pages
    of 1,000 (here one page), whatever the window's days, the ``by`` or the rows; a call for a window the
    instance computed less than 5 minutes ago reads nothing."""
    tally = {"queries": 0, "documents": 0}
    firestore._firestore_api_internal = CountingReads(firestore._firestore_api, tally)
    stored = sum(len(steps) for steps in FLEET.values())
    usage.get(f"/v1/usage?from={D1}&to={D3}&by=resource")
    assert tally == {"queries": 1, "documents": stored}
    usage.get(f"/v1/usage?from={D1}&to={D3}&by=tenant&format=csv&rates=example")
    assert tally == {"queries": 1, "documents": stored}  # kept: another by, a rate card, CSV read nothing
    usage.get("/v1/usage?from=2026-01-01&to=2026-04-01&by=provider")  # 90 days: the same documents, once
    assert tally == {"queries": 2, "documents": 2 * stored}
    print(f"\n/v1/usage: {stored} transitions stored -> {stored} reads a computation, 2 days or 90; 0 while kept")
