"""The sweep: what the platform finds out on a schedule rather than from an event.

A tick (Cloud Scheduler publishes one a minute to ``dcm-status-sweep``; the local stack on its own
timer) runs it.

Freshness: a resource whose deadline passed (``staleAt``, set by upsert at each provider report to
now + report_every + grace, ``Settings.stale_after``) gets a synthesised UNKNOWN, reason
``NotReported``, its last known status and last report kept (``extra``), at the deadline (so the
provider's next report, later than that, restores it). The query reads the index on (staleShard,
``staleAt``) up to now, every shard (``staleAt`` has its own shard field, written by every report:
shared/state/documents.py; twelve queries of 30 shards, merged):
only the resources past their deadline, at most ``FRESHNESS_BATCH`` a tick (the rest on the next ones);
with none stale it costs one read a query, at 10,000 resources as at 1,000,000.

A provider silent as a whole (none of its resources reported within its deadline) is said once, as a
provider-level event (``shared/contracts/provider_event.py``) published to ``dcm-status-providers`` and
kept in ``providers/{provider}`` (``GET /v1/providers``), and once more when it reports again. Its
resources still become UNKNOWN one by one (the change feed stays a complete log of transitions), each
marked ``extra.providerSilent``, so that a consumer that alerts collapses them into the one alarm.
A provider is looked at (one read: its resource with the newest deadline, an index on provider, shard,
staleAt) only when its state may have changed: a silent one every tick (a report ends its silence); one
with a resource in the tick's stale batch (silence starts with a deadline passing). When the batch holds
every stale resource, no other provider can have gone silent: a reporting fleet costs no read at all.
When it is full (a backlog: more than ``FRESHNESS_BATCH`` past their deadline), a provider whose resources
wait behind it is looked at once the newest deadline seen at its last look has passed (``Watch``), so its
silence is said without waiting for the backlog to drain.

A hot resource (its updates coalesced on the ledger while its document was not written: upsert) gets
its document written with its newest state once it has a write token again, and stops being hot once
it has been quiet for ``HOT_QUIET``: one read per hot resource a tick, plus its ledger's latest states.
The documents written longest ago come first (an index on hot, shard, writtenAt), so however many are hot, none
waits behind the same first ``HOT_BATCH`` tick after tick; ``HOT_WORKERS`` of them are done at once. A tick with
none hot (the usual one) asks only whether there is any (one read of the ``hot`` index), not every shard's range.

Reconciliation of providers' snapshots (``shared/contracts/resync.py``): for each open batch
(``resyncs/{provider~id}``, written by upsert from the batch's first event),

- complete (as many distinct resources list it as it has): the resources the provider no longer has
  (``not_in_snapshot``) get a synthesised DELETED, reason ``NotInSnapshot``, source
  ``dcm/platform/reconcile``, published to upsert like any update (so it is deduplicated, refused if
  a newer report came meanwhile, stored and announced the usual way); the batch is then closed;
- incomplete after ``RESYNC_TIMEOUT``: abandoned, nothing deleted (a partial snapshot proves nothing).

Reads per batch: one count of the resources listing it (an aggregation: one read per 1,000 index
entries), and, once it is complete, the provider's resources of the batch's types (the same order of
reads as the batch's own events). An idempotent sweep: a tick redelivered, or two at once, publish
the same synthesised events (deterministic ids), which upsert deduplicates.

Snapshots of the aggregates (shared/state/snapshots.py): each tick writes the fleet summary, and, every
``stats_every_seconds``, the pipeline's accounting (counts over the whole ledger). The summary is counted again
only when a resource document was written since its counts were read (its marker: the documents' number and
their writes' sum, one aggregation query, shared/state/aggregates.py ``summary_since``); then one count per
type, per provider and per status a type had (the rest of a type's only when those fall short of its count):
one read per 1,000 index entries, about 3 x the fleet / 1,000 in all.
The api serves them: a reader costs one read. A tick whose snapshot write loses to another writer's
(a tick redelivered, or two at once) leaves that one in place.

Trends (shared/state/trends.py): the current minute's counts per provider at the summary's pace, one document
a minute: 4 aggregation queries per window over every provider (one read each up to 1,000 entries counted),
then one per provider only for a kind that moved since the minute's stored counts (none on an idle tick).

The daily usage snapshot is billing's, on the same ticks (shared/billing/handler.py, issue 40).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any, Iterable

from dcm_status_contracts import provider_event, status_update, timeutil
from dcm_status_contracts.errors import Transient
from dcm_status_contracts.identity import PLATFORM_SOURCE
from dcm_status_contracts.model import CommonStatus, PubSubMessage, ResourceKey
from dcm_status_contracts.provider_event import ProviderState, ProviderTransition
from dcm_status_contracts.resync import ResyncMark, not_in_snapshot
from dcm_status_contracts.schemas import registry
from dcm_status_contracts.status_update import StatusUpdate
from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.runtime import firestore as fs
from shared.runtime import ticks
from shared.runtime.clients import Runtime
from shared.runtime.logs import get_logger
from shared.runtime.publishing import publish
from shared.runtime.settings import Settings
from shared.state import aggregates, resources, snapshots, trends
from shared.state.documents import (
    DOCUMENT_WRITES,
    HOT_QUIET,
    PROVIDERS,
    RESOURCE_SHARD_SPACE,
    RESOURCES,
    RESYNCS,
    STALE_SHARD,
    PlatformReason,
    quiet_for,
    write_tokens,
)

RECONCILE_SOURCE = PLATFORM_SOURCE + "reconcile"
RECONCILE_TYPE = "dcm.status.reconciled"
RESYNC_TIMEOUT = timedelta(hours=1)
FRESHNESS_SOURCE = PLATFORM_SOURCE + "freshness"
FRESHNESS_TYPE = "dcm.status.notreported"
FRESHNESS_BATCH = 500  # resources marked per tick at most
HOT_BATCH = 500  # hot resources looked at per tick at most
HOT_WORKERS = 8  # of them at once (each: a ledger query, perhaps a write)
COUNTING = {"retry": fs.RETRY, "timeout": 30.0}  # a snapshot's counts (a whole ledger's at hyperscale)
SILENCE_WORKERS = 16  # providers' newest-deadline queries at once: 5,000 providers in ~6 s, not 100 s
UNBOUNDED_LOOK = 3600  # seconds between looks at a provider whose resources never go stale

log = get_logger("sweep")


def deletion(doc: dict[str, Any], batch: ResyncMark, now: str) -> StatusUpdate:
    """The synthesised update of a resource a complete snapshot did not list: DELETED at the snapshot's
    time (so a report newer than the snapshot still wins), its labels kept (billing attributes it)."""
    key = ResourceKey.parse(doc["key"])
    return StatusUpdate(
        key=key, status=CommonStatus.DELETED.value, raw_status=CommonStatus.DELETED.value, status_recognized=True,
        message=f"not in the provider's snapshot {batch.batch} (taken {batch.at}): deleted by reconciliation",
        reason=PlatformReason.NOT_IN_SNAPSHOT.value, last_transition_time=batch.at, observed_at=batch.at,
        metadata=doc.get("metadata") or {}, resource_specific=doc.get("resourceSpecific") or {},
        event_id=f"not-in-snapshot/{batch.batch}/{doc['key']}", event_source=RECONCILE_SOURCE,
        event_type=RECONCILE_TYPE, event_subject=None, dataschema=registry().current[key.resource_type].uri,
        schema_defaulted=True, ingress_message_id=f"sweep/{batch.batch}", ingress_topic=None, received_at=now,
        transition_reported=True)


def not_reported(doc: dict[str, Any], now: str, provider_silent: bool = False) -> StatusUpdate:
    """The synthesised update of a resource past its freshness deadline: UNKNOWN at the deadline, its last
    known status and last report kept, its labels and details kept; ``providerSilent`` when its whole
    provider is (the provider event is the alarm)."""
    key = ResourceKey.parse(doc["key"])
    silent = {"providerSilent": True} if provider_silent else {}
    return StatusUpdate(
        key=key, status=CommonStatus.UNKNOWN.value, raw_status=CommonStatus.UNKNOWN.value, status_recognized=True,
        message=(f"not reported since {doc.get('lastSeenAt')}: last known {doc['status']}"
                 + (f" (provider {key.provider} silent)" if provider_silent else "")),
        reason=PlatformReason.NOT_REPORTED.value, last_transition_time=doc["staleAt"], observed_at=doc["staleAt"],
        metadata=doc.get("metadata") or {}, resource_specific=doc.get("resourceSpecific") or {},
        event_id=f"not-reported/{doc['key']}/{doc['staleAt']}", event_source=FRESHNESS_SOURCE,
        event_type=FRESHNESS_TYPE, event_subject=None, dataschema=registry().current[key.resource_type].uri,
        schema_defaulted=True, ingress_message_id=f"sweep/{doc['staleAt']}", ingress_topic=None, received_at=now,
        transition_reported=True,
        extra={"lastKnownStatus": doc["status"], "lastSeenAt": doc.get("lastSeenAt"), **silent})


class Watch:
    """Under a freshness backlog, when each provider next needs a look for silence (in memory: a sweep
    started afresh looks at every provider once). A look at a provider gives its newest deadline: before
    that passes, the provider cannot be silent (a report only moves it later); with none, no resource of
    it can pass a deadline before the shortest one its resources can have (``shortest_deadline``), counted
    from the look. Silent providers and those with a stale resource this tick are looked at regardless:
    the stale batch also catches what the bound cannot see (the newest resource deleted, a type with a
    shorter deadline)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.next_look: dict[str, datetime] = {}

    def due(self, providers: Iterable[str], now: datetime, always: set[str]) -> list[str]:
        return [p for p in providers if p in always or self.next_look.get(p, now) <= now]

    def looked(self, provider: str, newest: dict[str, Any] | None, now: datetime) -> None:
        deadline = timeutil.parse(newest["staleAt"]) if newest and newest.get("staleAt") else None
        self.next_look[provider] = (deadline if deadline is not None and deadline > now
                                    else now + timedelta(seconds=self.shortest_deadline(provider)))

    def shortest_deadline(self, provider: str) -> int:
        """Seconds: the shortest freshness deadline a resource of ``provider`` can have (its types' and its
        own); ``UNBOUNDED_LOOK`` when none of its resources ever goes stale."""
        types = [""] + list(self.settings.profile(provider).freshness.get("types", {}))
        deadlines = [d for d in (self.settings.stale_after(provider, t) for t in types) if d]
        return min(deadlines, default=UNBOUNDED_LOOK)


