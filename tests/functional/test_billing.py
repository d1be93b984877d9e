"""Billing's record of every change on the Firestore emulator: upsert writes the change's transition in the commit
of its ledger entry (issue 40: one more write of that commit, nothing else), and the report's enumeration of
resources from the transitions alone (a collection-group query): a tenant move split between the tenants, a late
change correcting counted usage, documents written before this layout still counted. And through the in-process
pipeline (tests/pipeline.py: the subscriptions as topology.yaml declares them), billing's known fleet shuffled and
duplicated gives exact resource hours, a provider's reports reach the transitions and audit, and billing keeps
the daily usage snapshot on the sweep's ticks (moved from tests/e2e, issue 41: nothing in them needs the local
stack).

Firestore operations are counted where the client sends them (the commit, query and get RPCs), so nothing is
assumed about how the code batches its calls.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timezone
from typing import Any

import pytest
from dcm_status_contracts import status_update as status_update_contract
from dcm_status_contracts import timeutil
from dcm_status_contracts.model import ResourceKey
from dcm_status_contracts.status_update import StatusUpdate
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.state.usage import report as billing_report
from shared.billing.store import BILLING_RESOURCES, TRANSITIONS, BillingStore
from tests import billing_fleet as fleet
from tests.billing_fleet import D1, D2, H, NORMALIZED, status_update
from tests.functional.conftest import post_push

START, END = "2026-03-01T00:00:00Z", "2026-03-03T00:00:00Z"


class CountingApi:
    """The client's Firestore API with its RPCs counted: commits, documents written, queries, gets."""

    def __init__(self, api, tally: Counter):
        self.api, self.tally = api, tally

    def __getattr__(self, name):
        return getattr(self.api, name)

    def commit(self, request=None, **kwargs):
        writes = request["writes"] if isinstance(request, dict) else request.writes
        self.tally["commits"] += 1
        self.tally["writes"] += len(writes)
        self.tally["written"] = [*(self.tally.get("written") or []), *(w.update.name.split("/documents/")[-1] for w in writes)]
        return self.api.commit(request=request, **kwargs)

    def run_query(self, *args, **kwargs):
        self.tally["queries"] += 1
        return self.api.run_query(*args, **kwargs)

    def run_aggregation_query(self, *args, **kwargs):
        self.tally["queries"] += 1
        return self.api.run_aggregation_query(*args, **kwargs)

    def batch_get_documents(self, *args, **kwargs):
        self.tally["gets"] += 1
        return self.api.batch_get_documents(*args, **kwargs)


@pytest.fixture
def rpcs(firestore) -> Counter:
    """Every Firestore RPC of this test's client, counted (the functions are bound to that client)."""
    tally: Counter = Counter(written=[])
    firestore._firestore_api_internal = CountingApi(firestore._firestore_api, tally)
    return tally


def lifecycle(key: str, steps: list[tuple[str, str, dict[str, str]]],
              late: list[tuple[str, str, dict[str, str]]] = ()) -> list[StatusUpdate]:
    """The status updates of ``steps`` (time order: upsert announces each with the one before as its old side),
    then of ``late`` (refused as stale for the current state: announced late, no old side)."""
    k = ResourceKey.parse(key)
    return ([status_update(k, status, at, f"{k.resource_id}-{i}", metadata) for i, (at, status, metadata) in enumerate(steps)]
            + [status_update(k, status, at, f"{k.resource_id}-late-{i}", metadata)
               for i, (at, status, metadata) in enumerate(late)])


def deliver(upsert, updates: list[StatusUpdate]) -> None:
    """Each update to upsert on its provider's lane, as ingest publishes it (a copy of one is a redelivery of the
    same message: same message id)."""
    for u in updates:
        body = status_update_contract.to_bytes(u)
        lane = NORMALIZED.format(provider=u.key.provider)
        assert post_push(upsert, lane, body, {}, message_id=f"n-{u.event_id}").status_code == 200


def transitions_of(db, key: str):
    return db.collection(BILLING_RESOURCES).document(ResourceKey.parse(key).doc_id).collection(TRANSITIONS)


