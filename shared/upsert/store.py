"""The observed state in Firestore: one atomic commit per status update.

Collections (shared/state/model.py):

- ``resources/{provider~type~id}``: the current observed state of a resource. A re-report of
  unchanged state (a resync, a heartbeat) is one write: the resource's order and last-seen fields, and the
  dedup id of the re-report in a ring of its latest ``RE_REPORT_RING`` (no ledger entry; a hot resource's
  re-report is its ledger entry instead, as its other updates).
- ``events/{sha256(provider, source, id)}``: the dedup ledger (the provider is the
  one its ingress topic proves: two providers' events are never one another's
  duplicate, whatever source and id they claim); ``expireAt`` carries the
  TTL policy (declared in Terraform). The entry of an update that changed
  something, applied or stale, is also the resource's history entry: it carries
  the history fields (``history_entry``) and no ``expireAt`` (kept as long as
  history is), so an applied update costs 2 writes (ledger entry, document), not
  3; the entry of a hot resource's re-report carries its state and expires. (Entries written before
  issue 32 are in ``resources/{..}/history/{dedupId}``: infra/backfill_history.py
  folds them into the ledger.) It also is the transactional outbox: the
  change event is written with the state and published after the commit. The
  first delivery does not spend a write on saying so: only a redelivery (the
  function may have died before publishing) publishes it again, same id, and
  then marks it ``changeAnnounced`` so later copies do not. An entry with a
  change is also an entry of the change feed: ``committedAt`` is the server's
  time of the write (a transform of the same write: no extra cost).
- ``duplicates/{ingressTopic~ingressMessageId}``: distinct duplicate
  publications (not redeliveries of one message), for stats.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Callable, Mapping, Sequence

from dcm_status_contracts import status_changed, timeutil
from dcm_status_contracts.errors import Transient
from dcm_status_contracts.identity import PLATFORM_SOURCE
from dcm_status_contracts.model import CommonStatus
from dcm_status_contracts.outputs import OUTPUT_FIELDS, Redaction, carried, differ, kept
from dcm_status_contracts.resync import ResyncMark
from dcm_status_contracts.status_changed import ChangeEvent
from dcm_status_contracts.status_update import StatusUpdate
from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.runtime import firestore as fs
from shared.state import resources
from shared.state.model import (
    COMMITTED_AT,
    DOCUMENT_RE_REPORTS,
    DOCUMENT_WRITES,
    DUPLICATES,
    HISTORY_OUTCOMES,
    HOT_BURST,
    LEDGER,
    ORDER_FIELDS,
    RE_REPORT_RING,
    RE_REPORTED,
    RESOURCE_SHARDS,
    RESOURCES,
    RESYNCS,
    SHARD,
    SHARDS,
    STALE_SHARD,
    STALE_SHARDS,
    FlapPolicy,
    Outcome,
    compare_order,
    newest_state,
    shard_of,
    stale_shard_of,
    without_bookkeeping,
    write_tokens,
)

MAX_ATTEMPTS = 5
CONFLICTS = (gexc.AlreadyExists, gexc.FailedPrecondition, gexc.Conflict)


class WriteOp(enum.Enum):
    CREATE = "create"  # must not exist
    UPDATE = "update"  # must be unchanged since read
    SET = "set"


@dataclass(frozen=True)
class _Write:
    op: WriteOp
    ref: Any
    data: dict[str, Any]
    update_time: Any = None


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    previous_status: str | None
    status: str | None
    change: ChangeEvent | None  # to publish (new, or still pending from an earlier delivery)
    ledger_id: str | None = None  # the ledger entry a duplicate was found under (its change is marked there)


def resource_document(update: StatusUpdate, now: str) -> dict[str, Any]:
    """The stored (and announced) view of a resource after this update."""
    return {
        "key": str(update.key),
        "provider": update.key.provider,
        "resourceType": update.key.resource_type,
        "resourceId": update.key.resource_id,
        "status": update.status,
        "rawStatus": update.raw_status,
        "statusRecognized": update.status_recognized,
        "message": update.message,
        "reason": update.reason,
        "lastTransitionTime": update.last_transition_time,
        "observedAt": update.observed_at,
        "metadata": dict(update.metadata),
        "resourceSpecific": dict(update.resource_specific),
        "extra": dict(update.extra),
        "eventId": update.event_id,
        "eventSource": update.event_source,
        "sequence": update.sequence,
        "publishedAt": update.published_at,
        "reportedTime": update.reported_time,
        "dataschema": update.dataschema,
        "updatedAt": now,
        "lastSeenAt": now,
        **carried({"output_spec": update.output_spec, "outputs": update.outputs}),  # only the maps it carries
    }


# What a re-report must repeat to cost no history entry and no change event.
REPORTED_FIELDS = status_changed.OBSERVED_FIELDS + ("extra",)


def compare(update: StatusUpdate, doc: Mapping[str, Any]) -> int:
    """Is ``update`` newer (1) than the stored ``doc``, older (-1), or the very event it holds (0)?
    (``compare_order``: sequence, then event time, ingress publication, source and id.)"""
    return compare_order({"eventSource": update.event_source, "eventId": update.event_id,
                          "sequence": update.sequence, "observedAt": update.observed_at,
                          "publishedAt": update.published_at}, doc)


class StateStore:
    def __init__(self, db: firestore.Client, ledger_ttl_days: int = 7,
                 stale_after: Callable[[str, str], int | None] = lambda provider, rtype: None,
                 flapping: FlapPolicy = FlapPolicy(), redaction: Redaction = Redaction.default(),
                 shards: int = SHARDS, resource_shards: int = RESOURCE_SHARDS, stale_shards: int = STALE_SHARDS):
        """``stale_after(provider, type)``: seconds after a report the resource is no longer known to be as
        shown (Settings.stale_after); None: never (no freshness deadline). ``flapping``: how many changes
        in what window flag a resource (Settings.flapping). ``redaction``: the output values change events
        show as ``[redacted]`` (Settings.output_redaction); the document and its history keep them.
        ``shards``, ``resource_shards``: how many index ranges the change feed's and the resource
        documents' sequential fields spread over (shared/state/model.py; readers read every shard of
        SHARD_SPACE, RESOURCE_SHARD_SPACE)."""
        shard_of("", shards), shard_of("", resource_shards, RESOURCE_SHARDS)  # refuse what readers would miss
        self.db = db
        stale_shard_of("", stale_shards)  # the sweep reads that many (Settings.stale_shards)
        self.shards, self.resource_shards, self.stale_shards = shards, resource_shards, stale_shards
        self.ttl = timedelta(days=ledger_ttl_days)
        self.stale_after = stale_after
        self.flapping = flapping
        self.redaction = redaction

    def resource_ref(self, doc_id: str):
        return self.db.collection(RESOURCES).document(doc_id)

    def apply(self, update: StatusUpdate) -> Result:
        """Dedup, staleness check, upsert, history and outbox, committed atomically.

        Optimistic concurrency: read what the decision needs (``_place``), decide, commit one batch whose
        preconditions (ledger entry must not exist, resource unchanged since read) make it fail whole if
        anyone else wrote first; then read again and decide again. Half the emulator cost of a
        transaction (BeginTransaction + locks), with the same guarantees.

        The resource document is read first, and the ledger entry only when it can matter
        (``_needs_ledger``): an update newer than the stored state was not processed before (the stored
        order only moves forward, and a newer one has its ledger entry created with the precondition that
        it does not exist). After a conflict the next attempt reads both, as a delivery that lost to
        another delivery of the same event must see its ledger entry.
        """
        ledger_ref = self.db.collection(LEDGER).document(update.dedup_id)
        resource_ref = self.resource_ref(update.key.doc_id)
        both = False
        for _ in range(MAX_ATTEMPTS):
            with fs.guard("Firestore write"):
                try:
                    result, writes = self._place(update, ledger_ref, resource_ref, both)
                    if writes:
                        self._commit(writes)
                    return result
                except CONFLICTS:
                    both = True  # another delivery of this event, or another update of this resource, won
                    continue
        raise Transient(f"{MAX_ATTEMPTS} conflicting writes in a row on {update.key}; Pub/Sub will redeliver")

    def _place(self, update: StatusUpdate, ledger_ref: Any, resource_ref: Any,
               both: bool) -> tuple[Result, list[_Write]]:
        """Read, place the update (``_standing``) and take its outcome's writes. The document first (and,
        when it is hot, the ledger entry and the coalesced states, as ever: its document may be behind);
        the ledger entry only if the update may be a duplicate (``_needs_ledger``), then decided again."""
        if both:
            snaps = {snap.reference.path: snap for snap in self.db.get_all(
                [ledger_ref, resource_ref], retry=fs.RETRY, timeout=fs.TIMEOUT)}
            ledger, current = snaps[ledger_ref.path], snaps[resource_ref.path]
        else:
            current = resource_ref.get(retry=fs.RETRY, timeout=fs.TIMEOUT)
            ledger = self._ledger_entry(ledger_ref) if _maybe_ahead(current) else _Unread(ledger_ref)
        coalesced = (resources.coalesced_states(self.db, str(update.key), retry=fs.RETRY, timeout=fs.TIMEOUT)
                     if not ledger.exists and _maybe_ahead(current) else [])
        decision = _read(self, update, ledger, current, coalesced)
        standing = _standing(decision)
        if _needs_ledger(decision, standing):
            decision = replace(decision, ledger=self._ledger_entry(ledger_ref))
            standing = _standing(decision)
        if _may_be_legacy(decision.ledger, standing):
            legacy = self._legacy_entry(update)
            if legacy is not None:  # processed before the ledger key named the provider
                decision, standing = replace(decision, ledger=legacy), Standing.DELIVERED_BEFORE
        return _OUTCOMES[standing](decision)

    def _ledger_entry(self, ref: Any) -> Any:
        return ref.get(retry=fs.RETRY, timeout=fs.TIMEOUT)

    def _commit(self, writes: list[_Write]) -> None:
        batch = self.db.batch()
        for w in writes:
            if w.op is WriteOp.CREATE:
                batch.create(w.ref, w.data)
            elif w.op is WriteOp.UPDATE:
                batch.update(w.ref, w.data, option=self.db.write_option(last_update_time=w.update_time))
            else:
                batch.set(w.ref, w.data)
        batch.commit(retry=fs.RETRY, timeout=fs.TIMEOUT)

    def _legacy_entry(self, update: StatusUpdate) -> Any:
        """The ledger entry an earlier version wrote for this very event (keyed by source and id only), if
        it is still there and is this resource's: a redelivery across the deploy that put the provider in
        the key is a duplicate, its pending change announced, as before. Read only for an update that is
        not newer than the stored state (rare: a redelivery, or an event out of order), and only until the
        entries written before that deploy have expired (``ledger_ttl_days``)."""
        snap = self.db.collection(LEDGER).document(update.legacy_dedup_id).get(retry=fs.RETRY, timeout=fs.TIMEOUT)
        return snap if snap.exists and snap.to_dict().get("key") == str(update.key) else None

    def mark_change_announced(self, update: StatusUpdate, ledger_id: str | None = None) -> None:
        with fs.guard("Firestore update"):
            self.db.collection(LEDGER).document(ledger_id or update.dedup_id).update(
                {"changeAnnounced": True, "changeAnnouncedAt": timeutil.now_str()}, timeout=fs.TIMEOUT)


def _feed_entry(store: StateStore, update: StatusUpdate) -> dict[str, Any]:
    """The fields that make a ledger entry with a change an entry of the change feed (its shard: the
    resource's, so one resource's changes keep their commit order in one index range)."""
    return {COMMITTED_AT: firestore.SERVER_TIMESTAMP, "provider": update.key.provider,
            "resourceType": update.key.resource_type, SHARD: shard_of(str(update.key), store.shards)}


def _may_be_legacy(ledger: Any, standing: "Standing") -> bool:
    """No ledger entry, and the update is not newer than the stored state: it may be an event an earlier
    version recorded under its legacy ledger id (``StateStore._legacy_entry``)."""
    return not ledger.exists and standing in (Standing.SAME_EVENT, Standing.OLDER)


@dataclass(frozen=True)
class _Unread:
    """The ledger entry not read (yet): the update is newer than the stored state, so it has none, or its
    create fails (``CONFLICTS``) and the next attempt reads it."""

    reference: Any
    exists = False

    @property
    def id(self) -> str:
        return self.reference.id


def _needs_ledger(d: "_Decision", standing: "Standing") -> bool:
    """Could the update have been processed before (the stored state is it, or newer), and its ledger entry
    is not read yet? Then it is read and the update placed again."""
    return isinstance(d.ledger, _Unread) and standing in (Standing.SAME_EVENT, Standing.OLDER)


def _maybe_ahead(snap: Any) -> bool:
    """Could the ledger hold a state newer than this resource document (it is, or was lately, hot)?"""
    return snap.exists and bool(snap.to_dict().get("hot"))


class Standing(enum.Enum):
    """Where an update stands against what is stored: it names the outcome, one function each (``_OUTCOMES``)."""

    DELIVERED_BEFORE = "delivered_before"  # its ledger entry exists: a redelivery, or a duplicate publication
    RE_REPORTED_BEFORE = "re_reported_before"  # a re-report of it is in the document's ring: a duplicate
    SAME_EVENT = "same_event"  # the stored state is this very event (its ledger entry expired since)
    OLDER = "older"  # older than the newest stored state: stale
    RE_REPORT = "re_report"  # newer, but nothing observed changed (a resync, a heartbeat): unchanged
    NEWER = "newer"  # newer and different: applied


@dataclass(frozen=True)
class _Decision:
    """One update and what is stored for it, read and derived once, no I/O: the outcome functions take
    what they write from here."""

    store: StateStore
    update: StatusUpdate  # as it applies: a metrics-only update carries the stored status
    ledger: Any  # the snapshot of its ledger entry (``_Unread``: not read, the update is newer than the state)
    snap: Any  # the snapshot of the resource document (the precondition of its update)
    stored: Mapping[str, Any] | None  # the document
    current: Mapping[str, Any] | None  # the newest state: the document, or a newer coalesced one
    tokens: float  # the document's write tokens now (below 1: hot)
    now_dt: datetime
    reported: dict[str, Any]  # the resource as this update reports it
    after: dict[str, Any]  # ... and as it is stored if it applies (an unreported transition kept)
    listed: dict[str, Any]  # the resync batch that lists the resource, if any
    batch_writes: tuple[_Write, ...]  # the resync batch itself, from its first event

    @property
    def now(self) -> str:
        return timeutil.format(self.now_dt)

    @property
    def expire_at(self) -> datetime:
        return self.now_dt + self.store.ttl

    @property
    def ahead(self) -> bool:
        """A coalesced state is newer than the document."""
        return self.current is not self.stored

    @property
    def hot(self) -> bool:
        """Out of write tokens: the state after the update rides on the ledger entry. Not a snapshot's
        event: it is written, since the sweep counts the resources a snapshot listed."""
        return self.tokens < 1 and not self.update.resync

    def ledger_entry(self, outcome: Outcome, **fields: Any) -> dict[str, Any]:
        """The ledger entry of this update; an applied or stale one is also its resource's history entry
        (``history_entry``'s fields, no TTL: kept as long as history; the resource's shard, the change feed's
        if it carries a change, so that /v1/stats counts it by ``recordedAt``), any other expires
        (``expireAt``)."""
        u = self.update
        kept = ({**self.history_entry(outcome), SHARD: shard_of(str(u.key), self.store.shards)}
                if outcome in HISTORY_OUTCOMES else {"expireAt": self.expire_at})
        return {"key": str(u.key), "provider": u.key.provider, "eventId": u.event_id, "source": u.event_source,
                "ingressMessageId": u.ingress_message_id, "processedAt": self.now, "status": u.status,
                "replayOf": u.replay_of, "outcome": outcome.value, **kept, **fields}

    def history_entry(self, outcome: Outcome) -> dict[str, Any]:
        """What the resource's history keeps of an applied or stale update (``HISTORY_FIELDS``), on its ledger
        entry: the history API and ``?at=`` read the ledger by key (shared/api/queries.py)."""
        u = self.update
        return {"status": u.status, "rawStatus": u.raw_status, "message": u.message, "reason": u.reason,
                "observedAt": u.observed_at, "lastTransitionTime": u.last_transition_time, "eventId": u.event_id,
                "eventSource": u.event_source, "sequence": u.sequence, "publishedAt": u.published_at,
                "recordedAt": self.now, "previousStatus": self.current.get("status") if self.current else None,
                "outcome": outcome.value, **self.output_maps(outcome)}

    def output_maps(self, outcome: Outcome) -> dict[str, Any]:
        """The output maps a history entry records: the resource's after an applied update (so that ``?at=``
        shows them), the update's own for a stale one."""
        if outcome is Outcome.APPLIED:
            return {f: self.after[f] for f in OUTPUT_FIELDS if f in self.after}
        return carried({"output_spec": self.update.output_spec, "outputs": self.update.outputs})


