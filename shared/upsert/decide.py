"""Upsert's decision, pure: given the update and what is stored for it (shared/upsert/decision.py
``Stored``), what to write in one commit and what to announce (``Decision``). No I/O, no clock: the store
(shared/upsert/store.py) reads, passes the time, and carries the writes out.

Read what is stored (``_facts``), place the update against it (``_standing``), then its outcome's function
says the writes. The ledger entry of an update newer than the stored state is not read (it has none): an
update that is not newer asks for it (``Unread.LEDGER``), then, when it has none, for the entry an earlier
version may have written (``Unread.LEGACY_LEDGER``), and is decided again with what was read.

An applied or stale update with a change writes, in the same commit as its ledger entry, the change's
transition of usage (``billing_resources/{key}/transitions/{changeEventId}``: shared/state/usage/transitions.py
``recorded_transition``, the content billing's consumer of the changed topic wrote before issue 40): a change
is recorded with the state change, never missed or dead-lettered on its way to billing.

A hot resource (its document out of write tokens: ``write_tokens``) coalesces: the update is decided against
its newest state (the document, or a newer state its latest ledger entries carry), the ledger entry (and
history, and change event) are written as ever, and the state after it rides on the ledger entry (``state``)
instead of being written to the document (``_hot``). The document is written again by the first update with a
token, or by the sweep (shared/sweep/): about once a second sustained, however many updates a second the
resource gets. The first coalesced update marks the document ``hot`` (read the ledger too), which the sweep
clears once it is quiet.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Callable, Mapping

from dcm_status_contracts import status_changed, timeutil
from dcm_status_contracts.identity import PLATFORM_SOURCE
from dcm_status_contracts.model import CommonStatus
from dcm_status_contracts.outputs import OUTPUT_FIELDS, carried, differ, kept
from dcm_status_contracts.resync import ResyncMark
from dcm_status_contracts.status_changed import ChangeEvent
from dcm_status_contracts.status_update import StatusUpdate

from shared.state.documents import (
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
    STALE_SHARD,
    Outcome,
    compare_order,
    newest_state,
    shard_of,
    stale_shard_of,
    without_bookkeeping,
    write_tokens,
)
from shared.state.usage.transitions import Resumed, recorded_transition, transitions_path
from shared.upsert.decision import (
    Decision,
    Increment,
    LedgerEntry,
    Policy,
    Result,
    Server,
    Standing,
    Stored,
    Unread,
    Write,
    WriteOp,
)


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


def maybe_ahead(document: Mapping[str, Any] | None) -> bool:
    """Could the ledger hold a state newer than this resource document (it is, or was lately, hot)?"""
    return document is not None and bool(document.get("hot"))


def decide(policy: Policy, update: StatusUpdate, stored: Stored, now: datetime) -> Decision:
    """What to do with ``update`` given what is ``stored`` for it, at ``now``."""
    facts = _facts(policy, update, stored, now)
    standing = _standing(facts)
    result, writes = _OUTCOMES[standing](facts)
    return Decision(standing, result, tuple(writes), _unread(stored, standing))


def _unread(stored: Stored, standing: Standing) -> Unread:
    """An update that is not newer than the stored state may have been processed before: its ledger entry,
    if not read yet, or else the entry an earlier version wrote (keyed by source and id only), may say so."""
    if standing not in (Standing.SAME_EVENT, Standing.OLDER) or stored.ledger.exists:
        return Unread.NOTHING
    return Unread.LEDGER if not stored.ledger.read else Unread.LEGACY_LEDGER


@dataclass(frozen=True)
class _Facts:
    """One update and what is stored for it, derived once: the outcome functions take what they write from here."""

    policy: Policy
    update: StatusUpdate  # as it applies: a metrics-only update carries the stored status
    ledger: LedgerEntry  # its ledger entry
    stored: Mapping[str, Any] | None  # the document
    current: Mapping[str, Any] | None  # the newest state: the document, or a newer coalesced one
    tokens: float  # the document's write tokens now (below 1: hot)
    now_dt: datetime
    reported: dict[str, Any]  # the resource as this update reports it
    after: dict[str, Any]  # ... and as it is stored if it applies (an unreported transition kept)
    listed: dict[str, Any]  # the resync batch that lists the resource, if any
    batch_writes: tuple[Write, ...]  # the resync batch itself, from its first event

    @property
    def now(self) -> str:
        return timeutil.format(self.now_dt)

    @property
    def expire_at(self) -> datetime:
        return self.now_dt + self.policy.ledger_ttl

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
        kept = ({**self.history_entry(outcome), SHARD: shard_of(str(u.key), self.policy.shards)}
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



def _facts(policy: Policy, update: StatusUpdate, stored: Stored, now_dt: datetime) -> _Facts:
    """The decision's inputs: the newest state, the update as it applies, the resource as it reports it."""
    document = stored.document
    current = newest_state(document, stored.coalesced)
    if update.metrics_only and current is not None:  # new metrics; the status stays what it is
        update = replace(update, status=current["status"], raw_status=current["rawStatus"],
                         status_recognized=current["statusRecognized"], message=current.get("message") or "",
                         reason=current.get("reason"), transition_reported=False,
                         resource_specific={**(current.get("resourceSpecific") or {}), **update.resource_specific})
    listed = _listed(update)
    reported = {**resource_document(update, timeutil.format(now_dt)), **listed,
                "staleAt": _stale_at(policy, update, now_dt),
                SHARD: shard_of(str(update.key), policy.resource_shards, RESOURCE_SHARDS),
                STALE_SHARD: stale_shard_of(str(update.key), policy.stale_shards)}
    after = kept(reported, current)  # an output map the update does not carry stays as stored
    if current is not None and current.get("status") == update.status and not update.transition_reported:
        # A report of the same status without a transition time is no transition: keep the stored one.
        after["lastTransitionTime"] = current["lastTransitionTime"]
    return _Facts(policy, update, stored.ledger, document, current,
                  write_tokens(document, now_dt) if document is not None else HOT_BURST, now_dt, reported, after,
                  listed, tuple(_resync_batch(update, timeutil.format(now_dt))))