def seconds(db, by: str, **kw: Any) -> dict[tuple[str, Any], int | float]:
    rows = billing_report.report(db, kw.pop("start", START), kw.pop("end", END), [by], **kw)
    return {(r["day"], r[by]): r["seconds"] for r in rows}


# ---- the write side: one more write of upsert's commit -------------------------------------------------
def test_a_change_is_recorded_in_the_commit_of_its_ledger_entry_and_nothing_else(upsert, firestore, rpcs):
    acme = {"tenant": "acme"}
    created, started, stop = lifecycle("aws/vm/i-1", [(f"{D1}T09:00:00Z", "PROVISIONING", acme),
                                                      (f"{D1}T10:00:00Z", "RUNNING", acme)],
                                       late=[(f"{D1}T09:30:00Z", "STOPPED", acme)])
    resource = firestore.collection(BILLING_RESOURCES).document(ResourceKey.parse("aws/vm/i-1").doc_id)
    for u, also in ((created, "resources"), (started, "resources"), (stop, None)):  # first sight, a change, a late one
        rpcs.clear()
        rpcs["written"] = []
        deliver(upsert, [u])
        # one commit: the ledger entry, the resource document (not for a late change), and the transition
        assert (rpcs["commits"], rpcs["writes"]) == (1, 3 if also else 2), u.event_id
        assert sorted(w.split("/")[0] for w in rpcs["written"]) == sorted(
            ["billing_resources", "events", *([also] if also else [])])
        assert f"{resource.path}/{TRANSITIONS}/{u.dedup_id}" in rpcs["written"]
    rpcs.clear()
    rpcs["written"] = []
    deliver(upsert, [started])  # a redelivery: upsert finds its ledger entry, announces its change again and marks
    assert (rpcs["commits"], rpcs["writes"]) == (1, 1)  # it so (one write): the transition is not written again
    assert rpcs["written"] == [f"events/{started.dedup_id}"]
    assert sorted(s.id for s in resource.collection(TRANSITIONS).stream()) == sorted(
        u.dedup_id for u in (created, started, stop))
    assert not resource.get().exists  # no parent document: a subcollection needs none
    assert seconds(firestore, "resource") == {(D1, "aws/vm/i-1"): 14 * H, (D2, "aws/vm/i-1"): 24 * H}


def test_a_redelivered_update_leaves_the_same_document(upsert, firestore):
    [u] = lifecycle("aws/vm/i-2", [(f"{D1}T10:00:00Z", "RUNNING", {"tenant": "acme"})])
    deliver(upsert, [u])
    ref = transitions_of(firestore, "aws/vm/i-2").document(u.dedup_id)
    first = ref.get().to_dict()
    assert {first[k] for k in ("eventId", "status", "at")} == {u.dedup_id, "RUNNING", f"{D1}T10:00:00.000000Z"}
    deliver(upsert, [u])
    assert ref.get().to_dict() == first  # not even the time it was recorded moved: it was not written again


def test_not_reported_lately_and_new_outputs_alone_record_no_transition(upsert, firestore, rpcs):
    """The sweep's "not reported lately" (UNKNOWN, NotReported) is no observed state: usage goes on as last known;
    new output maps alone (same status, same transition time) change no usage: upsert commits both changes
    without a transition (as billing recorded none)."""
    from dataclasses import replace

    from shared.sweep.handler import not_reported

    [running] = lifecycle("aws/vm/quiet", [(f"{D1}T10:00:00Z", "RUNNING", {"tenant": "q"})])
    deliver(upsert, [running])
    stored = firestore.collection("resources").document("aws~vm~quiet").get().to_dict()
    rpcs.clear()
    rpcs["written"] = []
    quiet = not_reported({**stored, "staleAt": f"{D1}T12:00:00.000000Z"}, timeutil.now_str())
    deliver(upsert, [quiet])
    assert firestore.collection("resources").document("aws~vm~quiet").get().to_dict()["status"] == "UNKNOWN"
    assert (rpcs["commits"], rpcs["writes"]) == (1, 2)  # the ledger entry and the document: no transition
    assert not any(w.startswith("billing_resources/") for w in rpcs["written"])
    assert [s.id for s in transitions_of(firestore, "aws/vm/quiet").stream()] == [running.dedup_id]
    assert seconds(firestore, "resource") == {(D1, "aws/vm/quiet"): 14 * H, (D2, "aws/vm/quiet"): 24 * H}

    [up] = lifecycle("aws/vm/out", [(f"{D1}T13:00:00Z", "RUNNING", {"tenant": "q"})])
    outputs = replace(up, event_id="out-1", ingress_message_id="out-1", observed_at=f"{D1}T13:05:00.000000Z",
                      outputs={"ip": "10.0.0.1"})  # the same status at the same transition time: new outputs only
    deliver(upsert, [up])
    rpcs.clear()
    rpcs["written"] = []
    deliver(upsert, [outputs])
    assert (rpcs["commits"], rpcs["writes"]) == (1, 2) and not any(w.startswith("billing_resources/")
                                                                   for w in rpcs["written"])
    assert [s.id for s in transitions_of(firestore, "aws/vm/out").stream()] == [up.dedup_id]