def decide(store: StateStore, update: StatusUpdate, ledger: Any, current_snap: Any,
           coalesced: Sequence[Mapping[str, Any]] = ()) -> tuple[Result, list[_Write]]:
    """What to write for this update, given what is stored: a pure decision, no I/O. Read what is stored
    (``_read``), place the update against it (``_standing``), then its outcome's function writes.

    A hot resource (its document out of write tokens: ``write_tokens``) coalesces: the update is
    decided against its newest state (the document, or a newer state its latest ledger entries carry),
    the ledger entry (and history, and change event) are written as ever, and the state after it rides
    on the ledger entry (``state``) instead of being written to the document (``_hot``). The document is
    written again by the first update with a token, or by the sweep (shared/sweep/): about once a second
    sustained, however many updates a second the resource gets. The first coalesced update marks the
    document ``hot`` (read the ledger too), which the sweep clears once it is quiet.
    """
    decision = _read(store, update, ledger, current_snap, coalesced)
    return _OUTCOMES[_standing(decision)](decision)


def _read(store: StateStore, update: StatusUpdate, ledger: Any, snap: Any,
          coalesced: Sequence[Mapping[str, Any]]) -> _Decision:
    """The decision's inputs: the newest state, the update as it applies, the resource as it reports it."""
    now_dt = timeutil.now()
    stored = snap.to_dict() if snap.exists else None
    current = newest_state(stored, coalesced)
    if update.metrics_only and current is not None:  # new metrics; the status stays what it is
        update = replace(update, status=current["status"], raw_status=current["rawStatus"],
                         status_recognized=current["statusRecognized"], message=current.get("message") or "",
                         reason=current.get("reason"), transition_reported=False,
                         resource_specific={**(current.get("resourceSpecific") or {}), **update.resource_specific})
    listed = _listed(update)
    reported = {**resource_document(update, timeutil.format(now_dt)), **listed,
                "staleAt": _stale_at(store, update, now_dt),
                SHARD: shard_of(str(update.key), store.resource_shards, RESOURCE_SHARDS),
                STALE_SHARD: stale_shard_of(str(update.key), store.stale_shards)}
    after = kept(reported, current)  # an output map the update does not carry stays as stored
    if current is not None and current.get("status") == update.status and not update.transition_reported:
        # A report of the same status without a transition time is no transition: keep the stored one.
        after["lastTransitionTime"] = current["lastTransitionTime"]
    return _Decision(store, update, ledger, snap, stored, current,
                     write_tokens(stored, now_dt) if stored is not None else HOT_BURST, now_dt, reported, after,
                     listed, tuple(_resync_batch(store, update, timeutil.format(now_dt))))


