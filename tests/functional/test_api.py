"""The status API through functions-framework's test client, on the Firestore emulator.

Every answer is checked against the OpenAPI document (openapi-core) by the ``api``
fixture: a response the document does not describe fails the test that got it.
"""

from __future__ import annotations

import base64
import os
import time
from datetime import timedelta
from pathlib import Path

import orjson
import pytest
from dcm_status_contracts import status_update, timeutil
from dcm_status_contracts.change_feed import Cursor
from dcm_status_contracts.errors import Gone
from dcm_status_contracts.model import PubSubMessage
from dcm_status_contracts.pubsub_binding import to_message
from dcm_status_contracts.status_report import build_event
from google.cloud import firestore as gfirestore
from google.cloud.firestore_v1.base_query import FieldFilter

from infra.local import emulators
from shared.api import app as api_app
from shared.api import queries
from shared.api.feed import ChangeFeed, FeedFilter
from shared.ingest.normalize import normalize_message
from shared.runtime import settings
from shared.state import aggregates, snapshots
from shared.state.documents import SHARDS
from shared.upsert.store import StateStore
from tests.fakes import runtime_of
from tests.functional.conftest import PROJECT, bind_all
from tests.samples import SCHEMAS


def seed(db, provider: str, rtype: str, rid: str, status: str, time: str, event_id: str,
         resource_specific: dict | None = None, shards: int = SHARDS, **metadata: str):
    data, attrs = to_message(build_event(provider, rtype, rid, status, f"{status.lower()} now",
                                                event_id=event_id, time=time, last_transition_time=time,
                                                metadata=metadata or None, resource_specific=resource_specific))
    message = PubSubMessage(data, attrs, f"in-{event_id}", time, f"dcm-status-ingress-{provider}")
    update = status_update.from_bytes(status_update.to_bytes(normalize_message(message, settings.from_env())))
    return StateStore(db, shards=shards).apply(update)


@pytest.fixture
def fleet(firestore):
    rows = [("aws", "vm", "i-1", "RUNNING", {"tenant": "acme"}), ("aws", "vm", "i-2", "STOPPED", {"tenant": "acme"}),
            ("aws", "vm", "i-3", "RUNNING", {"tenant": "zeta"}), ("aws", "container", "c-1", "Running", {}),
            ("azure", "vm", "web-1", "RUNNING", {}), ("azure", "vm", "web-2", "FAILED", {"tenant": "acme"}),
            ("kubernetes", "cluster", "k-1", "ACTIVE", {})]
    for n, (p, t, i, s, m) in enumerate(rows):
        seed(firestore, p, t, i, s, f"2026-03-01T10:00:0{n}Z", f"e{n}", **m)
    return rows


def test_the_resource_list_pages_through_every_resource_once_in_key_order(api, fleet):
    seen, token = [], None
    while True:
        body = api.get("/v1/resources?pageSize=3" + (f"&pageToken={token}" if token else "")).json
        assert body["total"] == 7
        seen += [r["key"] for r in body["resources"]]
        token = body["nextPageToken"]
        if token is None:
            break
    assert seen == sorted(f"{p}/{t}/{i}" for p, t, i, *_ in fleet)


def test_the_resource_list_filters_searches_sorts_and_counts(api, fleet):
    keys = lambda q: [r["key"] for r in api.get(f"/v1/resources?{q}").json["resources"]]  # noqa: E731
    assert keys("provider=azure") == ["azure/vm/web-1", "azure/vm/web-2"]
    assert keys("type=vm&status=RUNNING") == ["aws/vm/i-1", "aws/vm/i-3", "azure/vm/web-1"]
    assert keys("label=tenant:acme") == ["aws/vm/i-1", "aws/vm/i-2", "azure/vm/web-2"]
    assert keys("q=web") == ["azure/vm/web-1", "azure/vm/web-2"]
    assert keys("provider=aws&q=i-") == ["aws/vm/i-1", "aws/vm/i-2", "aws/vm/i-3"]
    assert keys("sort=-updatedAt&pageSize=2") == ["kubernetes/cluster/k-1", "azure/vm/web-2"]
    body = api.get("/v1/resources?type=vm&withCounts=true").json
    assert body["total"] == 5 and body["counts"] == {"RUNNING": 3, "STOPPED": 1, "FAILED": 1}
    assert "counts" not in api.get("/v1/resources").json


