"""What notify reads and writes in Firestore.

- reads ``events/{changeId}`` (the ledger entry that carries the change: its commit time makes
  the change-feed item a receiver is sent, cursor included);
- reads ``callbacks``: a resource's callback by its key, the filter callbacks all (few: each is
  matched in memory);
- disables a callback whose receiver answered 410, with the callbacks' summary in the same
  transaction (summary.py);
- writes each attempt's outcome into the callback's ``stats`` (field updates, no transaction:
  many deliveries of one callback update it at once), and ``deliveries/{deliveryId}`` once a
  delivery succeeded, so that a redelivered one is not sent again (TTL: ``expireAt``);
- ``rekey`` (``dcm-status callbacks rekey``): every callback's signing secrets sealed again with
  the keyring's primary key (a key rotation's middle step: docs/callbacks.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Mapping

from dcm_status_contracts import change_feed, timeutil
from dcm_status_contracts.errors import SecretUnavailable
from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.callbacks import summary as callback_summary
from shared.callbacks.egress import HookResponse
from shared.callbacks.registration import Callback, Scope, SigningSecret
from shared.runtime import firestore as fs
from shared.runtime.secretbox import Keyring
from shared.state.documents import CALLBACKS, CHANGE, COMMITTED_AT, DELIVERIES, LEDGER


@dataclass(frozen=True)
class Rekeyed:
    """What a rekey did."""

    primary: str  # the key every secret is now sealed with
    callbacks: int  # callbacks read
    resealed: int  # secrets sealed again with the primary (clear ones from before encryption included)
    dropped: int  # secrets past their rotation grace, removed
    unavailable: tuple[str, ...]  # "callback: why" of secrets that did not open (left as they are)


class CallbackStore:
    def __init__(self, db: firestore.Client, delivered_ttl_days: int = 7):
        self.db = db
        self.ttl = timedelta(days=delivered_ttl_days)

    def change_item(self, change_id: str) -> dict[str, Any] | None:
        """The change-feed item of a change event, or None when its ledger entry holds no change."""
        with fs.guard("reading the change's ledger entry"):
            snap = self.db.collection(LEDGER).document(change_id).get(retry=fs.RETRY, timeout=fs.TIMEOUT)
            data = snap.to_dict() if snap.exists else None
            if not data or not data.get(CHANGE) or not isinstance(data.get(COMMITTED_AT), datetime):
                return None
            return change_feed.item(snap.id, data[COMMITTED_AT], data[CHANGE])

    def matching(self, change: Mapping[str, Any]) -> list[Callback]:
        """The enabled callbacks that ask for this change."""
        with fs.guard("reading the callbacks"):
            callbacks = self.db.collection(CALLBACKS)
            found = [*callbacks.where(filter=FieldFilter("key", "==", change["key"])).stream(retry=fs.RETRY,
                                                                                             timeout=fs.TIMEOUT),
                     *callbacks.where(filter=FieldFilter("scope", "==", Scope.FILTER.value)).stream(
                         retry=fs.RETRY, timeout=fs.TIMEOUT)]
            out = [Callback.from_doc(snap.id, snap.to_dict()) for snap in found]
            return [cb for cb in out if not cb.disabled and cb.matches(change)]

    def get(self, callback_id: str, delivery_id: str) -> tuple[Callback, Mapping[str, Any], bool] | None:
        """The callback, its stats and whether this delivery already succeeded (one round trip), or
        None once the callback is removed."""
        callback_ref = self.db.collection(CALLBACKS).document(callback_id)
        delivery_ref = self.db.collection(DELIVERIES).document(delivery_id)
        with fs.guard("reading a callback"):
            snaps = {s.reference.path: s for s in self.db.get_all([callback_ref, delivery_ref], retry=fs.RETRY,
                                                                  timeout=fs.TIMEOUT)}
        snap = snaps[callback_ref.path]
        if not snap.exists:
            return None
        doc = snap.to_dict()
        return Callback.from_doc(snap.id, doc), doc.get("stats") or {}, snaps[delivery_ref.path].exists

    def record(self, callback_id: str, delivery_id: str, response: HookResponse, at: datetime) -> None:
        """One attempt's outcome, in the callback's stats (and the delivery marked done on success)."""
        with fs.guard("recording a delivery attempt"):
            when = timeutil.format(at)
            if response.ok:
                stats = {"stats.delivered": firestore.Increment(1), "stats.consecutiveFailures": 0,
                         "stats.lastSuccessAt": when, "stats.lastStatus": response.status}
            else:
                stats = {"stats.failedAttempts": firestore.Increment(1),
                         "stats.consecutiveFailures": firestore.Increment(1), "stats.lastFailureAt": when,
                         "stats.lastStatus": response.status, "stats.lastError": response.error}
            batch = self.db.batch()
            batch.update(self.db.collection(CALLBACKS).document(callback_id), stats)
            if response.ok:
                batch.set(self.db.collection(DELIVERIES).document(delivery_id), {
                    "callbackId": callback_id, "deliveredAt": when, "status": response.status,
                    "expireAt": at + self.ttl})
            try:
                batch.commit(retry=fs.RETRY, timeout=fs.TIMEOUT)
            except gexc.NotFound:
                pass  # the callback was removed meanwhile: nothing to count

    def rekey(self, ring: Keyring, now: datetime) -> Rekeyed:
        """Seal every callback's signing secrets with ``ring``'s primary key: those sealed with another
        key of the ring and those stored in clear (before encryption). A secret past its rotation grace
        is dropped; one that does not open is left as it is and reported. Each callback is rewritten in
        a transaction (a rotation meanwhile is not undone)."""
        callbacks = self.db.collection(CALLBACKS)
        with fs.guard("listing callbacks"):
            ids = [ref.id for ref in callbacks.list_documents()]
        resealed = dropped = 0
        unavailable: list[str] = []
        for callback_id in ids:
            r, d, why = self._rekey_one(callbacks.document(callback_id), ring, now)
            resealed, dropped = resealed + r, dropped + d
            unavailable += [f"{callback_id}: {w}" for w in why]
        return Rekeyed(ring.primary, len(ids), resealed, dropped, tuple(unavailable))

    def _rekey_one(self, ref: Any, ring: Keyring, now: datetime) -> tuple[int, int, list[str]]:
        @firestore.transactional
        def run(transaction: Any) -> tuple[int, int, list[str]]:
            snap = ref.get(transaction=transaction)
            if not snap.exists:
                return 0, 0, []
            stored = (snap.to_dict() or {}).get("secrets") or []
            kept, resealed, why = [], 0, []
            for entry in stored:
                s = SigningSecret.from_doc(entry)
                if not s.in_force(now):
                    continue
                if s.sealed is not None and s.sealed["keyId"] == ring.primary:
                    kept.append(entry)
                    continue
                try:
                    clear = s.value if s.value is not None else ring.open(s.sealed, ref.id)
                except SecretUnavailable as exc:
                    why.append(str(exc))
                    kept.append(entry)
                    continue
                kept.append(SigningSecret(None, s.expires_at, ring.seal(clear, ref.id)).to_doc())
                resealed += 1
            if kept != stored:
                transaction.update(ref, {"secrets": kept})
            return resealed, len(stored) - len(kept), why

        with fs.guard("sealing a callback's secrets again"):
            return run(self.db.transaction())

    def disable(self, callback_id: str, why: str) -> None:
        """The callback disabled (its receiver answered 410) and, in the same transaction, the callbacks'
        summary (summary.py), so upsert stops announcing changes for it."""
        ref = self.db.collection(CALLBACKS).document(callback_id)

        @firestore.transactional
        def run(transaction: Any) -> None:
            snap = ref.get(transaction=transaction)
            summary = callback_summary.for_update(self.db, transaction, callback_id)
            if not snap.exists:
                return  # removed meanwhile
            before = Callback.from_doc(callback_id, snap.to_dict())
            transaction.update(ref, {"disabled": why})
            callback_summary.write(self.db, transaction, summary, before, replace(before, disabled=why))

        with fs.guard("disabling a callback"):
            run(self.db.transaction())

    def exhausted(self, callback_id: str) -> None:
        self._update(callback_id, {"stats.exhausted": firestore.Increment(1)}, "counting a delivery given up")

    def _update(self, callback_id: str, fields: Mapping[str, Any], what: str) -> None:
        with fs.guard(what):
            try:
                self.db.collection(CALLBACKS).document(callback_id).update(dict(fields), retry=fs.RETRY,
                                                                            timeout=fs.TIMEOUT)
            except gexc.NotFound:
                pass  # removed meanwhile