def _standing(d: _Decision) -> Standing:
    if d.ledger.exists:
        return Standing.DELIVERED_BEFORE
    if _ring_entry(d) is not None:
        return Standing.RE_REPORTED_BEFORE
    order = compare(d.update, d.current) if d.current is not None else 1
    if order == 0:
        return Standing.SAME_EVENT
    if order < 0:
        return Standing.OLDER
    if d.current is not None and all(d.after.get(f) == d.current.get(f) for f in REPORTED_FIELDS):
        return Standing.RE_REPORT
    return Standing.NEWER


def _duplicate(d: _Decision) -> tuple[Result, list[_Write]]:
    """Processed before: nothing applied again; a distinct publication is counted, and a change its first
    delivery may not have announced is announced (same id)."""
    seen = d.ledger.to_dict()
    writes = _distinct_publication(d, seen.get("ingressMessageId"), d.ledger.id)
    pending = seen.get("change") if not seen.get("changeAnnounced", True) else None
    return Result(Outcome.DUPLICATE, None, seen.get("status"),
                  ChangeEvent.from_record(pending) if pending else None, d.ledger.id), writes


def _re_reported_before(d: _Decision) -> tuple[Result, list[_Write]]:
    """A re-report processed before (in the document's ring): nothing to write but a distinct publication's
    count; a re-report announced nothing, so there is nothing pending."""
    seen = _ring_entry(d) or {}
    return Result(Outcome.DUPLICATE, None, d.current["status"], None), \
        _distinct_publication(d, seen.get("in"), d.update.dedup_id)


