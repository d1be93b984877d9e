"""Billing end to end on the emulators: change events -> billing function -> Firestore -> report.

Change events are published straight to the changed topic (built with
shared.status_changed.build, exactly as upsert builds them), duplicated and
shuffled; one test goes through the whole pipeline (provider -> ingest ->
upsert -> changed -> billing). Expected usage is written out by hand, in
seconds, and compared exactly.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pytest
from dcm_status_contracts import status_changed
from dcm_status_contracts import timeutil
from dcm_status_contracts.model import ResourceKey
from dcm_status_contracts.status_update import StatusUpdate
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.state.usage import report as billing_report
from shared.billing.store import BillingStore
from shared.upsert.decide import resource_document
from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.e2e

CHANGED = "dcm-status-changed"
START, END = "2026-03-01T00:00:00Z", "2026-03-04T00:00:00Z"
D1, D2, D3 = "2026-03-01", "2026-03-02", "2026-03-03"
H = 3600


def status_update(key: ResourceKey, status: str, at: str, event_id: str, metadata: dict[str, str]) -> StatusUpdate:
    at = timeutil.canonical(at)
    return StatusUpdate(
        key=key, status=status, raw_status=status.lower(), status_recognized=True, message=f"{status.lower()}",
        reason=None, last_transition_time=at, observed_at=at, metadata=dict(metadata), resource_specific={},
        event_id=event_id, event_source=f"{key.provider}-provider",
        event_type=f"dcm.providers.{key.provider}.{key.resource_type}.{key.resource_id}.status", event_subject=None,
        dataschema=f"https://schemas.dcm.org/{key.resource_type}/status-v1.json", schema_defaulted=False,
        ingress_message_id=event_id, ingress_topic=None, received_at=timeutil.now_str())


@dataclass
class Resource:
    """One resource's lifecycle and the change events upsert would emit for it."""

    key: ResourceKey
    metadata: dict[str, str]
    steps: list[tuple[str, str]]  # (transition time, status), in time order: announced as changes
    late: list[tuple[str, str]]  # announced late (refused as stale for the current state)
    expected: dict[str, int]  # UTC day -> billable seconds in [START, END)

    def events(self) -> list[status_changed.ChangeEvent]:
        out, old = [], None
        for i, (at, status) in enumerate(self.steps):
            upd = status_update(self.key, status, at, f"{self.key.resource_id}-{i}", self.metadata)
            new = resource_document(upd, upd.observed_at)
            out.append(status_changed.build(upd, old, new, late=False))
            old = new
        for i, (at, status) in enumerate(self.late):
            upd = status_update(self.key, status, at, f"{self.key.resource_id}-late-{i}", self.metadata)
            out.append(status_changed.build(upd, None, resource_document(upd, upd.observed_at), late=True))
        return out


def fleet(uid: str, tenant: str) -> list[Resource]:
    eu = {"tenant": tenant, "region": "eu-west", "environment": "prod"}
    us = {"tenant": tenant, "region": "us-east"}

    def R(provider, rtype, name, metadata, steps, expected, late=()):
        return Resource(ResourceKey(provider, rtype, f"{name}-{uid}"), metadata, list(steps), list(late), expected)

    return [
        # stop, restart across midnight, deletion
        R("aws", "vm", "vm-a", eu, [(f"{D1}T08:00:00Z", "PROVISIONING"), (f"{D1}T09:00:00Z", "RUNNING"),
                                    (f"{D1}T17:30:00Z", "STOPPED"), (f"{D1}T22:00:00Z", "RUNNING"),
                                    (f"{D2}T06:15:00Z", "DELETED")],
          {D1: 8 * H + 30 * 60 + 2 * H, D2: 6 * H + 15 * 60}),
        # stuck RUNNING: counted up to the report's end
        R("azure", "container", "ctr-b", us, [(f"{D2}T10:00:00Z", "PENDING"), (f"{D2}T10:00:30Z", "RUNNING")],
          {D2: 13 * H + 59 * 60 + 30, D3: 24 * H}),
        # billable through UPDATING and DEGRADED
        R("kubernetes", "cluster", "cl-c", eu, [(f"{D1}T00:00:00Z", "CREATING"), (f"{D1}T01:00:00Z", "ACTIVE"),
                                                (f"{D1}T12:00:00Z", "UPDATING"), (f"{D2}T00:00:00Z", "DEGRADED"),
                                                (f"{D2}T03:00:00Z", "ACTIVE"), (f"{D3}T12:00:00Z", "DELETED")],
          {D1: 23 * H, D2: 24 * H, D3: 12 * H}),
        # storage is billed while it exists
        R("vmware", "volume", "vol-d", us, [(f"{D1}T10:00:00Z", "CREATING"), (f"{D1}T10:05:00Z", "AVAILABLE"),
                                            (f"{D3}T09:00:00Z", "DELETING"), (f"{D3}T09:10:00Z", "DELETED")],
          {D1: 13 * H + 55 * 60, D2: 24 * H, D3: 9 * H}),
        # one second before the window ends
        R("aws", "network", "net-e", eu, [(f"{D3}T23:00:00Z", "CREATING"), (f"{D3}T23:59:59Z", "ACTIVE")],
          {D3: 1}),
        # stuck in a non-billable state
        R("azure", "vm", "vm-f", eu, [(f"{D1}T12:00:00Z", "PROVISIONING")], {}),
        # late changes that belong before already-announced ones
        R("vmware", "vm", "vm-g", us, [(f"{D1}T10:00:00Z", "RUNNING"), (f"{D2}T00:00:00Z", "DELETED")],
          {D1: 12 * H}, late=[(f"{D1}T12:00:00Z", "STOPPED"), (f"{D1}T14:00:00Z", "RUNNING")]),
    ]