def test_a_report_after_not_reported_lately_bills_the_silence_as_last_known(upsert, firestore):
    """The provider's next report after the sweep's "not reported lately" has UNKNOWN (NotReported) as its old
    side, from the deadline: no observed state, so no implied transition. Usage goes on as last known through the
    silence, up to the report's own time (docs/billing.md); a provider's own UNKNOWN still ends it."""
    from shared.sweep.handler import not_reported

    [running] = lifecycle("aws/vm/silent", [(f"{D1}T10:00:00Z", "RUNNING", {"tenant": "q"})])
    deliver(upsert, [running])
    stored = firestore.collection("resources").document("aws~vm~silent").get().to_dict()
    deliver(upsert, [not_reported({**stored, "staleAt": f"{D1}T12:00:00.000000Z"}, timeutil.now_str())])
    deliver(upsert, [status_update(ResourceKey.parse("aws/vm/silent"), "STOPPED", f"{D1}T15:00:00Z", "silent-2",
                                   {"tenant": "q"})])
    assert seconds(firestore, "resource") == {(D1, "aws/vm/silent"): 5 * H}  # 10:00 -> 15:00, not 10:00 -> 12:00

    deliver(upsert, lifecycle("aws/vm/unknown", [(f"{D1}T10:00:00Z", "RUNNING", {"tenant": "q"}),
                                                 (f"{D1}T12:00:00Z", "UNKNOWN", {"tenant": "q"}),
                                                 (f"{D1}T15:00:00Z", "STOPPED", {"tenant": "q"})]))
    assert seconds(firestore, "resource")[(D1, "aws/vm/unknown")] == 2 * H  # the provider's UNKNOWN: not billed


# ---- the report's enumeration ----------------------------------------------------------------
def test_a_resource_that_moved_tenants_is_split_between_them(upsert, firestore, rpcs):
    a, b, c = {"tenant": "a", "region": "eu"}, {"tenant": "b", "region": "eu"}, {"tenant": "c"}
    # moved from tenant a to b while stopped: a's run ends at the STOPPED only b's transitions know of
    deliver(upsert, lifecycle("aws/vm/moved", [(f"{D1}T10:00:00Z", "RUNNING", a), (f"{D1}T12:00:00Z", "STOPPED", b),
                                                (f"{D1}T14:00:00Z", "RUNNING", b),
                                                (f"{D1}T18:00:00Z", "DELETED", b)]))
    deliver(upsert, lifecycle("aws/vm/stays", [(f"{D1}T00:00:00Z", "RUNNING", a)]))
    deliver(upsert, lifecycle("azure/vm/other", [(f"{D1}T00:00:00Z", "RUNNING", c),
                                                  (f"{D1}T01:00:00Z", "STOPPED", c)]))
    everyone = {(D1, "a"): 2 * H + 24 * H, (D2, "a"): 24 * H, (D1, "b"): 4 * H, (D1, "c"): H}
    rpcs.clear()
    assert seconds(firestore, "tenant") == everyone
    assert rpcs["queries"] == 1  # every resource's whole set in one collection-group query
    assert seconds(firestore, "tenant", tenant="a") == {k: v for k, v in everyone.items() if k[1] == "a"}
    assert seconds(firestore, "tenant", tenant="b") == {(D1, "b"): 4 * H}
    assert seconds(firestore, "resource", tenant="b") == {(D1, "aws/vm/moved"): 4 * H}
    assert seconds(firestore, "resource", tenant="a") == {(D1, "aws/vm/moved"): 2 * H, (D1, "aws/vm/stays"): 24 * H,
                                                          (D2, "aws/vm/stays"): 24 * H}
    assert seconds(firestore, "tenant", tenant="nobody") == {}
    # the other filters, alone and together with the tenant's
    assert seconds(firestore, "tenant", provider="azure") == {(D1, "c"): H}
    assert seconds(firestore, "tenant", provider="aws", resource_type="vm", tenant="b") == {(D1, "b"): 4 * H}
    assert seconds(firestore, "tenant", provider="azure", tenant="a") == {}
    assert seconds(firestore, "tenant", resource_type="volume") == {}


