"""The sweep through functions-framework's test client, on the Firestore emulator. Reconciliation: a
complete snapshot batch, delivered shuffled and duplicated, deletes exactly the resources the provider
no longer has, once; a partial one deletes nothing and is abandoned when too old. Freshness: a resource
past its deadline is UNKNOWN (NotReported), last known kept, until it reports again."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import orjson
import pytest
from dcm_status_contracts import status_update, timeutil
from dcm_status_contracts.errors import Rejected, Transient
from dcm_status_contracts.model import PubSubMessage
from dcm_status_contracts.resync import ResyncMark
from dcm_status_contracts.pubsub_binding import to_message
from dcm_status_contracts.status_report import ReportForm, build_event
from google.cloud.firestore import DELETE_FIELD

from shared.ingest.normalize import normalize_message
from shared.runtime import settings
from shared.state import resources, snapshots
from shared.state.documents import (
    MAX_IN,
    RESOURCE_SHARDS,
    SHARD,
    STALE_SHARD,
    STALE_SHARDS,
    shard_of,
    stale_shard_of,
)
from shared.sweep.handler import Sweep
from tests.functional.conftest import SHAPES

AT = "2026-11-22T10:00:00.000000Z"




def report(upsert, rid: str, status: str, time: str, event_id: str, mark: ResyncMark | None = None,
           provider: str = "aws") -> None:
    event = build_event(provider, "vm", rid, status, event_id=event_id, time=time, form=ReportForm.CURRENT,
                        metadata={"tenant": "acme"}, extensions=mark.attributes() if mark else None)
    data, attrs = to_message(event)
    update = normalize_message(PubSubMessage(data, attrs, f"in-{event_id}", time, f"dcm-status-ingress-{provider}"),
                               settings.from_env())
    response = SHAPES["push"](upsert, f"dcm-status-normalized-{provider}", status_update.to_bytes(update), {}, event_id)
    assert response.status_code == 200


def tick(sweep, publisher, upsert) -> list[str]:
    """Run the sweep once; hand what it published to upsert; the keys it deleted."""
    before = len(publisher.normalized())
    assert SHAPES["push"](sweep, "dcm-status-sweep", orjson.dumps({"tick": "test"}), {}, "tick").status_code == 200
    out = publisher.normalized()[before:]
    for i, m in enumerate(out):
        SHAPES["push"](upsert, m.topic.rsplit("/", 1)[-1], m.data, m.attributes, f"sweep-{i}")  # its lane
    return [m.attributes["key"] for m in out]


def resource(db, rid: str) -> dict:
    """Its newest state (a hot resource's may be on the ledger: shared/state/resources.py)."""
    return dict(resources.newest(db, db.document(f"resources/aws~vm~{rid}").get().to_dict()))


def test_a_complete_snapshot_shuffled_and_duplicated_deletes_what_is_gone_once(upsert, sweep, firestore, publisher):
    report(upsert, "gone", "RUNNING", "2026-11-22T09:00:00Z", "old-gone")
    report(upsert, "created-meanwhile", "RUNNING", "2026-11-22T10:00:30Z", "new-1")  # after the listing began
    mark = lambda i: ResyncMark("b1", 3, i, AT, ("vm",))  # noqa: E731
    for i in (2, 0, 2, 1):  # shuffled, one twice
        report(upsert, f"i-{i}", "RUNNING", "2026-11-22T10:00:05Z", f"snap-{i}-{len(publisher.messages)}", mark(i))
    assert tick(sweep, publisher, upsert) == ["aws/vm/gone"]
    gone = resource(firestore, "gone")
    assert (gone["status"], gone["reason"], gone["eventSource"]) == ("DELETED", "NotInSnapshot", "dcm/platform/reconcile")
    assert gone["metadata"] == {"tenant": "acme"}  # billing still knows whose it was
    assert resource(firestore, "created-meanwhile")["status"] == "RUNNING"
    assert all(resource(firestore, f"i-{i}")["status"] == "RUNNING" for i in range(3))
    batch = firestore.document("resyncs/aws~b1").get().to_dict()
    assert (batch["state"], batch["listed"], batch["deleted"]) == ("reconciled", 3, 1)
    assert tick(sweep, publisher, upsert) == []  # closed: never again


def test_a_partial_snapshot_deletes_nothing_and_is_abandoned_when_too_old(upsert, sweep, firestore, publisher):
    report(upsert, "still-there", "RUNNING", "2026-11-22T09:00:00Z", "old-still")
    mark = lambda i: ResyncMark("b2", 3, i, AT, ("vm",))  # noqa: E731
    report(upsert, "j-0", "RUNNING", "2026-11-22T10:00:05Z", "p-0", mark(0))
    report(upsert, "j-2", "RUNNING", "2026-11-22T10:00:05Z", "p-2", mark(2))  # j-1 delayed, or lost
    assert tick(sweep, publisher, upsert) == []
    assert firestore.document("resyncs/aws~b2").get().to_dict()["state"] == "open"
    firestore.document("resyncs/aws~b2").update({"openedAt": "2026-11-22T08:00:00.000000Z"})
    assert tick(sweep, publisher, upsert) == []
    assert firestore.document("resyncs/aws~b2").get().to_dict()["state"] == "abandoned"
    assert resource(firestore, "still-there")["status"] == "RUNNING"
    report(upsert, "j-1", "RUNNING", "2026-11-22T10:00:05Z", "p-1", mark(1))  # arrives after all: too late
    assert tick(sweep, publisher, upsert) == [] and resource(firestore, "still-there")["status"] == "RUNNING"


def test_a_report_newer_than_the_snapshot_outlives_its_deletion(upsert, sweep, firestore, publisher):
    report(upsert, "back", "RUNNING", "2026-11-22T09:00:00Z", "old-back")
    report(upsert, "k-0", "RUNNING", "2026-11-22T10:00:05Z", "q-0", ResyncMark("b3", 1, 0, AT, ("vm",)))
    assert tick(sweep, publisher, upsert) == ["aws/vm/back"]
    report(upsert, "back", "RUNNING", "2026-11-22T10:10:00Z", "new-back")  # re-created after the snapshot
    assert resource(firestore, "back")["status"] == "RUNNING"


def test_a_resource_past_its_deadline_is_unknown_not_reported_until_its_next_report(upsert, sweep, firestore,
                                                                                   publisher):
    report(upsert, "quiet", "RUNNING", "2026-11-22T09:00:00Z", "q-1")
    doc = resource(firestore, "quiet")
    assert doc["staleAt"] > doc["lastSeenAt"]  # topology.yaml's freshness: report_every + grace after it
    firestore.document("resources/aws~vm~quiet").update({"staleAt": "2026-11-22T10:15:00.000000Z"})  # passed
    assert tick(sweep, publisher, upsert) == ["aws/vm/quiet"]
    doc = resource(firestore, "quiet")
    assert (doc["status"], doc["reason"], doc["extra"]["lastKnownStatus"]) == ("UNKNOWN", "NotReported", "RUNNING")
    assert doc["metadata"] == {"tenant": "acme"} and doc["staleAt"] is None  # marked once, not every tick
    assert tick(sweep, publisher, upsert) == []
    report(upsert, "quiet", "RUNNING", "2026-11-22T11:00:00Z", "q-2")  # it reports again
    doc = resource(firestore, "quiet")
    assert (doc["status"], doc["reason"]) == ("RUNNING", None) and doc["staleAt"] > "2026-11-22T11"


def one_key_per_stale_group() -> list[str]:
    """A resource id in each group of MAX_IN stale shards (the sweep reads each group with one query)."""
    found: dict[int, str] = {}
    for i in range(100_000):
        group = stale_shard_of(f"aws/vm/stale-{i}") // MAX_IN
        found.setdefault(group, f"stale-{i}")
        if len(found) == STALE_SHARDS // MAX_IN:
            return [found[g] for g in sorted(found)]
    raise AssertionError("no resource id for some group of stale shards")


def test_the_deadlines_passed_in_every_group_of_stale_shards_are_found_oldest_first(upsert, sweep, firestore,
                                                                                   publisher):
    """staleAt has its own shard field (360 shards: more than one "in" takes), read in groups of 30 and
    merged: a resource past its deadline in any group is marked, the oldest deadlines first, each once."""
    rids = one_key_per_stale_group()
    assert len(rids) == STALE_SHARDS // MAX_IN == 12
    for i, rid in enumerate(rids):
        report(upsert, rid, "RUNNING", "2026-11-22T09:00:00Z", f"s-{i}")
        doc = firestore.document(f"resources/aws~vm~{rid}").get().to_dict()
        assert doc[STALE_SHARD] == stale_shard_of(f"aws/vm/{rid}") and doc[SHARD] == shard_of(
            f"aws/vm/{rid}", RESOURCE_SHARDS, RESOURCE_SHARDS)
    for i, rid in enumerate(reversed(rids)):  # the last group's deadline the oldest
        firestore.document(f"resources/aws~vm~{rid}").update({"staleAt": f"2026-11-22T10:{10 + i:02d}:00.000000Z"})
    assert tick(sweep, publisher, upsert) == [f"aws/vm/{rid}" for rid in reversed(rids)]
    assert tick(sweep, publisher, upsert) == []


def test_a_document_written_before_the_stale_shard_is_found_once_backfilled_and_a_re_report_gives_it(
        upsert, sweep, firestore, publisher):
    """A resource document without ``staleShard`` is in no (staleShard, staleAt) range: the sweep cannot see
    its deadline pass. The deploy's backfill gives it the field; so does its next report, even a re-report
    (upsert writes the shard fields with the deadline)."""
    from google.cloud.firestore_v1 import DELETE_FIELD

    report(upsert, "old", "RUNNING", "2026-11-22T09:00:00Z", "o-1")
    report(upsert, "older", "RUNNING", "2026-11-22T09:00:00Z", "o-2")
    for rid in ("old", "older"):
        firestore.document(f"resources/aws~vm~{rid}").update(
            {STALE_SHARD: DELETE_FIELD, "staleAt": "2026-11-22T10:15:00.000000Z"})  # as an earlier version wrote
    assert tick(sweep, publisher, upsert) == []  # unseen
    report(upsert, "older", "RUNNING", "2026-11-22T09:30:00Z", "o-3")  # a re-report: the same status
    assert firestore.document("resources/aws~vm~older").get().to_dict()[STALE_SHARD] == stale_shard_of(
        "aws/vm/older")
    assert resources.backfill_shards(firestore) == {"resources": 1, "events": 0}
    assert firestore.document("resources/aws~vm~old").get().to_dict()[STALE_SHARD] == stale_shard_of("aws/vm/old")
    assert tick(sweep, publisher, upsert) == ["aws/vm/old"]
    assert resources.backfill_shards(firestore) == {"resources": 0, "events": 0}


def test_a_provider_may_not_pose_as_the_platform(upsert):
    event = build_event("aws", "vm", "i-x", "DELETED", event_id="spoof", time="2026-11-22T10:00:00Z",
                        form=ReportForm.CURRENT, source="dcm/platform/reconcile")
    data, attrs = to_message(event)
    with pytest.raises(Rejected, match="the platform's own") as refused:
        normalize_message(PubSubMessage(data, attrs, "in-spoof", None, "dcm-status-ingress-aws"), settings.from_env())
    assert refused.value.reason.value == "provider_mismatch"


def test_a_tick_that_fails_is_acked_the_next_one_does_the_work(sweep, monkeypatch):
    def down(self):
        raise Transient("Firestore query failed: unavailable")
    monkeypatch.setattr(Sweep, "_open_batches", down)
    monkeypatch.setattr(Sweep, "snapshot", lambda self, now: down(self))  # the aggregates' snapshots: the same
    monkeypatch.setattr(Sweep, "trends", lambda self, now: down(self))  # the trends: the same
    assert SHAPES["push"](sweep, "dcm-status-sweep", orjson.dumps({"tick": "t"}), {}, "t-down").status_code == 200


def past_deadline(db, *rids: str) -> None:
    for rid in rids:  # as if report_every + grace had passed since their last report
        db.document(f"resources/aws~vm~{rid}").update({"staleAt": "2026-11-22T10:15:00.000000Z"})


def provider_events(publisher) -> list[tuple[str, str]]:
    from dcm_status_contracts import provider_event

    return [(e.provider, e.state.value) for e in (provider_event.from_message(PubSubMessage(m.data, m.attributes, "p"))
                                                  for m in publisher.on("dcm-status-providers"))]


def test_a_provider_silent_as_a_whole_is_one_provider_event_and_its_resources_say_so(upsert, sweep, firestore,
                                                                                    publisher):
    for rid in ("s-1", "s-2", "s-3"):
        report(upsert, rid, "RUNNING", "2026-11-22T09:00:00Z", f"silent-{rid}")
    past_deadline(firestore, "s-1")
    assert tick(sweep, publisher, upsert) == ["aws/vm/s-1"]  # one resource quiet: the provider reports
    assert provider_events(publisher) == [] and not resource(firestore, "s-1")["extra"].get("providerSilent")
    past_deadline(firestore, "s-2", "s-3")  # now none of its resources was reported in time
    assert sorted(tick(sweep, publisher, upsert)) == ["aws/vm/s-2", "aws/vm/s-3"]
    assert provider_events(publisher) == [("aws", "SILENT")]
    assert all(resource(firestore, r)["extra"]["providerSilent"] for r in ("s-2", "s-3"))
    state = firestore.document("providers/aws").get().to_dict()
    assert (state["state"], state["since"]) == ("SILENT", "2026-11-22T10:15:00.000000Z")
    assert tick(sweep, publisher, upsert) == [] and provider_events(publisher) == [("aws", "SILENT")]  # once
    report(upsert, "s-2", "RUNNING", "2026-11-22T11:00:00Z", "silent-back")
    tick(sweep, publisher, upsert)
    assert provider_events(publisher) == [("aws", "SILENT"), ("aws", "REPORTING")]
    assert firestore.document("providers/aws").get().to_dict()["state"] == "REPORTING"


def test_a_provider_that_holds_nothing_or_only_deleted_resources_is_never_silent(upsert, sweep, firestore, publisher):
    report(upsert, "d-1", "DELETED", "2026-11-22T09:00:00Z", "deleted-1")
    assert tick(sweep, publisher, upsert) == [] and provider_events(publisher) == []
    assert not firestore.document("providers/aws").get().exists


class Looks:
    """A sweep that keeps running (one instance, tick after tick), and the providers each tick looked at
    for silence (read their newest deadline)."""

    def __init__(self, firestore, publisher, monkeypatch):
        self.looked: list[str] = []
        newest_deadline = Sweep._newest_deadline
        monkeypatch.setattr(Sweep, "_newest_deadline", lambda s, p: self.looked.append(p) or newest_deadline(s, p))
        hourly = replace(settings.from_env(), summary_every_seconds=3600, stats_every_seconds=3600)
        for kind in snapshots.SnapshotKind:
            _, missing = snapshots.read(firestore, kind)
            snapshots.store(firestore, kind, {"asOf": timeutil.now_str()}, 3600, missing, "sweep")
        self.sweep, self.db, self.providers = Sweep(hourly, firestore, publisher), firestore, hourly.providers

    def tick(self) -> list[str]:
        self.looked.clear()
        self.sweep(PubSubMessage(b"{}", {}, "tick", None, "dcm-status-sweep"))
        return sorted(self.looked)

    def hold(self, provider: str, rid: str, stale_at: str) -> None:
        key = f"{provider}/vm/{rid}"
        self.db.document(f"resources/{provider}~vm~{rid}").set({
            "key": key, "provider": provider, "resourceType": "vm", "status": "RUNNING", "staleAt": stale_at,
            "lastSeenAt": timeutil.now_str(), SHARD: shard_of(key, RESOURCE_SHARDS, RESOURCE_SHARDS),
            STALE_SHARD: stale_shard_of(key)})


def in_hours(hours: float) -> str:
    return timeutil.format(timeutil.now() + timedelta(hours=hours))


def test_a_reporting_fleet_costs_the_silence_watch_no_read_and_silence_is_found_from_the_stale_batch(
        firestore, publisher, monkeypatch):
    """With every stale resource in the tick's batch, only a provider with one there, or silent already, can
    have changed: a reporting fleet is not read at all (it was one read per provider a tick: 33 s of the
    emulator's CPU a tick at 3,000 resources). Silence is found at once, even with the provider's newest
    resource deleted; a silent provider is looked at every tick (a report ends its silence)."""
    looks = Looks(firestore, publisher, monkeypatch)
    looks.hold("aws", "w-1", in_hours(1))
    looks.hold("aws", "w-2", in_hours(2))
    assert looks.tick() == [] and looks.tick() == []
    firestore.document("resources/aws~vm~w-2").delete()
    past_deadline(firestore, "w-1")
    assert looks.tick() == ["aws"] and provider_events(publisher) == [("aws", "SILENT")]
    firestore.document("resources/aws~vm~w-1").update({"staleAt": DELETE_FIELD})  # marked, as upsert does
    assert looks.tick() == ["aws"]


def test_under_a_freshness_backlog_a_provider_behind_it_is_looked_at_once_its_newest_deadline_has_passed(
        firestore, publisher, monkeypatch):
    """A full stale batch may leave a silent provider's resources behind the backlog: then a provider is
    looked at when the newest deadline seen at its last look has passed (a sweep started afresh looks at
    each once), and its silence is said without waiting for the backlog to drain."""
    monkeypatch.setattr("shared.sweep.handler.FRESHNESS_BATCH", 1)
    looks = Looks(firestore, publisher, monkeypatch)
    looks.hold("azure", "backlog-1", "2026-11-22T09:00:00.000000Z")  # the oldest: the whole batch
    looks.hold("aws", "behind-1", in_hours(1))
    assert looks.tick() == sorted(looks.providers)  # the first look at each
    assert looks.tick() == ["azure"]  # azure's resource is in the batch; aws's deadline is an hour away
    looks.hold("aws", "behind-1", "2026-11-22T10:15:00.000000Z")  # aws silent, behind the backlog
    assert looks.tick() == ["azure"]  # ...but the deadline seen last time has not passed: not yet
    looks.sweep.watch.next_look["aws"] = timeutil.now()  # an hour later
    assert "aws" in looks.tick() and ("aws", "SILENT") in provider_events(publisher)


def test_a_report_newer_than_a_deletion_is_announced_as_a_re_creation(upsert, firestore, publisher):
    from dcm_status_contracts.status_changed import from_message

    report(upsert, "re", "RUNNING", "2026-11-22T09:00:00Z", "re-1")
    report(upsert, "re", "DELETED", "2026-11-22T09:10:00Z", "re-2")
    report(upsert, "re", "PROVISIONING", "2026-11-22T09:05:00Z", "re-late")  # older than the deletion: stale
    report(upsert, "re", "RUNNING", "2026-11-22T09:20:00Z", "re-3")
    changes = [from_message(PubSubMessage(m.data, m.attributes, "c")) for m in publisher.on("dcm-status-changed")]
    assert [(c.old_status, c.new_status, c.late, c.recreated) for c in changes] == [
        (None, "RUNNING", False, False), ("RUNNING", "DELETED", False, False),
        (None, "PROVISIONING", True, False), ("DELETED", "RUNNING", False, True)]
    assert resource(firestore, "re")["status"] == "RUNNING"


def test_a_resource_changing_more_than_the_policy_allows_is_flagged_flapping_then_calms(upsert, firestore,
                                                                                       publisher):
    from dcm_status_contracts.status_changed import from_message

    policy = settings.from_env().flapping  # topology.yaml: more than 5 changes in 600 s
    statuses = ["RUNNING", "FAILED"] * 4
    for i, status in enumerate(statuses):  # 8 changes, one a minute
        report(upsert, "flap", status, f"2026-11-22T09:{i:02d}:00Z", f"flap-{i}")
    report(upsert, "flap", "RUNNING", "2026-11-22T10:00:00Z", "flap-calm")  # an hour later: calm again
    changes = [from_message(PubSubMessage(m.data, m.attributes, "c")) for m in publisher.on("dcm-status-changed")]
    flags = [c.flapping["changes"] if c.flapping else 0 for c in changes]
    assert flags == [0] * policy.changes + [6, 6, 6, 0]  # the window holds at most changes + 1
    assert [c.new_status for c in changes] == statuses + ["RUNNING"]  # every change announced: billing is exact
    doc = resource(firestore, "flap")
    assert doc["flapping"] is None and len(doc["recentChanges"]) == 1


class CountingReads:
    """The emulator's client, counting the documents its queries return (what Firestore bills, but for
    the one read an empty query costs)."""

    def __init__(self, target, tally: list):
        self.target, self.tally = target, tally

    def __getattr__(self, name):
        attr = getattr(self.target, name)
        if name == "stream":
            return lambda *a, **k: (self.tally.append(1) or s for s in attr(*a, **k))
        if callable(attr) and name in ("collection", "where", "order_by", "limit", "select"):
            return lambda *a, **k: CountingReads(attr(*a, **k), self.tally)
        return attr


def test_an_idle_tick_reads_no_more_at_six_hundred_resources_than_at_one_hundred(firestore, publisher, monkeypatch):
    """Every query of the sweep is an indexed one: with nothing stale, silent, hot or open, what it reads
    does not grow with the resources held. (The aggregates' snapshots, not due here, do: they are counts,
    one read per 1,000 index entries, tests/functional/test_aggregates.py. The trends, left out here, read the
    minutes they wrote and count a minute's entries: tests/functional/test_usage_api.py.)"""
    monkeypatch.setattr(Sweep, "trends", lambda self, now: [])
    hourly = replace(settings.from_env(), summary_every_seconds=3600, stats_every_seconds=3600)
    for kind in snapshots.SnapshotKind:
        _, missing = snapshots.read(firestore, kind)
        snapshots.store(firestore, kind, {"asOf": timeutil.now_str()}, 3600, missing, "sweep")

    def reads_of_one_tick() -> int:
        tally: list = []
        Sweep(hourly, CountingReads(firestore, tally), publisher)(
            PubSubMessage(b"{}", {}, "tick", None, "dcm-status-sweep"))
        return len(tally)

    def hold(n: int) -> None:
        fresh = timeutil.format(timeutil.now() + timedelta(hours=1))
        for start in range(0, n, 500):
            batch = firestore.batch()
            for i in range(start, min(n, start + 500)):
                batch.set(firestore.document(f"resources/aws~vm~idle-{i}"), {
                    "key": f"aws/vm/idle-{i}", "provider": "aws", "resourceType": "vm", "status": "RUNNING",
                    "staleAt": fresh, "lastSeenAt": timeutil.now_str(),
                    SHARD: shard_of(f"aws/vm/idle-{i}", RESOURCE_SHARDS, RESOURCE_SHARDS),
                    STALE_SHARD: stale_shard_of(f"aws/vm/idle-{i}")})
            batch.commit()

    hold(100)
    hundred = reads_of_one_tick()
    hold(600)  # (1,000 took the loaded emulator past the test's timeout: each "in" of 30 is 30 scans there)
    assert reads_of_one_tick() == hundred == 0  # no document: nothing stale, so no provider looked at either
    # (the deadlines passed: twelve queries over the 360 stale shards, each reading nothing)
    assert publisher.messages == []


def stored(db, key: str) -> str:
    """The status stored for a resource of any provider."""
    return db.document(f"resources/{key.replace('/', '~')}").get().to_dict()["status"]


def test_a_snapshot_batch_counts_and_deletes_only_its_own_providers_resources(upsert, sweep, firestore, publisher):
    """azure reuses aws's batch id: azure's listing neither completes aws's batch nor deletes aws's
    resources; each provider's complete batch deletes only what that provider no longer lists."""
    report(upsert, "a-old", "RUNNING", "2026-11-22T09:00:00Z", "aws-old", provider="aws")
    report(upsert, "z-old", "RUNNING", "2026-11-22T09:00:00Z", "azure-old", provider="azure")
    aws = lambda i: ResyncMark("same", 2, i, AT, ("vm",))  # noqa: E731
    azure = lambda i: ResyncMark("same", 1, i, AT, ("vm",))  # noqa: E731
    report(upsert, "a-1", "RUNNING", "2026-11-22T10:00:05Z", "aws-s0", aws(0), provider="aws")  # aws's batch: 1 of 2 so far
    report(upsert, "z-1", "RUNNING", "2026-11-22T10:00:05Z", "azure-s0", azure(0), provider="azure")  # azure's: complete
    assert sorted(tick(sweep, publisher, upsert)) == ["azure/vm/z-old"]  # aws's "same" is not complete
    assert stored(firestore, "aws/vm/a-old") == "RUNNING" and stored(firestore, "azure/vm/z-old") == "DELETED"
    assert firestore.document("resyncs/aws~same").get().to_dict()["state"] == "open"
    report(upsert, "a-2", "RUNNING", "2026-11-22T10:00:05Z", "aws-s1", aws(1), provider="aws")  # aws's batch now complete
    assert sorted(tick(sweep, publisher, upsert)) == ["aws/vm/a-old"]
    assert stored(firestore, "azure/vm/z-1") == "RUNNING" and stored(firestore, "aws/vm/a-1") == "RUNNING"


@pytest.mark.parametrize("every, counted", [("60", True), ("0", False)])
def test_a_tick_counts_the_trends_at_their_setting_and_none_at_zero(firestore, publisher, monkeypatch, every, counted):
    """DCM_TRENDS_EVERY_SECONDS: the trends' pace, 0 for none (the e2e stacks: each provider's count scans the
    emulator's ledger once per shard)."""
    monkeypatch.setenv("DCM_TRENDS_EVERY_SECONDS", every)
    Sweep(settings.from_env(), firestore, publisher)(PubSubMessage(b'{"tick": "t"}', {}, "t-trends", AT, "dcm-status-sweep"))
    assert bool(list(firestore.collection("trends").stream())) is counted


def test_a_tick_keeps_no_usage_snapshot_billing_does(firestore, publisher):
    """Issue 40: the daily usage snapshot is billing's (shared/billing/handler.py, on the same ticks): a sweep tick,
    its period long past, reads and writes nothing of it."""
    from shared.state.usage import snapshot as usage_snapshot
    from shared.state.usage.transitions import TRANSITIONS

    firestore.collection("billing_resources").document("aws~vm~u").collection(TRANSITIONS).document("e").set({
        "status": "RUNNING", "at": "2026-11-22T09:00:00.000000Z", "atUs": 1, "key": "aws/vm/u", "provider": "aws",
        "resourceType": "vm", "recordedUs": 1, "shard": 0})
    assert settings.from_env().usage_every_seconds > 0
    Sweep(settings.from_env(), firestore, publisher)(PubSubMessage(b'{"tick": "t"}', {}, "t-usage", AT, "dcm-status-sweep"))
    assert usage_snapshot.read_state(firestore) is None and not usage_snapshot.state_ref(firestore).get().exists