def _summary_saw(db, by_type: dict) -> None:
    """A fleet summary snapshot that saw these statuses (as the sweep writes it)."""
    _, read_as = snapshots.read(db, snapshots.SnapshotKind.SUMMARY)
    snapshots.store(db, snapshots.SnapshotKind.SUMMARY, {"total": 0, "byType": by_type, "byProvider": {},
                                                 "silentProviders": [], "asOf": timeutil.now_str()}, 60, read_as, "test")


def _counted_statuses(monkeypatch) -> list:
    counted: list = []
    real = queries.count_later

    def spy(query, options=None):
        counted.append([f.value.string_value for f in _filters(query) if f.field.field_path == "status"])
        return real(query, options)
    monkeypatch.setattr(queries, "count_later", spy)
    return counted


def _filters(query) -> list:
    where = query._to_protobuf().where
    found = [where.field_filter] if where.field_filter.field.field_path else []
    return found + [f.field_filter for f in where.composite_filter.filters]


def test_a_lists_counts_per_status_count_the_statuses_the_summary_saw_and_only_those(api, fleet, firestore,
                                                                                     monkeypatch):
    _summary_saw(firestore, {"vm": {"RUNNING": 3, "STOPPED": 1, "FAILED": 1}, "container": {"Running": 1}})
    counted = _counted_statuses(monkeypatch)
    body = api.get("/v1/resources?type=vm&withCounts=true").json
    assert body["total"] == 5 and body["counts"] == {"RUNNING": 3, "STOPPED": 1, "FAILED": 1}
    assert sorted(s for c in counted for s in c) == ["FAILED", "RUNNING", "STOPPED"]  # + the total, no others
    assert len(counted) == 4
    counted.clear()
    body = api.get("/v1/resources?provider=aws&status=RUNNING&withCounts=true").json
    assert body["counts"] == {"RUNNING": 3} and len(counted) == 1  # the total is the status's count


def test_a_status_the_summary_had_not_seen_yet_is_counted_all_the_same(api, fleet, firestore, monkeypatch):
    _summary_saw(firestore, {"vm": {"RUNNING": 3}})  # STOPPED and FAILED came after it
    counted = _counted_statuses(monkeypatch)
    body = api.get("/v1/resources?type=vm&withCounts=true").json
    assert body["total"] == 5 and body["counts"] == {"RUNNING": 3, "STOPPED": 1, "FAILED": 1}
    assert counted == [[], ["RUNNING"]]  # started beside the page: the total and RUNNING; the rest after


def test_a_search_pages_by_resource_id(api, fleet):
    first = api.get("/v1/resources?q=i-&pageSize=2").json
    rest = api.get(f"/v1/resources?q=i-&pageSize=2&pageToken={first['nextPageToken']}").json
    assert [r["resourceId"] for r in first["resources"] + rest["resources"]] == ["i-1", "i-2", "i-3"]
    assert rest["nextPageToken"] is None and first["total"] == 3


def test_one_resource_now_at_a_time_and_its_history(api, firestore):
    seed(firestore, "aws", "vm", "h-1", "PROVISIONING", "2026-03-01T10:00:00Z", "h1")
    between = timeutil.now_str()
    seed(firestore, "aws", "vm", "h-1", "RUNNING", "2026-03-01T10:05:00Z", "h2")
    seed(firestore, "aws", "vm", "h-1", "STOPPED", "2026-03-01T10:10:00Z", "h3")
    assert api.get("/v1/resources/aws/vm/h-1").json["status"] == "STOPPED"
    at = api.get(f"/v1/resources/aws/vm/h-1?at={between}").json
    assert at["state"]["status"] == "PROVISIONING" and at["key"] == "aws/vm/h-1"
    assert api.get("/v1/resources/aws/vm/h-1?at=2020-01-01T00:00:00Z").status_code == 404
    page = api.get("/v1/resources/aws/vm/h-1/history?pageSize=2").json
    assert [e["status"] for e in page["entries"]] == ["STOPPED", "RUNNING"]
    rest = api.get(f"/v1/resources/aws/vm/h-1/history?pageSize=2&pageToken={page['nextPageToken']}").json
    assert [e["status"] for e in rest["entries"]] == ["PROVISIONING"] and rest["nextPageToken"] is None
    assert api.get("/v1/resources/aws/vm/nope/history").status_code == 404