def _distinct_publication(d: _Decision, seen_ingress: str | None, dedup_id: str) -> list[_Write]:
    """A copy published again (not a redelivery of the message processed): counted for stats."""
    update = d.update
    if seen_ingress == update.ingress_message_id:
        return []
    duplicate_id = f"{update.ingress_topic}~{update.ingress_message_id}"  # message ids are per topic
    return [_Write(WriteOp.SET, d.store.db.collection(DUPLICATES).document(duplicate_id), {
        "dedupId": dedup_id, "key": str(update.key), "provider": update.key.provider,
        "eventId": update.event_id, "at": d.now, "expireAt": d.expire_at})]


def _ring_entry(d: _Decision) -> Mapping[str, Any] | None:
    """This update's entry in the document's ring of latest re-reports (``RE_REPORTED``), if it is there."""
    ring = (d.stored or {}).get(RE_REPORTED) or []
    return next((e for e in ring if isinstance(e, Mapping) and e.get("id") == d.update.dedup_id), None)


def _same_event(d: _Decision) -> tuple[Result, list[_Write]]:
    """The stored state is this very event, its ledger entry expired (or never written: a re-report that
    left the ring since): a duplicate, nothing to write."""
    return Result(Outcome.DUPLICATE, None, d.current["status"], None), []


