"""Billing's write: one transition document per change event (the stored layout and its readers:
shared/state/usage/transitions.py, beneath every use case that reads usage).

**One Firestore write per change event**, and nothing else: the parent ``billing_resources/{key}``
document is never written (a subcollection needs no parent document), so there is no second write, no
transaction, no read before the write and no hot document. The write is keyed by the change event's id and
its content is a function of the change event alone (but ``recordedAt``, ``recordedUs``: when): a redelivery rewrites the same
document, so at-least-once delivery in any order converges to the same set of documents.
"""

from __future__ import annotations

from typing import Any, Mapping

from dcm_status_contracts import timeutil
from dcm_status_contracts.status_changed import ChangeEventView
from google.cloud import firestore

from shared.runtime import firestore as fs
from shared.state.usage.transitions import (  # noqa: F401  (the stored layout, re-exported for billing's tests)
    BILLING_RESOURCES,
    EPOCH,
    GROUP_FILTER_FIELDS,
    OLD_SIDE,
    TRANSITIONS,
    TransitionReader,
    epoch_us,
    implied_document,
    to_transition,
    transition_document,
)


class BillingStore(TransitionReader):
    """Billing's transition sets: its write (``record``), and the readers' side with an operator's read
    options unless given."""

    def __init__(self, db: firestore.Client, options: Mapping[str, Any] | None = None):
        super().__init__(db, fs.read_options() if options is None else options)

    def record(self, change: ChangeEventView) -> None:
        """Store one change: one document write (idempotent); Transient when Firestore fails."""
        now_dt = timeutil.now()
        now = timeutil.format(now_dt)
        doc = transition_document(change, now, epoch_us(now_dt))
        implied = implied_document(change, now)
        if implied:
            doc[OLD_SIDE] = implied[1]
        with fs.guard("Firestore write"):
            self.transitions_ref(change.doc_id).document(change.event_id).set(doc, timeout=fs.TIMEOUT)