def test_history_and_at_read_the_resources_ledger_entries_that_carry_history(api, firestore):
    """Issue 32: history is the ledger entries of the resource with the history fields: a re-report's entry
    (no history), another resource's entries and the ledger's own fields stay out of it; pages cover every
    entry once; ?at= skips a stale entry recorded later than what it answers."""
    seed(firestore, "aws", "vm", "h-1", "PROVISIONING", "2026-03-01T10:00:00Z", "h1")
    seed(firestore, "aws", "vm", "h-2", "RUNNING", "2026-03-01T10:00:00Z", "other")
    seed(firestore, "aws", "vm", "h-1", "RUNNING", "2026-03-01T10:05:00Z", "h2")
    between = timeutil.now_str()
    assert seed(firestore, "aws", "vm", "h-1", "RUNNING", "2026-03-01T10:05:00Z", "h3").outcome == "unchanged"
    assert seed(firestore, "aws", "vm", "h-1", "STOPPED", "2026-03-01T10:01:00Z", "h0").outcome == "stale"
    seen, token = [], None
    while True:
        page = api.get("/v1/resources/aws/vm/h-1/history?pageSize=1" + (f"&pageToken={token}" if token else "")).json
        seen += page["entries"]
        token = page["nextPageToken"]
        if token is None:
            break
    assert [(e["eventId"], e["outcome"]) for e in seen] == [("h2", "applied"), ("h0", "stale"), ("h1", "applied")]
    assert all(not {"key", "change", "processedAt", "ingressMessageId", "committedAt"} & set(e) for e in seen)
    assert seen[1]["previousStatus"] == "RUNNING" and seen[0]["previousStatus"] == "PROVISIONING"
    assert api.get(f"/v1/resources/aws/vm/h-1?at={between}").json["state"]["eventId"] == "h2"
    assert api.get(f"/v1/resources/aws/vm/h-1?at={timeutil.now_str()}").json["state"]["eventId"] == "h2"


def test_a_resource_id_with_slashes_is_reached_percent_encoded(api, firestore):
    # OpenAPI path templates cannot match '/', so this one is not checked against the document.
    seed(firestore, "kubevirt", "vm", "ns/vm-1", "RUNNING", "2026-03-01T10:00:00Z", "s1")
    assert api.client.get("/v1/resources/kubevirt/vm/ns%2Fvm-1").json["key"] == "kubevirt/vm/ns/vm-1"
    assert len(api.client.get("/v1/resources/kubevirt/vm/ns%2Fvm-1/history").json["entries"]) == 1


def test_the_change_feed_serves_every_change_once_in_commit_order(api, firestore):
    for n, status in enumerate(["PROVISIONING", "RUNNING", "STOPPED"]):
        seed(firestore, "aws", "vm", "f-1", status, f"2026-03-01T10:0{n}:00Z", f"f{n}")
    seed(firestore, "azure", "vm", "f-2", "RUNNING", "2026-03-01T10:00:00Z", "g0")
    seed(firestore, "aws", "vm", "f-1", "STOPPED", "2026-03-01T10:02:00Z", "f2-again")  # a re-report: no change
    first = api.get("/v1/changes?limit=2").json
    rest = api.get(f"/v1/changes?after={first['nextCursor']}").json
    changes = first["changes"] + rest["changes"]
    assert [(c["key"], c["oldStatus"], c["newStatus"]) for c in changes] == [
        ("aws/vm/f-1", None, "PROVISIONING"), ("aws/vm/f-1", "PROVISIONING", "RUNNING"),
        ("aws/vm/f-1", "RUNNING", "STOPPED"), ("azure/vm/f-2", None, "RUNNING")]
    assert len({c["id"] for c in changes}) == 4
    assert {"attribute": "/status", "old": "RUNNING", "new": "STOPPED"} in changes[2]["changes"]
    assert changes[2]["resource"]["status"] == "STOPPED"
    assert api.get(f"/v1/changes?after={rest['nextCursor']}").json["changes"] == []
    seed(firestore, "azure", "vm", "f-2", "FAILED", "2026-03-01T10:09:00Z", "g1")
    [new] = api.get(f"/v1/changes?after={rest['nextCursor']}").json["changes"]
    assert new["newStatus"] == "FAILED"
    assert [(c["key"], c["newStatus"]) for c in api.get("/v1/changes?last=2").json["changes"]] == [
        ("azure/vm/f-2", "RUNNING"), ("azure/vm/f-2", "FAILED")]
    assert [c["key"] for c in api.get("/v1/changes?provider=azure").json["changes"]] == ["azure/vm/f-2"] * 2
    assert [c["newStatus"] for c in api.get("/v1/changes?status=RUNNING").json["changes"]] == ["RUNNING"] * 2