def test_the_report_reads_page_by_page(upsert, firestore, rpcs, monkeypatch):
    """Each page of a query is one RPC with its own deadline: a whole collection group in one stream would
    have to finish within one. Pages of 2 give the same report as one page."""
    from shared.state.usage import transitions as store

    t = {"tenant": "paged"}
    for i in range(3):
        deliver(upsert, lifecycle(f"aws/vm/p{i}", [(f"{D1}T0{i}:00:00Z", "RUNNING", t),
                                                   (f"{D1}T1{i}:00:00Z", "STOPPED", t)]))
    expected = {(D1, f"aws/vm/p{i}"): 10 * H for i in range(3)}
    assert seconds(firestore, "resource") == expected
    monkeypatch.setattr(store, "PAGE", 2)
    rpcs.clear()
    assert seconds(firestore, "resource") == expected
    assert rpcs["queries"] == 4  # 6 transitions: pages of 2, 2, 2 and the empty one that says it was the last
    rpcs.clear()
    assert seconds(firestore, "resource", tenant="paged") == expected
    assert rpcs["queries"] == 4 + 3 * 2  # the keys (6 matching transitions), then each resource's 2 and an empty page
    assert BillingStore(firestore).earliest_at_us() == store.epoch_us(timeutil.parse(f"{D1}T00:00:00Z"))


def test_a_late_change_still_corrects_counted_usage(upsert, firestore):
    t = {"tenant": "late"}
    first, deleted, stop, restart = lifecycle(
        "vmware/vm/g", [(f"{D1}T10:00:00Z", "RUNNING", t), (f"{D2}T00:00:00Z", "DELETED", t)],
        late=[(f"{D1}T12:00:00Z", "STOPPED", t), (f"{D1}T14:00:00Z", "RUNNING", t)])
    deliver(upsert, [deleted, first])  # out of order
    assert seconds(firestore, "resource", tenant="late") == {(D1, "vmware/vm/g"): 14 * H}
    deliver(upsert, [stop])  # a STOPPED at 12:00 arrives after the deletion was counted: 10:00-12:00
    assert seconds(firestore, "resource", tenant="late") == {(D1, "vmware/vm/g"): 2 * H}
    deliver(upsert, [restart, stop])  # the restart at 14:00, and the stop again
    assert seconds(firestore, "resource", tenant="late") == {(D1, "vmware/vm/g"): 12 * H}
    assert seconds(firestore, "resource") == {(D1, "vmware/vm/g"): 12 * H}
    # a window that ends before the late changes' times: they still bound what came before
    assert seconds(firestore, "resource", end=f"{D1}T13:00:00Z") == {(D1, "vmware/vm/g"): 2 * H}