def _feed_entry(policy: Policy, update: StatusUpdate) -> dict[str, Any]:
    """The fields that make a ledger entry with a change an entry of the change feed (its shard: the
    resource's, so one resource's changes keep their commit order in one index range)."""
    return {COMMITTED_AT: Server.TIME, "provider": update.key.provider,
            "resourceType": update.key.resource_type, SHARD: shard_of(str(update.key), policy.shards)}


def _standing(d: _Facts) -> Standing:
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


def _duplicate(d: _Facts) -> tuple[Result, list[Write]]:
    """Processed before: nothing applied again; a distinct publication is counted, and a change its first
    delivery may not have announced is announced (same id)."""
    seen = d.ledger.doc
    writes = _distinct_publication(d, seen.get("ingressMessageId"), d.ledger.id)
    pending = seen.get("change") if not seen.get("changeAnnounced", True) else None
    return Result(Outcome.DUPLICATE, None, seen.get("status"),
                  ChangeEvent.from_record(pending) if pending else None, d.ledger.id), writes

def _re_reported_before(d: _Facts) -> tuple[Result, list[Write]]:
    """A re-report processed before (in the document's ring): nothing to write but a distinct publication's
    count; a re-report announced nothing, so there is nothing pending."""
    seen = _ring_entry(d) or {}
    return Result(Outcome.DUPLICATE, None, d.current["status"], None), \
        _distinct_publication(d, seen.get("in"), d.update.dedup_id)


def _distinct_publication(d: _Facts, seen_ingress: str | None, dedup_id: str) -> list[Write]:
    """A copy published again (not a redelivery of the message processed): counted for stats."""
    update = d.update
    if seen_ingress == update.ingress_message_id:
        return []
    duplicate_id = f"{update.ingress_topic}~{update.ingress_message_id}"  # message ids are per topic
    return [Write(WriteOp.SET, DUPLICATES, duplicate_id, {
        "dedupId": dedup_id, "key": str(update.key), "provider": update.key.provider,
        "eventId": update.event_id, "at": d.now, "expireAt": d.expire_at})]


def _ring_entry(d: _Facts) -> Mapping[str, Any] | None:
    """This update's entry in the document's ring of latest re-reports (``RE_REPORTED``), if it is there."""
    ring = (d.stored or {}).get(RE_REPORTED) or []
    return next((e for e in ring if isinstance(e, Mapping) and e.get("id") == d.update.dedup_id), None)


def _same_event(d: _Facts) -> tuple[Result, list[Write]]:
    """The stored state is this very event, its ledger entry expired (or never written: a re-report that
    left the ring since): a duplicate, nothing to write."""
    return Result(Outcome.DUPLICATE, None, d.current["status"], None), []