def test_a_late_update_is_in_the_feed_marked_late(api, firestore):
    seed(firestore, "aws", "vm", "l-1", "RUNNING", "2026-03-01T10:05:00Z", "l1")
    seed(firestore, "aws", "vm", "l-1", "PROVISIONING", "2026-03-01T10:00:00Z", "l0")
    changes = api.get("/v1/changes").json["changes"]
    assert [(c["newStatus"], c["late"]) for c in changes] == [("RUNNING", False), ("PROVISIONING", True)]


def test_the_feed_serves_a_change_only_once_it_has_settled(firestore):
    seed(firestore, "aws", "vm", "s-1", "RUNNING", "2026-03-01T10:00:00Z", "s1")
    page = ChangeFeed(firestore, 7, settle=60).page()
    assert page["changes"] == []
    # ...and the cursor it gives does not pass the unsettled change: served once settled.
    later = ChangeFeed(firestore, 7, settle=0).page(Cursor.decode(page["nextCursor"]))
    assert [c["key"] for c in later["changes"]] == ["aws/vm/s-1"]


def test_a_cursor_resumes_after_hours_and_expires_with_the_ledger(firestore):
    seed(firestore, "aws", "vm", "r-1", "RUNNING", "2026-03-01T10:00:00Z", "r1")
    [change] = ChangeFeed(firestore, 7, settle=0).page()["changes"]
    cursor = Cursor.decode(change["cursor"])
    seed(firestore, "aws", "vm", "r-1", "STOPPED", "2026-03-01T10:05:00Z", "r2")
    in_five_hours = lambda: timeutil.now() + timedelta(hours=5)  # noqa: E731
    [resumed] = ChangeFeed(firestore, 7, settle=0, clock=in_five_hours).page(cursor)["changes"]
    assert resumed["newStatus"] == "STOPPED"
    in_eight_days = lambda: timeutil.now() + timedelta(days=8)  # noqa: E731
    with pytest.raises(Gone):
        ChangeFeed(firestore, 7, settle=0, clock=in_eight_days).page(cursor)


def test_the_stream_sends_the_changes_after_its_cursor_then_says_ready(api, firestore):
    seed(firestore, "aws", "vm", "t-1", "RUNNING", "2026-03-01T10:00:00Z", "t1")
    start = api.get("/v1/changes").json["nextCursor"]
    seed(firestore, "aws", "vm", "t-1", "STOPPED", "2026-03-01T10:05:00Z", "t2")
    response = api.get("/v1/changes/stream", headers={"Last-Event-ID": start})
    assert response.mimetype == "text/event-stream" and response.status_code == 200
    events = [block for block in response.get_data(as_text=True).split("\n\n") if "event:" in block]
    assert [e.split("event: ")[1].split("\n")[0] for e in events] == ["change", "ready"]
    change = orjson.loads(events[0].split("data: ", 1)[1])
    assert change["newStatus"] == "STOPPED" and f"id: {change['cursor']}" in events[0]


def test_providers_say_which_report_which_went_silent_and_since_when(api, fleet, firestore):
    firestore.document("providers/azure").set({"provider": "azure", "state": "SILENT",
                                               "since": "2026-03-01T11:15:00.000000Z",
                                               "lastSeenAt": "2026-03-01T10:00:05.000000Z"})
    got = {p["provider"]: p for p in api.get("/v1/providers").json["providers"]}
    assert tuple(got) == settings.from_env().providers  # every provider of the topology, in its order
    assert (got["azure"]["state"], got["azure"]["since"], got["azure"]["resources"]) == (
        "SILENT", "2026-03-01T11:15:00.000000Z", 2)
    assert (got["aws"]["state"], got["aws"]["resources"]) == ("REPORTING", 4)
    assert (got["vmware"]["state"], got["vmware"]["resources"]) == ("UNSEEN", 0)
    assert got["aws"]["deadlineSeconds"] == 3600 + 900  # topology.yaml's freshness
    assert api.get("/v1/summary").json["silentProviders"] == [
        {"provider": "azure", "since": "2026-03-01T11:15:00.000000Z", "lastSeenAt": "2026-03-01T10:00:05.000000Z"}]
    assert api.get("/v1/providers?x=1").status_code == 400