def test_any_delivery_order_and_duplication_gives_the_same_documents_and_usage(upsert, firestore):
    t = {"tenant": "shuffled"}
    events = lifecycle("aws/vm/s", [(f"{D1}T08:00:00Z", "PROVISIONING", t), (f"{D1}T09:00:00Z", "RUNNING", t),
                                    (f"{D1}T17:30:00Z", "STOPPED", t), (f"{D1}T22:00:00Z", "RUNNING", t),
                                    (f"{D2}T06:15:00Z", "DELETED", t)],
                       late=[(f"{D1}T12:00:00Z", "STOPPED", t)])
    rng = random.Random(7)
    deliveries = [u for u in events for _ in range(rng.randint(1, 3))]
    rng.shuffle(deliveries)  # upsert then announces other changes (an earlier one late, another old side): same usage
    deliver(upsert, deliveries)
    docs = BillingStore(firestore).transition_documents("aws~vm~s")
    assert sorted(d["id"] for d in docs if not d.get("implied")) == sorted(u.dedup_id for u in events)
    assert seconds(firestore, "resource") == {(D1, "aws/vm/s"): 3 * H + 2 * H, (D2, "aws/vm/s"): 6 * H + 15 * 60}


def test_documents_written_before_this_layout_still_count(upsert, firestore):
    """Before: a parent document merged at every change (identity, tenants, firstAtUs, lastAtUs), and earlier
    still, the old side of a change as a document of its own ({eventId}~old). The report reads no parent
    document (one left behind, with or without transitions, changes nothing) and counts every transition."""
    resources = firestore.collection(BILLING_RESOURCES)
    legacy = resources.document("aws~vm~legacy")
    legacy.set({"key": "aws/vm/legacy", "provider": "aws", "resourceType": "vm", "resourceId": "legacy",
                "tenants": ["old"], "firstAtUs": 0, "lastAtUs": 1})
    common = {"key": "aws/vm/legacy", "provider": "aws", "resourceType": "vm", "labels": {"tenant": "old"},
              "late": False, "recordedAt": "2026-03-01T00:00:00.000000Z"}
    legacy.collection(TRANSITIONS).document("e1").set(
        {**common, "status": "RUNNING", "at": f"{D1}T10:00:00.000000Z", "observedAt": f"{D1}T10:00:00.000000Z",
         "eventId": "e1", "implied": False, "oldStatus": None})  # no publishedAt, no atUs: the first layout
    legacy.collection(TRANSITIONS).document("e2").set(
        {**common, "status": "STOPPED", "at": f"{D1}T16:00:00.000000Z", "observedAt": f"{D1}T16:00:00.000000Z",
         "eventId": "e2", "implied": False, "oldStatus": "RUNNING"})
    legacy.collection(TRANSITIONS).document("e2~old").set(  # an old side stored as its own document
        {**common, "status": "RUNNING", "at": f"{D1}T13:00:00.000000Z", "observedAt": "", "eventId": "e2",
         "implied": True, "oldStatus": None})
    resources.document("aws~vm~empty").set({"key": "aws/vm/empty", "provider": "aws", "resourceType": "vm",
                                             "tenants": ["old"], "firstAtUs": 0})
    # a new change of the legacy resource: no parent write, the old and new transitions form one set
    [stop_again] = lifecycle("aws/vm/legacy", [], late=[(f"{D1}T11:00:00Z", "STOPPED", {"tenant": "old"})])
    deliver(upsert, [stop_again])
    assert legacy.get().to_dict()["lastAtUs"] == 1  # untouched
    assert seconds(firestore, "resource") == {(D1, "aws/vm/legacy"): H + 3 * H}
    assert seconds(firestore, "tenant", tenant="old") == {(D1, "old"): H + 3 * H}


# ---- through the pipeline (moved from tests/e2e/test_billing.py, issue 41) ---------------------------
def publish(pipeline, updates: list[StatusUpdate]) -> None:
    """On upsert's lanes as ingest publishes them (each resource's updates in order on its key), then settled."""
    for u in updates:
        pipeline.publish(NORMALIZED.format(provider=u.key.provider), status_update_contract.to_bytes(u),
                         ordering_key=str(u.key))
    pipeline.settle()


def stored_event_ids(db, resource: fleet.Resource) -> set[str]:
    return {d["eventId"] for d in BillingStore(db).transition_documents(resource.key.doc_id) if not d.get("implied")}