def publish(e2e, events: list[status_changed.ChangeEvent]) -> None:
    topic = e2e.topic_path(CHANGED)
    futures = [e2e.publisher.publish(topic, ev.body, **ev.attributes) for ev in events]
    for f in futures:
        f.result(timeout=30)


def stored_event_ids(e2e, resource: Resource) -> set[str]:
    docs = BillingStore(e2e.db).transition_documents(resource.key.doc_id)
    return {d["eventId"] for d in docs if not d.get("implied")}


def wait_until_stored(e2e, resources: list[Resource], events_by_resource: dict[str, list], timeout=30.0) -> None:
    def done() -> bool:
        return all(stored_event_ids(e2e, r) == {ev.event_id for ev in events_by_resource[str(r.key)]}
                   for r in resources)
    wait_until(done, timeout, interval=0.3, what="billing to store every change event")


def report_seconds(e2e, by: str, tenant: str, **kw: Any) -> dict[tuple[str, Any], int | float]:
    rows = billing_report.report(e2e.db, kw.pop("start", START), kw.pop("end", END), [by], tenant=tenant, **kw)
    return {(r["day"], r[by]): r["seconds"] for r in rows}


def expected_by(resources: list[Resource], label: str) -> dict[tuple[str, Any], int]:
    out: dict[tuple[str, Any], int] = {}
    for r in resources:
        value = {"resource": str(r.key), "resourceType": r.key.resource_type, "provider": r.key.provider,
                 "tenant": r.metadata.get("tenant"), "region": r.metadata.get("region"),
                 "environment": r.metadata.get("environment")}[label]
        for day, seconds in r.expected.items():
            out[(day, value)] = out.get((day, value), 0) + seconds
    return out