def test_stats_count_history_entries_of_the_window_only(api, firestore):
    """An applied or stale update's ledger entry has no TTL (it is history): /v1/stats counts those recorded
    within its window (DCM_LEDGER_TTL_DAYS), as it counted them while the TTL deleted older ones."""
    seed(firestore, "aws", "vm", "w-1", "RUNNING", "2026-03-01T10:00:00Z", "w1")
    seed(firestore, "aws", "vm", "w-1", "STOPPED", "2026-03-01T10:05:00Z", "w2")
    seed(firestore, "aws", "vm", "w-1", "PAUSED", "2026-03-01T09:00:00Z", "w0")  # stale
    seed(firestore, "aws", "vm", "w-2", "RUNNING", "2026-03-01T10:00:00Z", "w3", shards=3)
    stats = api.get("/v1/stats").json
    assert (stats["applied"], stats["stale"], stats["windowDays"]) == (3, 1, 7)
    old = timeutil.format(timeutil.now() - timedelta(days=8))
    for entry in firestore.collection("events").where(filter=FieldFilter("eventId", "in", ["w1", "w0"])).stream():
        entry.reference.update({"recordedAt": old, "processedAt": old})
    stats = aggregates.stats(firestore, window_days=7)  # counted again (the api serves the sweep's snapshot)
    assert (stats["applied"], stats["stale"], stats["received"]) == (2, 0, 2)


def test_fleet_summary_stats_and_dead_letters(api, fleet, firestore):
    summary = api.get("/v1/summary").json
    assert summary["total"] == 7
    assert summary["byType"]["vm"] == {"RUNNING": 3, "STOPPED": 1, "FAILED": 1}
    assert summary["byType"]["container"] == {"RUNNING": 1} and summary["byType"]["cluster"] == {"ACTIVE": 1}
    assert summary["byProvider"] == {"aws": 4, "azure": 2, "kubernetes": 1}
    stats = api.get("/v1/stats").json
    assert stats["applied"] == 7 and stats["resources"] == 7 and stats["received"] == 7
    firestore.collection("deadletters").document("d1").set({
        "fingerprint": "fp", "reason": "schema_invalid", "provider": "aws", "message": "/status: required",
        "occurrences": 3, "state": "open", "firstSeen": "2026-03-01T10:00:00.000000Z",
        "lastSeen": "2026-03-01T11:00:00.000000Z"})
    dead = api.get("/v1/deadletters").json
    assert dead["total"] == 1 and dead["byReason"] == {"schema_invalid": 1}
    assert dead["groups"][0]["occurrences"] == 3 and dead["groupsOf"] == 1
    assert api.get("/v1/deadletters?provider=azure").json["total"] == 0


def test_the_dashboard_and_the_openapi_document_are_served(api):
    page = api.get("/")
    assert page.status_code == 200 and page.mimetype == "text/html"
    assert api.get("/assets/app.js").mimetype == "text/javascript"
    assert api.get("/assets/nope.js").status_code == 404
    doc = api.get("/v1/openapi.json").json
    assert doc["openapi"].startswith("3.1") and "/v1/changes" in doc["paths"]


@pytest.mark.parametrize("path, status, parameter", [
    ("/v1/resources?pageSize=0", 400, "pageSize"),
    ("/v1/resources?pageSize=abc", 400, "pageSize"),
    ("/v1/resources?pageToken=bm9wZQ", 400, "pageToken"),
    ("/v1/resources?stauts=RUNNING", 400, "stauts"),
    ("/v1/resources?provider=aws&provider=azure", 400, "provider"),
    ("/v1/resources?label=owner:me", 400, "label"),
    ("/v1/resources?sort=name", 400, "sort"),
    ("/v1/resources?withCounts=maybe", 400, "withCounts"),
    ("/v1/resources?q=", 400, "q"),
    ("/v1/resources/aws/vm/nope", 404, None),
    ("/v1/resources/aws/vm/i-1?at=yesterday", 400, "at"),
    ("/v1/resources/aws/vm/" + "x" * 1600, 400, "id"),
    ("/v1/changes?after=%%%", 400, "after"),
    ("/v1/changes?after=" + base64.urlsafe_b64encode(b'["not a time","x"]').decode(), 400, "after"),
    ("/v1/changes?after=" + Cursor.after(timeutil.parse("2020-01-01T00:00:00Z")).encode(), 410, "after"),
    ("/v1/changes?last=5&after=RECENT", 400, "last"),  # RECENT: a cursor of now (the ids stay the same)
    ("/v1/changes?limit=5000", 400, "limit"),
    ("/v1/nothing", 404, None),
])
def test_a_bad_request_is_a_problem_naming_the_parameter(api, path, status, parameter):
    response = api.client.get(path.replace("=RECENT", "=" + Cursor.after(timeutil.now()).encode()))
    assert response.status_code == status and response.mimetype == "application/problem+json"
    assert response.json.get("parameter") == parameter and response.json["detail"]