def _stale(d: _Decision) -> tuple[Result, list[_Write]]:
    """Older than what is held: kept in history, announced as late; the state stays."""
    late = status_changed.build(d.update, None, d.reported, late=True, redaction=d.store.redaction)
    # a snapshot that lists a resource with an older state still says the resource exists
    entry, resource_writes = _keep(d, {**d.current, **d.listed}, d.listed)
    return Result(Outcome.STALE, d.current["status"], d.update.status, late), [
        _Write(WriteOp.CREATE, d.ledger.reference, d.ledger_entry(
            Outcome.STALE, **_feed_entry(d.store, d.update), change=late.to_record(), changeAnnounced=False, **entry)),
        *resource_writes,
        *d.batch_writes,
    ]


def _unchanged(d: _Decision) -> tuple[Result, list[_Write]]:
    """A re-report: nothing observed changed. No history entry, no change event, no ledger entry: one write,
    the resource's order and last-seen fields and its ring of latest re-reports (a later copy of this one is a
    duplicate: ``Standing.RE_REPORTED_BEFORE``; one that comes after more than ``RE_REPORT_RING`` newer
    re-reports of the resource is older than the stored state with no trace of it: kept as stale). A hot
    resource's re-report is its ledger entry, the state riding on it, as its other updates."""
    frontier = {k: d.after[k] for k in (*ORDER_FIELDS, "staleAt", SHARD, STALE_SHARD)}  # an old doc may lack shards
    moved = {**frontier, **d.listed, "reReports": d.current.get("reReports", 0) + 1}
    result = Result(Outcome.UNCHANGED, d.current["status"], d.update.status, None)
    if d.hot:
        entry, resource_writes = _keep(d, {**d.current, **moved}, moved)
        return result, [
            _Write(WriteOp.CREATE, d.ledger.reference,
                   d.ledger_entry(Outcome.UNCHANGED, change=None, changeAnnounced=True, **entry)),
            *resource_writes,
            *d.batch_writes,
        ]
    own = {RE_REPORTED: _ring_after(d), DOCUMENT_RE_REPORTS: d.stored.get(DOCUMENT_RE_REPORTS, 0) + 1}
    after = {**without_bookkeeping({**d.current, **moved}), **own}
    return result, [*_on_document(d, after, {**moved, **own}), *d.batch_writes]