def billing_cli(e2e, *args: str) -> Any:
    """`dcm-status billing ARGS` against the e2e stack, in process; JSON output parsed."""
    import json
    from unittest import mock

    from click.testing import CliRunner

    from infra.cli import cli
    from infra.cli.common import Connection
    from infra.local.state import REPO_ROOT

    conn = Connection(e2e.project, e2e.stack.topology(e2e.state), True)
    args = tuple(str(REPO_ROOT / a) if a.endswith(".yaml") else a for a in args)
    with mock.patch("infra.cli.billing.connect", lambda: conn):
        result = CliRunner().invoke(cli, ["billing", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if "--json" in args else result.stdout


def print_comparison(title: str, expected: dict, computed: dict) -> None:
    print(f"\n{title}")
    print(f"  {'day':<11} {'group':<34} {'expected h':>12} {'computed h':>12} {'diff s':>7}")
    for k in sorted(set(expected) | set(computed), key=str):
        e, c = expected.get(k, 0), computed.get(k, 0)
        print(f"  {k[0]:<11} {str(k[1]):<34} {e / H:>12.6f} {c / H:>12.6f} {c - e:>7}")
    te, tc = sum(expected.values()), sum(computed.values())
    print(f"  {'total':<11} {'':<34} {te / H:>12.6f} {tc / H:>12.6f} {tc - te:>7}")


def test_shuffled_duplicated_fleet_gives_exact_resource_hours(e2e, uid):
    tenant = f"t-{uid}"
    resources = fleet(uid, tenant)
    events = {str(r.key): r.events() for r in resources}
    rng = random.Random(uid)
    deliveries = [ev for evs in events.values() for ev in evs for _ in range(rng.randint(1, 3))]
    rng.shuffle(deliveries)
    started = time.monotonic()
    publish(e2e, deliveries)
    wait_until_stored(e2e, resources, events)
    stored_after = time.monotonic() - started
    print(f"\n{len(deliveries)} deliveries of {sum(map(len, events.values()))} change events "
          f"({len(resources)} resources) stored in {stored_after:.1f}s")

    for label in ("resource", "resourceType", "provider", "region", "tenant", "environment"):
        expected = {k: v for k, v in expected_by(resources, label).items() if v}
        computed = report_seconds(e2e, label, tenant)
        if label in ("resourceType", "tenant"):
            print_comparison(f"expected vs computed, per UTC day and {label} (tenant {tenant})", expected, computed)
        assert computed == expected, label

    # the rate card prices every row; cost = hours x rate, exactly
    from shared.state.usage.rates import RateCard
    prices = {"vm": 0.5, "container": 0.25, "cluster": 1, "volume": 0.01, "network": 3600}
    rates = RateCard.from_dict({"currency": "EUR", "resourceTypes": prices})
    rows = billing_report.report(e2e.db, START, END, ["resourceType"], daily=False, rates=rates, tenant=tenant)
    per_type: dict[str, int] = {}
    for (_, rtype), seconds in expected_by(resources, "resourceType").items():
        per_type[rtype] = per_type.get(rtype, 0) + seconds
    assert per_type == {"vm": 103500, "container": 136770, "cluster": 212400, "volume": 168900, "network": 1}
    assert {r["resourceType"]: r["cost"] for r in rows} == {
        t: round(s * prices[t] / H, 6) for t, s in per_type.items()}

    # the operator's view: dcm-status billing report (JSON and CSV), same figures
    cli_rows = billing_cli(e2e, "report", "--from", D1, "--to", "2026-03-04", "--by", "tenant,type", "--tenant", tenant,
                           "--rates", "examples/rates.yaml", "--json")
    assert {(r["day"], r["resourceType"]): r["seconds"] for r in cli_rows["rows"]} == {
        k: v for k, v in expected_by(resources, "resourceType").items() if v}
    assert cli_rows["total"]["seconds"] == sum(r.expected.get(d, 0) for r in resources for d in (D1, D2, D3))
    assert all(r["tenant"] == tenant and r["currency"] == "EUR" and r["cost"] > 0 for r in cli_rows["rows"])
    csv_text = billing_cli(e2e, "report", "--from", D1, "--to", "2026-03-04", "--by", "resource", "--total",
                           "--tenant", tenant, "--csv")
    assert csv_text.splitlines()[0] == "resource,resources,seconds,hours"
    assert f"aws/vm/vm-a-{uid},1,60300,16.75" in csv_text.splitlines()

    # delivering everything again changes nothing
    publish(e2e, [ev for evs in events.values() for ev in evs])
    time.sleep(1.0)
    assert report_seconds(e2e, "resource", tenant) == {k: v for k, v in expected_by(resources, "resource").items() if v}


def test_late_change_corrects_already_counted_usage(e2e, uid):
    tenant = f"late-{uid}"
    key = ResourceKey("aws", "vm", f"vm-late-{uid}")
    r = Resource(key, {"tenant": tenant}, [(f"{D1}T10:00:00Z", "RUNNING"), (f"{D2}T00:00:00Z", "DELETED")],
                 [(f"{D1}T12:00:00Z", "STOPPED"), (f"{D1}T14:00:00Z", "RUNNING")], {})
    first, second, stop, restart = r.events()

    def usage_after(events, *known) -> dict:
        publish(e2e, events)
        wait_until(lambda: stored_event_ids(e2e, r) == {ev.event_id for ev in known}, 30,
                   what="billing to store the change events")
        return report_seconds(e2e, "resource", tenant)

    assert usage_after([first, second], first, second) == {(D1, str(key)): 14 * H}
    # a STOPPED at 12:00 arrives after the deletion was counted: 10:00-12:00 only
    assert usage_after([stop], first, second, stop) == {(D1, str(key)): 2 * H}
    # then the restart at 14:00, and a redelivery of the stop: 10:00-12:00 + 14:00-24:00
    assert usage_after([restart, stop], first, second, stop, restart) == {(D1, str(key)): 12 * H}


def test_resource_still_running_is_counted_up_to_now(e2e, uid):
    tenant = f"now-{uid}"
    key = ResourceKey("azure", "container", f"ctr-now-{uid}")
    r = Resource(key, {"tenant": tenant}, [(f"{D2}T10:00:30Z", "RUNNING")], [], {})
    events = r.events()
    publish(e2e, events)
    wait_until(lambda: stored_event_ids(e2e, r) == {events[0].event_id}, 30, what="billing to store the change")
    now = datetime(2026, 3, 5, 6, 0, tzinfo=timezone.utc)  # the window ends next year: count up to "now"
    assert report_seconds(e2e, "resource", tenant, start="2026-03-04T00:00:00Z", end="2027-01-01T00:00:00Z",
                          now=now) == {("2026-03-04", str(key)): 24 * H, ("2026-03-05", str(key)): 6 * H}
    # and with the real clock, a long-running resource is counted up to the moment of the report
    before = timeutil.now()
    rows = billing_report.report(e2e.db, "2026-11-01T00:00:00Z", "2030-01-01T00:00:00Z", ["resource"], daily=False,
                                 tenant=tenant)
    after = timeutil.now()
    since = datetime(2026, 11, 1, tzinfo=timezone.utc)
    assert (before - since).total_seconds() <= rows[0]["seconds"] <= (after - since).total_seconds()


def test_through_the_pipeline_provider_to_billing_and_audit(e2e, uid):
    """Provider reports -> ingest -> upsert -> change events (one late) -> billing and audit."""
    tenant = f"pipe-{uid}"
    rid = f"vm-pipe-{uid}"
    key = f"aws/vm/{rid}"
    aws = e2e.reporter("aws")

    def report(status: str, at: str, wait: bool = True) -> None:
        aws.publish_now("vm", rid, status, f"{status.lower()}", time=at, last_transition_time=at,
                   metadata={"tenant": tenant, "region": "eu-west"}).result(timeout=30)
        if wait:
            e2e.wait_for_status(key, status)

    report("RUNNING", f"{D1}T10:00:00Z")
    report("STOPPED", f"{D1}T12:30:00Z")
    report("DELETED", f"{D1}T14:00:00Z")
    report("RUNNING", f"{D1}T13:00:00Z", wait=False)  # older than DELETED: stale for upsert, late for billing

    doc_id = ResourceKey.parse(key).doc_id
    store = BillingStore(e2e.db)
    docs = wait_until(lambda: (d := [x for x in store.transition_documents(doc_id) if not x.get("implied")])
                      and len(d) == 4 and d, 30, what="billing to store 4 transitions")
    assert sorted((d["at"], d["status"], d["late"]) for d in docs) == [
        (f"{D1}T10:00:00.000000Z", "RUNNING", False), (f"{D1}T12:30:00.000000Z", "STOPPED", False),
        (f"{D1}T13:00:00.000000Z", "RUNNING", True), (f"{D1}T14:00:00.000000Z", "DELETED", False)]
    assert all(d["labels"] == {"tenant": tenant, "region": "eu-west"} for d in docs)
    rows = billing_report.report(e2e.db, START, END, ["tenant", "region"], tenant=tenant)
    assert rows == [{"day": D1, "tenant": tenant, "region": "eu-west", "resources": 1,
                     "seconds": 2 * H + 30 * 60 + H, "hours": 3.5}]

    stops = wait_until(lambda: [s.to_dict() for s in e2e.db.collection("audit_stopped")
                                .where(filter=FieldFilter("key", "==", key)).stream()],
                       30, what="audit to record the stop")
    assert len(stops) == 1
    assert {k: stops[0][k] for k in ("at", "oldStatus", "provider", "tenant", "late")} == {
        "at": f"{D1}T12:30:00.000000Z", "oldStatus": "RUNNING", "provider": "aws", "tenant": tenant, "late": False}
