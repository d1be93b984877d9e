"""The observed state in Firestore: one atomic commit per status update. This module reads what the
decision needs and carries its writes out (shared/upsert/decide.py decides, without I/O).

Collections (shared/state/documents.py):

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
- ``billing_resources/{provider~type~id}/transitions/{changeEventId}``: the change's transition of usage
  (shared/state/usage/transitions.py), written in the commit of an applied or stale update's ledger entry
  when its change is a transition (issue 40): an applied change then costs 3 writes, a late one 2.
- ``duplicates/{ingressTopic~ingressMessageId}``: distinct duplicate
  publications (not redeliveries of one message), for stats.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any, Callable

from dcm_status_contracts import timeutil
from dcm_status_contracts.errors import Transient
from dcm_status_contracts.outputs import Redaction
from dcm_status_contracts.status_update import StatusUpdate
from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.runtime import firestore as fs
from shared.runtime import firestore_writes
from shared.state import resources
from shared.state.documents import LEDGER, RESOURCE_SHARDS, RESOURCES, SHARDS, STALE_SHARDS, FlapPolicy
from shared.upsert.decide import decide, maybe_ahead
from shared.upsert.decision import (Decision, Increment, LedgerEntry, Policy, Result, Server, Stored, Unread, Write,
                                    WriteOp)

MAX_ATTEMPTS = 5
CONFLICTS = (gexc.AlreadyExists, gexc.FailedPrecondition, gexc.Conflict)


class StateStore:
    """Applies status updates, one commit each, in named steps: read what is stored (``_stored``), have it
    decided (shared/upsert/decide.py), read what the decision says it lacks (``_completed``), commit its writes
    (``_commit``); a conflicting commit starts the steps again."""

    def __init__(self, db: firestore.Client, ledger_ttl_days: int = 7,
                 stale_after: Callable[[str, str], int | None] = lambda provider, rtype: None,
                 flapping: FlapPolicy = FlapPolicy(), redaction: Redaction | None = None,
                 shards: int = SHARDS, resource_shards: int = RESOURCE_SHARDS, stale_shards: int = STALE_SHARDS):
        """The decision's settings (shared/upsert/decision.py ``Policy``; ValueError on a shard count the readers
        would miss)."""
        self.db = db
        self.policy = Policy(timedelta(days=ledger_ttl_days), stale_after, flapping,
                             redaction if redaction is not None else Redaction.default(), shards, resource_shards,
                             stale_shards)

    def resource_ref(self, doc_id: str):
        return self.db.collection(RESOURCES).document(doc_id)

    def apply(self, update: StatusUpdate) -> Result:
        """Dedup, staleness check, upsert, history and outbox, committed atomically.

        Optimistic concurrency: read what the decision needs, decide, commit one batch whose preconditions
        (ledger entry must not exist, resource unchanged since read) make it fail whole if anyone else wrote
        first; then read again and decide again. Half the emulator cost of a transaction (BeginTransaction +
        locks), with the same guarantees.

        The resource document is read first, and the ledger entry only when it can matter (``Unread.LEDGER``):
        an update newer than the stored state was not processed before (the stored order only moves forward,
        and a newer one has its ledger entry created with the precondition that it does not exist). After a
        conflict the next attempt reads both, as a delivery that lost to another delivery of the same event
        must see its ledger entry.
        """
        both = False
        for _ in range(MAX_ATTEMPTS):
            with fs.guard("Firestore write"):
                try:
                    stored, read_at = self._stored(update, both)
                    decision = self._completed(update, stored, timeutil.now())
                    if decision.writes:
                        self._commit(decision.writes, read_at)
                    return decision.result
                except CONFLICTS:
                    both = True  # another delivery of this event, or another update of this resource, won
                    continue
        raise Transient(f"{MAX_ATTEMPTS} conflicting writes in a row on {update.key}; Pub/Sub will redeliver")

    def _stored(self, update: StatusUpdate, both: bool) -> tuple[Stored, Any]:
        """What is stored for the update, and when its resource document was last written (the precondition of
        its update). The document first (and, when it is hot, the ledger entry and the coalesced states, as
        ever: its document may be behind); after a conflict the ledger entry too."""
        ledger_ref = self.db.collection(LEDGER).document(update.dedup_id)
        resource_ref = self.resource_ref(update.key.doc_id)
        if both:
            snaps = {snap.reference.path: snap for snap in self.db.get_all(
                [ledger_ref, resource_ref], retry=fs.RETRY, timeout=fs.TIMEOUT)}
            current = snaps[resource_ref.path]
        else:
            current = resource_ref.get(retry=fs.RETRY, timeout=fs.TIMEOUT)
        document = current.to_dict() if current.exists else None
        if both:
            ledger = _ledger(snaps[ledger_ref.path])
        else:
            ledger = (self._ledger(update.dedup_id) if maybe_ahead(document)
                      else LedgerEntry(update.dedup_id, read=False))
        coalesced = (resources.coalesced_states(self.db, str(update.key), retry=fs.RETRY, timeout=fs.TIMEOUT)
                     if not ledger.exists and maybe_ahead(document) else [])
        return Stored(document, ledger, tuple(coalesced)), current.update_time

    def _completed(self, update: StatusUpdate, stored: Stored, now: Any) -> Decision:
        """The decision, once what it says it lacks is read: the ledger entry, then an earlier version's."""
        decision = decide(self.policy, update, stored, now)
        if decision.unread is Unread.LEDGER:
            stored = replace(stored, ledger=self._ledger(update.dedup_id))
            decision = decide(self.policy, update, stored, now)
        if decision.unread is Unread.LEGACY_LEDGER:
            legacy = self._legacy_entry(update)
            if legacy is not None:  # processed before the ledger key named the provider
                decision = decide(self.policy, update, replace(stored, ledger=legacy), now)
        return decision

    def _ledger(self, ledger_id: str) -> LedgerEntry:
        return _ledger(self.db.collection(LEDGER).document(ledger_id).get(retry=fs.RETRY, timeout=fs.TIMEOUT))

    def _commit(self, writes: tuple[Write, ...], resource_written_at: Any) -> None:
        """One batch; an update only if the resource document is unchanged since it was read. Its writes are
        encoded as the library encodes them, in a ninth of its CPU (shared/runtime/firestore_writes.py)."""
        batch = self.db.batch()
        for w in writes:
            ref = self.db.collection(w.collection).document(w.doc_id)
            data = {k: _firestore_value(v) for k, v in w.data.items()}
            if w.op is WriteOp.CREATE:
                firestore_writes.create(batch, ref, data)
            elif w.op is WriteOp.UPDATE:
                firestore_writes.update(batch, ref, data, self.db.write_option(last_update_time=resource_written_at))
            else:
                firestore_writes.set(batch, ref, data)
        batch.commit(retry=fs.RETRY, timeout=fs.TIMEOUT)

    def _legacy_entry(self, update: StatusUpdate) -> LedgerEntry | None:
        """The ledger entry an earlier version wrote for this very event (keyed by source and id only), if
        it is still there and is this resource's: a redelivery across the deploy that put the provider in
        the key is a duplicate, its pending change announced, as before. Read only for an update that is
        not newer than the stored state (rare: a redelivery, or an event out of order), and only until the
        entries written before that deploy have expired (``ledger_ttl_days``)."""
        snap = self.db.collection(LEDGER).document(update.legacy_dedup_id).get(retry=fs.RETRY, timeout=fs.TIMEOUT)
        return _ledger(snap) if snap.exists and snap.to_dict().get("key") == str(update.key) else None

    def mark_change_announced(self, update: StatusUpdate, ledger_id: str | None = None) -> None:
        with fs.guard("Firestore update"):
            self.db.collection(LEDGER).document(ledger_id or update.dedup_id).update(
                {"changeAnnounced": True, "changeAnnouncedAt": timeutil.now_str()}, timeout=fs.TIMEOUT)


def _ledger(snap: Any) -> LedgerEntry:
    return LedgerEntry(snap.id, snap.to_dict() if snap.exists else None)


def _firestore_value(value: Any) -> Any:
    """A write's value as Firestore takes it: ``Server.TIME`` and ``Increment`` are transforms of the write."""
    if value is Server.TIME:
        return firestore.SERVER_TIMESTAMP
    if isinstance(value, Increment):
        return firestore.Increment(value.by)
    return value