def _ring_after(d: _Decision) -> list[dict[str, Any]]:
    """The document's ring with this re-report added: the latest ``RE_REPORT_RING``, oldest first."""
    ring = [e for e in (d.stored.get(RE_REPORTED) or []) if isinstance(e, Mapping) and e.get("id") != d.update.dedup_id]
    return [*ring, {"id": d.update.dedup_id, "in": d.update.ingress_message_id}][-RE_REPORT_RING:]


def _applied(d: _Decision) -> tuple[Result, list[_Write]]:
    """Newer and different: the resource shows it, in history; a real change (a new status, or the same
    status re-entered at a reported time: a restart) is announced, and judged for flapping; new output maps
    alone are announced too, not judged (no transition)."""
    current, update = d.current or {}, d.update
    after = {**d.after, "recentChanges": current.get("recentChanges") or [], "flapping": current.get("flapping")}
    change = None
    transition = (current.get("status") != update.status
                  or after["lastTransitionTime"] != current.get("lastTransitionTime"))
    if transition:
        after["recentChanges"], after["flapping"] = d.store.flapping.judge(after["recentChanges"],
                                                                           after["lastTransitionTime"])
    if transition or differ(current, after):
        change = status_changed.build(update, d.current, after, late=False, redaction=d.store.redaction)
    after["createdAt"] = current.get("createdAt", d.now)
    after["updates"] = current.get("updates", 0) + 1
    entry, resource_writes = _keep(d, after, None)
    return Result(Outcome.APPLIED, current.get("status"), update.status, change), [
        _Write(WriteOp.CREATE, d.ledger.reference, d.ledger_entry(
            Outcome.APPLIED, **(_feed_entry(d.store, update) if change else {}),
            change=change.to_record() if change else None, changeAnnounced=change is None, **entry)),
        *resource_writes,
        *d.batch_writes,
    ]