def report_seconds(db, by: str, tenant: str, **kw: Any) -> dict[tuple[str, Any], int | float]:
    rows = billing_report.report(db, kw.pop("start", fleet.START), kw.pop("end", fleet.END), [by], tenant=tenant, **kw)
    return {(r["day"], r[by]): r["seconds"] for r in rows}


def expected_by(resources: list[fleet.Resource], label: str) -> dict[tuple[str, Any], int]:
    out: dict[tuple[str, Any], int] = {}
    for r in resources:
        value = {"resource": str(r.key), "resourceType": r.key.resource_type, "provider": r.key.provider,
                 "tenant": r.metadata.get("tenant"), "region": r.metadata.get("region"),
                 "environment": r.metadata.get("environment")}[label]
        for day, secs in r.expected.items():
            out[(day, value)] = out.get((day, value), 0) + secs
    return out


def billing_cli(pipeline, *args: str) -> Any:
    """`dcm-status billing ARGS` on the pipeline's Firestore, in process; JSON output parsed."""
    import json

    from infra.local.state import REPO_ROOT

    result = pipeline.cli("billing", *(str(REPO_ROOT / a) if a.endswith(".yaml") else a for a in args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if "--json" in args else result.stdout


def test_shuffled_duplicated_fleet_gives_exact_resource_hours(pipeline, firestore):
    uid = "fn"
    tenant = f"t-{uid}"
    resources = fleet.fleet(uid, tenant)
    events = {str(r.key): r.updates() for r in resources}
    rng = random.Random(uid)
    deliveries = [ev for evs in events.values() for ev in evs for _ in range(rng.randint(1, 3))]
    rng.shuffle(deliveries)
    publish(pipeline, deliveries)
    assert all(stored_event_ids(firestore, r) == {u.dedup_id for u in events[str(r.key)]} for r in resources)

    for label in ("resource", "resourceType", "provider", "region", "tenant", "environment"):
        expected = {k: v for k, v in expected_by(resources, label).items() if v}
        assert report_seconds(firestore, label, tenant) == expected, label

    # the rate card prices every row; cost = hours x rate, exactly
    from shared.state.usage.rates import RateCard
    prices = {"vm": 0.5, "container": 0.25, "cluster": 1, "volume": 0.01, "network": 3600}
    rates = RateCard.from_dict({"currency": "EUR", "resourceTypes": prices})
    rows = billing_report.report(firestore, fleet.START, fleet.END, ["resourceType"], daily=False, rates=rates,
                                 tenant=tenant)
    per_type: dict[str, int] = {}
    for (_, rtype), secs in expected_by(resources, "resourceType").items():
        per_type[rtype] = per_type.get(rtype, 0) + secs
    assert per_type == {"vm": 103500, "container": 136770, "cluster": 212400, "volume": 168900, "network": 1}
    assert {r["resourceType"]: r["cost"] for r in rows} == {
        t: round(s * prices[t] / H, 6) for t, s in per_type.items()}

    # the operator's view: dcm-status billing report (JSON and CSV), same figures
    cli_rows = billing_cli(pipeline, "report", "--from", D1, "--to", "2026-03-04", "--by", "tenant,type", "--tenant", tenant,
                           "--rates", "examples/rates.yaml", "--json")
    assert {(r["day"], r["resourceType"]): r["seconds"] for r in cli_rows["rows"]} == {
        k: v for k, v in expected_by(resources, "resourceType").items() if v}
    assert cli_rows["total"]["seconds"] == sum(r.expected.get(d, 0) for r in resources for d in (D1, D2, fleet.D3))
    assert all(r["tenant"] == tenant and r["currency"] == "EUR" and r["cost"] > 0 for r in cli_rows["rows"])
    csv_text = billing_cli(pipeline, "report", "--from", D1, "--to", "2026-03-04", "--by", "resource", "--total",
                           "--tenant", tenant, "--csv")
    assert csv_text.splitlines()[0] == "resource,resources,seconds,hours"
    assert f"aws/vm/vm-a-{uid},1,60300,16.75" in csv_text.splitlines()

    # delivering everything again changes nothing
    publish(pipeline, [ev for evs in events.values() for ev in evs])
    assert report_seconds(firestore, "resource", tenant) == {
        k: v for k, v in expected_by(resources, "resource").items() if v}


def test_resource_still_running_is_counted_up_to_now(pipeline, firestore):
    tenant = "now-fn"
    key = ResourceKey("azure", "container", "ctr-now-fn")
    r = fleet.Resource(key, {"tenant": tenant}, [(f"{D2}T10:00:30Z", "RUNNING")], [], {})
    updates = r.updates()
    publish(pipeline, updates)
    assert stored_event_ids(firestore, r) == {updates[0].dedup_id}
    now = datetime(2026, 3, 5, 6, 0, tzinfo=timezone.utc)  # the window ends next year: count up to "now"
    assert report_seconds(firestore, "resource", tenant, start="2026-03-04T00:00:00Z", end="2027-01-01T00:00:00Z",
                          now=now) == {("2026-03-04", str(key)): 24 * H, ("2026-03-05", str(key)): 6 * H}
    # and with the real clock, a long-running resource is counted up to the moment of the report
    before = timeutil.now()
    rows = billing_report.report(firestore, "2026-11-01T00:00:00Z", "2030-01-01T00:00:00Z", ["resource"],
                                 daily=False, tenant=tenant)
    after = timeutil.now()
    since = datetime(2026, 11, 1, tzinfo=timezone.utc)
    assert (before - since).total_seconds() <= rows[0]["seconds"] <= (after - since).total_seconds()


def test_through_the_pipeline_provider_to_billing_and_audit(pipeline, firestore):
    """Provider reports -> ingest -> upsert: the transitions (one late) in its commits, and the change events
    (one late) -> audit, the proposal's "Instance Stopped" story (a filtered consumer of the changed topic)."""
    tenant, rid = "pipe-fn", "vm-pipe-fn"
    key = f"aws/vm/{rid}"
    aws = pipeline.reporter("aws")

    def report(status: str, at: str, wait: bool = True) -> None:
        aws.publish_now("vm", rid, status, f"{status.lower()}", time=at, last_transition_time=at,
                        metadata={"tenant": tenant, "region": "eu-west"}).result(timeout=30)
        pipeline.settle()
        if wait:
            assert pipeline.resource(key)["status"] == status

    report("RUNNING", f"{D1}T10:00:00Z")
    report("STOPPED", f"{D1}T12:30:00Z")
    report("DELETED", f"{D1}T14:00:00Z")
    report("RUNNING", f"{D1}T13:00:00Z", wait=False)  # older than DELETED: stale for upsert, a late transition

    docs = [x for x in BillingStore(firestore).transition_documents(ResourceKey.parse(key).doc_id)
            if not x.get("implied")]
    assert sorted((d["at"], d["status"], d["late"]) for d in docs) == [
        (f"{D1}T10:00:00.000000Z", "RUNNING", False), (f"{D1}T12:30:00.000000Z", "STOPPED", False),
        (f"{D1}T13:00:00.000000Z", "RUNNING", True), (f"{D1}T14:00:00.000000Z", "DELETED", False)]
    assert all(d["labels"] == {"tenant": tenant, "region": "eu-west"} for d in docs)
    rows = billing_report.report(firestore, fleet.START, fleet.END, ["tenant", "region"], tenant=tenant)
    assert rows == [{"day": D1, "tenant": tenant, "region": "eu-west", "resources": 1,
                     "seconds": 2 * H + 30 * 60 + H, "hours": 3.5}]

    stops = [s.to_dict() for s in firestore.collection("audit_stopped").where(
        filter=FieldFilter("key", "==", key)).stream()]
    assert len(stops) == 1
    assert {k: stops[0][k] for k in ("at", "oldStatus", "provider", "tenant", "late")} == {
        "at": f"{D1}T12:30:00.000000Z", "oldStatus": "RUNNING", "provider": "aws", "tenant": tenant, "late": False}