class Sweep:
    def __init__(self, settings: Settings, db: Any, publisher: Any):
        self.db = db
        self.publisher = publisher
        self.lane = settings.lane_path
        self.providers_topic = settings.topic_path(settings.topic_providers)
        self.providers = settings.providers
        self.deadline = lambda provider: settings.stale_after(provider, "")
        self.watch = Watch(settings)
        self.summary_every = settings.summary_every_seconds
        self.trends_every = settings.trends_every_seconds  # 0: no trends
        self.stats_every = settings.stats_every_seconds
        self.stale_space = tuple(range(settings.stale_shards))  # what upsert writes (Settings.stale_shards)
        self.window_days = settings.ledger_ttl_days  # the accounting's window: the ledger's retention

    @classmethod
    def build(cls, runtime: Runtime) -> "Sweep":
        return cls(runtime.settings, runtime.firestore, runtime.publisher)

    def __call__(self, message: PubSubMessage) -> None:
        """One tick. A failure (Firestore or Pub/Sub down) acks it all the same: the next tick does the
        same work, and a tick redelivered or dead-lettered would only add noise."""
        now = timeutil.now()
        try:
            for snap in self._open_batches():
                self.reconcile(snap, now)
            stale = self.stale_resources(now)
            silent = self.watch_providers(now, {d["provider"] for d in stale}, backlog=len(stale) >= FRESHNESS_BATCH)
            self.mark_not_reported(stale, now, silent)
            self.flush_hot(now)
        except Transient as exc:
            log.warning("sweep tick failed; the next tick does the same work", extra={"error": str(exc)})
        # Each on its own: a failure above leaves the dashboards their figures, and each of these the rest.
        # "sweep tick failed": the sweep_failures metric counts each.
        ticks.run(log, "sweep", now, (("write the aggregates' snapshot; the next tick writes it", True, self.snapshot),
                                      ("write the trends; the next tick completes them", self.trends_every,
                                       self.trends)))

    def trends(self, now_dt: Any) -> list[str]:
        """The pipeline's counts per minute and provider (shared/state/trends.py): the current minute at the
        summary's pace, and the minutes the last writes left open; returns the minutes written."""
        with fs.guard("Firestore query"):
            done = trends.record(self.db, self.providers, now_dt, self.trends_every, COUNTING)
        if done:
            log.info("trends written", extra={"minutes": done})
        return done

    def snapshot(self, now_dt: Any) -> list[str]:
        """Write the snapshots that are due (the summary each tick, the accounting every ``stats_every``);
        returns the kinds written. The summary is counted again only when a resource document was written
        since the snapshot's counts were read (its marker moved: shared/state/aggregates.py ``summary_since``);
        else the snapshot is written again with the same counts as of now, at one aggregation query."""
        written = []
        for kind, every, compute in (
                (snapshots.SnapshotKind.SUMMARY, self.summary_every,
                 lambda current: aggregates.summary_since(self.db, self.providers, current, COUNTING)),
                (snapshots.SnapshotKind.STATS, self.stats_every,
                 lambda current: (aggregates.stats(self.db, COUNTING, self.window_days), None))):
            with fs.guard("Firestore read"):
                current, read_as = snapshots.read(self.db, kind, {"timeout": fs.TIMEOUT})
            if current is not None and not current.due(now_dt, slack_seconds=self.summary_every / 2):
                continue
            started = time.monotonic()
            with fs.guard("Firestore query"):
                figures, marker = compute(current)
            took = round((time.monotonic() - started) * 1000)
            with fs.guard("Firestore write"):
                stored = snapshots.store(self.db, kind, figures, every, read_as, "sweep", took,
                                         {"timeout": fs.TIMEOUT}, marker)
            if stored:
                written.append(kind.value)
            log.info("aggregates' snapshot %s", "written" if stored else "left to the writer that came first",
                     extra={"labels": {"snapshot": kind.value}, "asOf": figures["asOf"], "computeMs": took,
                            "recounted": marker is None or current is None or current.marker != marker})
        return written

    def watch_providers(self, now_dt: Any, with_stale: Iterable[str] = (), backlog: bool = True) -> set[str]:
        """Say once when a provider goes silent as a whole, and once when it reports again; returns the
        silent ones. ``with_stale``: the providers with a resource in this tick's stale batch; ``backlog``:
        whether that batch may have left stale resources out. A provider's resource with the newest deadline
        tells: past it, none was reported in time; with no deadline at all (nothing, all deleted or already
        marked) the state stays as it was. Only the providers whose state may have changed are looked at."""
        now = timeutil.format(now_dt)
        with fs.guard("Firestore query"):
            known = {s.id: s.to_dict() for s in self.db.collection(PROVIDERS).stream(timeout=fs.TIMEOUT)}
        silent = {p for p, d in known.items() if d.get("state") == ProviderState.SILENT.value}
        always = silent | set(with_stale)
        providers = (self.watch.due(self.providers, now_dt, always) if backlog
                     else [p for p in self.providers if p in always])
        workers = max(1, min(SILENCE_WORKERS, len(providers)))
        with ThreadPoolExecutor(workers, thread_name_prefix="sweep-silence") as pool:
            newest_of = dict(zip(providers, pool.map(self._newest_deadline, providers)))
        for provider in providers:
            newest = newest_of[provider]
            self.watch.looked(provider, newest, now_dt)
            if not newest or not newest.get("staleAt"):
                continue
            state = ProviderState.SILENT if newest["staleAt"] <= now else ProviderState.REPORTING
            was = ProviderState(known.get(provider, {}).get("state", ProviderState.REPORTING.value))
            if state is not was:
                since = newest["staleAt"] if state is ProviderState.SILENT else newest["lastSeenAt"]
                self._announce(ProviderTransition(provider, state, since, newest.get("lastSeenAt"),
                                             self.deadline(provider)), now)
            (silent.add if state is ProviderState.SILENT else silent.discard)(provider)
        return silent

    def _newest_deadline(self, provider: str) -> dict[str, Any] | None:
        """The provider's resource with the newest freshness deadline (one indexed read)."""
        of_provider = self.db.collection(RESOURCES).where(filter=FieldFilter("provider", "==", provider))
        queries = [q.order_by("staleAt", direction=firestore.Query.DESCENDING)
                   for q in resources.shard_groups(of_provider, RESOURCE_SHARD_SPACE)]
        with fs.guard("Firestore query"):
            return next((s.to_dict() for s in resources.merged(queries, "staleAt", True, 1, timeout=fs.TIMEOUT)), None)

    def _announce(self, event: ProviderTransition, now: str) -> None:
        """Publish first, then record: a failed record republishes the same event (same id) next tick."""
        body, attributes = provider_event.to_message(event)
        publish(self.publisher, self.providers_topic, body, attributes)
        with fs.guard("Firestore write"):
            self.db.collection(PROVIDERS).document(event.provider).set(
                {**event.to_dict(), "changedAt": now, "eventId": event.event_id}, timeout=fs.TIMEOUT)
        (log.warning if event.state is ProviderState.SILENT else log.info)(
            "provider %s: %s since %s", event.provider, event.state.value, event.since, extra={
                "labels": {"provider": event.provider, "state": event.state.value},
                "lastSeenAt": event.last_seen_at, "deadlineSeconds": event.deadline_seconds})

    def stale_resources(self, now_dt: Any) -> list[dict[str, Any]]:
        """The resources past their freshness deadline, oldest deadline first, ``FRESHNESS_BATCH`` at most."""
        now = timeutil.format(now_dt)
        queries = [q.where(filter=FieldFilter("staleAt", "<=", now)).order_by("staleAt")
                   for q in resources.shard_groups(self.db.collection(RESOURCES), self.stale_space, STALE_SHARD)]
        with fs.guard("Firestore query"):
            return [s.to_dict() for s in resources.merged(queries, "staleAt", False, FRESHNESS_BATCH,
                                                          timeout=fs.TIMEOUT)]

    def mark_not_reported(self, stale: list[dict[str, Any]], now_dt: Any, silent: set[str] = frozenset()) -> int:
        """Publish each stale resource's NotReported update (``providerSilent`` those of the ``silent``
        providers); returns how many."""
        now = timeutil.format(now_dt)
        for doc in stale:  # a failed publish raises: the tick is redelivered, the same ids published again
            update = not_reported(doc, now, doc["provider"] in silent)
            publish(self.publisher, self.lane(doc["provider"]), status_update.to_bytes(update),
                    {"key": doc["key"], "provider": doc["provider"], "resourceType": doc["resourceType"],
                     "status": CommonStatus.UNKNOWN.value}, ordering_key=doc["key"])
        if stale:
            log.warning("resources not reported within their deadline: UNKNOWN until they are", extra={
                "labels": {"reason": PlatformReason.NOT_REPORTED.value}, "count": len(stale),
                "providers": sorted({d["provider"] for d in stale})})
        return len(stale)

    def flush_hot(self, now_dt: Any) -> int:
        """Write each hot resource's document with its newest state (when it may take a write), or, quiet
        and up to date, stop treating it as hot; returns how many documents were written."""
        hot_docs = self.db.collection(RESOURCES).where(filter=FieldFilter("hot", "==", True))
        with fs.guard("Firestore query"):
            if not list(hot_docs.select([]).limit(1).stream(timeout=fs.TIMEOUT)):
                return 0  # none hot (the usual tick): one read, not the (hot, shard, writtenAt) ranges' queries
            queries = [q.order_by("writtenAt") for q in resources.shard_groups(hot_docs, RESOURCE_SHARD_SPACE)]
            hot = resources.merged(queries, "writtenAt", False, HOT_BATCH, timeout=fs.TIMEOUT)
        if not hot:
            return 0
        with ThreadPoolExecutor(min(HOT_WORKERS, len(hot)), thread_name_prefix="sweep-hot") as pool:
            return sum(pool.map(lambda snap: self._flush_one(snap, now_dt), hot))

    def _flush_one(self, snap: Any, now_dt: Any) -> int:
        """One hot resource: 1 if its document was written. A write that loses to upsert's (the same
        precondition on the document) is left to the next tick."""
        doc = snap.to_dict()
        with fs.guard("Firestore query"):
            newest = resources.newest(self.db, doc, timeout=fs.TIMEOUT)
        tokens = write_tokens(doc, now_dt)
        if newest is not doc and tokens >= 1:
            change = {**newest, "hot": True, "writtenAt": timeutil.format(now_dt), "writeTokens": tokens - 1,
                      DOCUMENT_WRITES: firestore.Increment(1)}
        elif newest is doc and quiet_for(doc, now_dt) >= HOT_QUIET:  # the field goes: a cool document's
            # writes then leave the (hot, shard, writtenAt) index alone (docs/scale.md)
            change = {"hot": firestore.DELETE_FIELD, DOCUMENT_WRITES: firestore.Increment(1)}
        else:
            return 0
        try:
            with fs.guard("Firestore update"):
                snap.reference.update(change, option=self.db.write_option(last_update_time=snap.update_time),
                                      timeout=fs.TIMEOUT)
        except gexc.FailedPrecondition:
            return 0  # upsert wrote it meanwhile
        return 1

    def _open_batches(self) -> Iterable[Any]:
        with fs.guard("Firestore query"):
            return list(self.db.collection(RESYNCS).where(filter=FieldFilter("state", "==", "open")).stream(
                timeout=fs.TIMEOUT))

    def reconcile(self, snap: Any, now_dt: Any) -> str:
        """Close one batch if it is complete (deleting what it shows gone) or too old; returns its state."""
        doc = snap.to_dict()
        batch = ResyncMark(doc["batch"], doc["total"], 0, doc["at"], tuple(doc["scope"]))
        resources = self.db.collection(RESOURCES).where(filter=FieldFilter("provider", "==", doc["provider"]))
        now = timeutil.format(now_dt)
        with fs.guard("Firestore query"):
            listed = resources.where(filter=FieldFilter("resync.id", "==", batch.batch)).count().get(
                timeout=fs.TIMEOUT)[0][0].value
        if listed < batch.total:
            if timeutil.parse(doc["openedAt"]) + RESYNC_TIMEOUT < now_dt:
                self._close(snap, "abandoned", now, listed=listed)
                log.warning("resync batch abandoned: incomplete, nothing deleted", extra={
                    "labels": {"provider": doc["provider"]}, "batch": batch.batch, "listed": listed,
                    "total": batch.total})
                return "abandoned"
            return "open"
        with fs.guard("Firestore query"):
            held = [s.to_dict() for s in resources.where(
                filter=FieldFilter("resourceType", "in", list(batch.scope))).stream(timeout=fs.TIMEOUT)]
        gone = not_in_snapshot(batch, held)
        docs = {d["key"]: d for d in held}
        for key in gone:  # a failed publish raises: the tick is redelivered and the batch reconciled again
            publish(self.publisher, self.lane(doc["provider"]), status_update.to_bytes(deletion(docs[key], batch, now)),
                    {"key": key, "provider": doc["provider"], "resourceType": docs[key]["resourceType"],
                     "status": CommonStatus.DELETED.value}, ordering_key=key)
        self._close(snap, "reconciled", now, listed=listed, deleted=len(gone))
        log.info("resync batch reconciled", extra={
            "labels": {"provider": doc["provider"]}, "batch": batch.batch, "listed": listed, "deleted": len(gone)})
        return "reconciled"

    def _close(self, snap: Any, state: str, now: str, **counts: int) -> None:
        with fs.guard("Firestore update"):
            snap.reference.update({"state": state, "closedAt": now, **counts}, timeout=fs.TIMEOUT)