def _stale(d: _Facts) -> tuple[Result, list[Write]]:
    """Older than what is held: kept in history, announced as late; the state stays."""
    late = status_changed.build(d.update, None, d.reported, late=True, redaction=d.policy.redaction)
    # a snapshot that lists a resource with an older state still says the resource exists
    entry, resource_writes = _keep(d, {**d.current, **d.listed}, d.listed)
    return Result(Outcome.STALE, d.current["status"], d.update.status, late), [
        Write(WriteOp.CREATE, LEDGER, d.update.dedup_id, d.ledger_entry(
            Outcome.STALE, **_feed_entry(d.policy, d.update), change=late.to_record(), changeAnnounced=False, **entry)),
        *resource_writes,
        *_transition(d, late, _resumed(d)),
        *d.batch_writes,
    ]


def _resumed(d: _Facts) -> Resumed | None:
    """The status and time of the first re-report in the document's ring with a transition time after this late
    update's: in the order the provider saw them, that re-report was a change back from the late status (RUNNING
    10:00, re-reported 14:00, STOPPED 12:00 delivered last: running again from 14:00). None when the ring has
    none (re-reports older than the ring's ``RE_REPORT_RING`` are not kept, nor a hot resource's). Its labels
    are the resource's now (a re-report repeats them)."""
    at = timeutil.parse(d.update.last_transition_time)
    seen = [(timeutil.parse(e["at"]), e["s"]) for e in (d.stored or {}).get(RE_REPORTED) or []
            if isinstance(e, Mapping) and e.get("s") and e.get("at")]
    after = min((e for e in seen if e[0] > at), default=None)
    if after is None or after[1] == d.update.status:
        return None
    return Resumed(after[1], timeutil.format(after[0]), status_changed.labels_of(d.current or {}))


def _unchanged(d: _Facts) -> tuple[Result, list[Write]]:
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
            Write(WriteOp.CREATE, LEDGER, d.update.dedup_id,
                   d.ledger_entry(Outcome.UNCHANGED, change=None, changeAnnounced=True, **entry)),
            *resource_writes,
            *d.batch_writes,
        ]
    own = {RE_REPORTED: _ring_after(d), DOCUMENT_RE_REPORTS: d.stored.get(DOCUMENT_RE_REPORTS, 0) + 1}
    after = {**without_bookkeeping({**d.current, **moved}), **own}
    return result, [*_on_document(d, after, {**moved, **own}), *d.batch_writes]


def _ring_after(d: _Facts) -> list[dict[str, Any]]:
    """The document's ring with this re-report added: the latest ``RE_REPORT_RING``, oldest first."""
    ring = [e for e in (d.stored.get(RE_REPORTED) or []) if isinstance(e, Mapping) and e.get("id") != d.update.dedup_id]
    entry = {"id": d.update.dedup_id, "in": d.update.ingress_message_id}
    if not d.update.event_source.startswith(PLATFORM_SOURCE):  # a provider's observation (``_resumed``)
        entry.update(s=d.update.status, at=d.update.last_transition_time)
    return [*ring, entry][-RE_REPORT_RING:]


def _applied(d: _Facts) -> tuple[Result, list[Write]]:
    """Newer and different: the resource shows it, in history; a real change (a new status, or the same
    status re-entered at a reported time: a restart) is announced, and judged for flapping; new output maps
    alone are announced too, not judged (no transition)."""
    current, update = d.current or {}, d.update
    after = {**d.after, "recentChanges": current.get("recentChanges") or [], "flapping": current.get("flapping")}
    change = None
    transition = (current.get("status") != update.status
                  or after["lastTransitionTime"] != current.get("lastTransitionTime"))
    if transition:
        after["recentChanges"], after["flapping"] = d.policy.flapping.judge(after["recentChanges"],
                                                                           after["lastTransitionTime"])
    if transition or differ(current, after):
        change = status_changed.build(update, d.current, after, late=False, redaction=d.policy.redaction)
    after["createdAt"] = current.get("createdAt", d.now)
    after["updates"] = current.get("updates", 0) + 1
    entry, resource_writes = _keep(d, after, None)
    return Result(Outcome.APPLIED, current.get("status"), update.status, change), [
        Write(WriteOp.CREATE, LEDGER, d.update.dedup_id, d.ledger_entry(
            Outcome.APPLIED, **(_feed_entry(d.policy, update) if change else {}),
            change=change.to_record() if change else None, changeAnnounced=change is None, **entry)),
        *resource_writes,
        *_transition(d, change),
        *d.batch_writes,
    ]


