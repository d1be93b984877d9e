"""Billing's read side for an operator (the CLI's ``dcm-status billing``, the demo's check): the transition sets
as upsert records them (the stored layout and its readers: shared/state/usage/transitions.py, beneath every use
case that reads usage), read with an operator's read options.
"""

from __future__ import annotations

from typing import Any, Mapping

from google.cloud import firestore

from shared.runtime import firestore as fs
from shared.state.usage.transitions import (  # noqa: F401  (the stored layout, re-exported for billing's readers)
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
    """The transition sets, with an operator's read options unless given."""

    def __init__(self, db: firestore.Client, options: Mapping[str, Any] | None = None):
        super().__init__(db, fs.read_options() if options is None else options)