def test_a_method_a_path_does_not_take_is_a_405_saying_which_it_takes(api):
    response = api.client.post("/v1/resources", json={})
    assert response.status_code == 405 and response.headers["Allow"] == "GET, HEAD"
    response = api.client.put("/v1/callbacks")
    assert response.status_code == 405 and response.headers["Allow"] == "GET, HEAD, POST"


def test_an_expired_cursor_on_the_stream_is_a_problem_not_a_stream(api):
    old = Cursor.after(timeutil.parse("2020-01-01T00:00:00Z")).encode()
    response = api.client.get("/v1/changes/stream", headers={"Last-Event-ID": old})
    assert response.status_code == 410 and response.json["parameter"] == "Last-Event-ID"


def test_firestore_down_is_a_503_with_retry_after(client, monkeypatch, tmp_path):
    dead_port = emulators.free_port()
    monkeypatch.setattr(api_app, "READ_OPTIONS", {"retry": None, "timeout": 1.0})
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{dead_port}")
    db = gfirestore.Client(project=PROJECT)
    bind_all(runtime_of(firestore=db, DCM_PROJECT=PROJECT))
    response = client.get("/v1/summary")
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    assert response.mimetype == "application/problem+json"


def test_feed_filter_matches_what_the_query_filters(firestore):
    item = {"provider": "aws", "resourceType": "vm", "newStatus": "RUNNING"}
    assert FeedFilter("aws", "vm", "RUNNING").matches(item) and FeedFilter().matches(item)
    assert not FeedFilter(provider="azure").matches(item) and not FeedFilter(status="STOPPED").matches(item)


def test_the_openapi_document_in_the_repo_is_valid_openapi_3_1():
    from openapi_spec_validator import validate
    doc = orjson.loads(Path(SCHEMAS / "openapi" / "status-api-v1.json").read_bytes())
    validate(doc)
    assert doc["openapi"] == "3.1.0" and os.path.basename(api_app.OPENAPI_FILE) == "status-api-v1.json"


def test_a_change_committed_just_before_a_stream_opens_arrives_once_it_settles(firestore):
    """Neither the listener (it predates it) nor the first settled read (not settled yet) sends it:
    the stream reads the settled feed again one settle time after it opens, not 30 s later."""
    from shared.api.feed import Live, stream
    before = Cursor.after(timeutil.now())
    seed(firestore, "aws", "vm", "j-1", "RUNNING", "2026-03-01T10:00:00Z", "j1")
    started = time.monotonic()
    arrived = None
    for chunk in stream(ChangeFeed(firestore, 7, settle=1.0), Live(firestore), before, FeedFilter(), duration=6):
        if b"event: change" in chunk and b"aws/vm/j-1" in chunk:
            arrived = time.monotonic() - started
            break
    assert arrived is not None and arrived < 4, arrived


def test_firestore_going_away_mid_stream_ends_the_stream_cleanly():
    """The stream ends (EventSource resumes from its last event id); the listener is released."""
    from google.api_core import exceptions as gexc

    from shared.api.feed import stream

    class DownFeed:
        settle, retention_days, clock = 1.0, 7, staticmethod(timeutil.now)

        def page(self, *args, **kwargs):
            raise gexc.ServiceUnavailable("connection refused")

    class CountingLive:
        seq, last_activity, streams = 0, 0.0, 0

        def opened(self):
            self.streams += 1

        def closed(self):
            self.streams -= 1

    live = CountingLive()
    chunks = list(stream(DownFeed(), live, None, FeedFilter(), duration=5))
    assert len(chunks) == 1 and chunks[0].startswith(b": dcm-status change feed") and live.streams == 0