def _transition(d: _Facts, change: ChangeEvent | None, resumed: Resumed | None = None) -> list[Write]:
    """The change's transition of usage, in the commit of its ledger entry (shared/state/usage/transitions.py
    ``recorded_transition``: none for a change that is no transition of usage; a late one with the status it
    was ``resumed`` from, ``_resumed``): recorded with the state change, or not at all; its id is the change
    event's, so a commit decided again writes the same document."""
    view = status_changed.from_change(change) if change is not None else None
    doc = recorded_transition(view, d.now_dt, resumed) if view is not None else None
    return [] if doc is None else [Write(WriteOp.SET, transitions_path(view.doc_id), view.event_id, doc)]

_OUTCOMES: dict[Standing, Callable[[_Facts], tuple[Result, list[Write]]]] = {
    Standing.DELIVERED_BEFORE: _duplicate,
    Standing.RE_REPORTED_BEFORE: _re_reported_before,
    Standing.SAME_EVENT: _same_event,
    Standing.OLDER: _stale,
    Standing.RE_REPORT: _unchanged,
    Standing.NEWER: _applied,
}


def _keep(d: _Facts, after: Mapping[str, Any], changed: Mapping[str, Any] | None,
          ) -> tuple[dict[str, Any], list[Write]]:
    """Where the state after this update goes: the ledger entry's fields for it, and the document's write
    (``changed``: the fields that differ from the document; None: the whole state)."""
    after = without_bookkeeping(after)
    return _hot(d, after) if d.hot else ({}, _on_document(d, after, changed))


def _hot(d: _Facts, after: dict[str, Any]) -> tuple[dict[str, Any], list[Write]]:
    """A hot resource: the state rides on the ledger entry; the document is only marked, once."""
    mark = [] if d.stored.get("hot") else [
        Write(WriteOp.UPDATE, RESOURCES, d.update.key.doc_id, {"hot": True, DOCUMENT_WRITES: Increment()})]
    return {"state": after}, mark


def _on_document(d: _Facts, after: dict[str, Any], changed: Mapping[str, Any] | None) -> list[Write]:
    """The document's write, spending a write token: created, or updated with what changed."""
    spent = {"writtenAt": d.now, "writeTokens": d.tokens - 1, DOCUMENT_WRITES: Increment()}
    if d.stored is None:
        return [Write(WriteOp.CREATE, RESOURCES, d.update.key.doc_id, {**after, **spent})]
    if changed is not None and not d.ahead and not changed:
        return []
    fields = after if changed is None or d.ahead else changed
    return [Write(WriteOp.UPDATE, RESOURCES, d.update.key.doc_id, {**fields, **spent})]

def _stale_at(policy: Policy, update: StatusUpdate, now: datetime) -> str | None:
    """When the resource's freshness deadline passes (the sweep marks it NotReported then): a provider's
    report restarts the clock; a DELETED resource, or a state the platform synthesised, has none."""
    if update.status == CommonStatus.DELETED or update.event_source.startswith(PLATFORM_SOURCE):
        return None
    after = policy.stale_after(update.key.provider, update.key.resource_type)
    return timeutil.format(now + timedelta(seconds=after)) if after is not None else None


def _listed(update: StatusUpdate) -> dict[str, Any]:
    """The resource's field naming the last snapshot batch that listed it."""
    if not update.resync:
        return {}
    return {"resync": {"id": update.resync["id"], "at": update.resync["at"], "index": update.resync["index"]}}


def _resync_batch(update: StatusUpdate, now: str) -> list[Write]:
    """The batch itself, from its first event only (one writer: the batch document is never hot)."""
    if not update.resync or update.resync["index"] != 0:
        return []
    mark = ResyncMark.from_dict(update.resync)
    return [Write(WriteOp.SET, RESYNCS, f"{update.key.provider}~{mark.batch}", {"provider": update.key.provider, "batch": mark.batch, "total": mark.total,
                                      "at": mark.at, "scope": list(mark.scope), "source": update.event_source,
                                      "openedAt": now, "state": "open"})]