_OUTCOMES: dict[Standing, Callable[[_Decision], tuple[Result, list[_Write]]]] = {
    Standing.DELIVERED_BEFORE: _duplicate,
    Standing.RE_REPORTED_BEFORE: _re_reported_before,
    Standing.SAME_EVENT: _same_event,
    Standing.OLDER: _stale,
    Standing.RE_REPORT: _unchanged,
    Standing.NEWER: _applied,
}


def _keep(d: _Decision, after: Mapping[str, Any], changed: Mapping[str, Any] | None,
          ) -> tuple[dict[str, Any], list[_Write]]:
    """Where the state after this update goes: the ledger entry's fields for it, and the document's write
    (``changed``: the fields that differ from the document; None: the whole state)."""
    after = without_bookkeeping(after)
    return _hot(d, after) if d.hot else ({}, _on_document(d, after, changed))


def _hot(d: _Decision, after: dict[str, Any]) -> tuple[dict[str, Any], list[_Write]]:
    """A hot resource: the state rides on the ledger entry; the document is only marked, once."""
    mark = [] if d.stored.get("hot") else [
        _Write(WriteOp.UPDATE, d.snap.reference, {"hot": True, DOCUMENT_WRITES: firestore.Increment(1)},
               d.snap.update_time)]
    return {"state": after}, mark


def _on_document(d: _Decision, after: dict[str, Any], changed: Mapping[str, Any] | None) -> list[_Write]:
    """The document's write, spending a write token: created, or updated with what changed."""
    spent = {"writtenAt": d.now, "writeTokens": d.tokens - 1, DOCUMENT_WRITES: firestore.Increment(1)}
    if d.stored is None:
        return [_Write(WriteOp.CREATE, d.snap.reference, {**after, **spent})]
    if changed is not None and not d.ahead and not changed:
        return []
    fields = after if changed is None or d.ahead else changed
    return [_Write(WriteOp.UPDATE, d.snap.reference, {**fields, **spent}, d.snap.update_time)]


def _stale_at(store: StateStore, update: StatusUpdate, now: datetime) -> str | None:
    """When the resource's freshness deadline passes (the sweep marks it NotReported then): a provider's
    report restarts the clock; a DELETED resource, or a state the platform synthesised, has none."""
    if update.status == CommonStatus.DELETED or update.event_source.startswith(PLATFORM_SOURCE):
        return None
    after = store.stale_after(update.key.provider, update.key.resource_type)
    return timeutil.format(now + timedelta(seconds=after)) if after is not None else None


def _listed(update: StatusUpdate) -> dict[str, Any]:
    """The resource's field naming the last snapshot batch that listed it."""
    if not update.resync:
        return {}
    return {"resync": {"id": update.resync["id"], "at": update.resync["at"], "index": update.resync["index"]}}


def _resync_batch(store: StateStore, update: StatusUpdate, now: str) -> list[_Write]:
    """The batch itself, from its first event only (one writer: the batch document is never hot)."""
    if not update.resync or update.resync["index"] != 0:
        return []
    mark = ResyncMark.from_dict(update.resync)
    ref = store.db.collection(RESYNCS).document(f"{update.key.provider}~{mark.batch}")
    return [_Write(WriteOp.SET, ref, {"provider": update.key.provider, "batch": mark.batch, "total": mark.total,
                                      "at": mark.at, "scope": list(mark.scope), "source": update.event_source,
                                      "openedAt": now, "state": "open"})]
