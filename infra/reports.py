"""Operator reads that span two use cases (so they live here, not in ``shared/``):
the pipeline's accounting and the pipeline outcome of a dead letter's event."""

from __future__ import annotations

from typing import Any, Mapping

from shared.deadletter.replay import event_identity_of
from shared.deadletter.store import DeadLetterStore, stored_attributes
from shared.runtime import firestore as fs
from shared.upsert import queries
from shared.upsert.store import LEDGER


def stats(db) -> dict[str, int]:
    """Outcome counters over the ledger's retention window.

    ``received`` is every provider message that reached a final outcome:
    applied + unchanged (re-reports) + duplicate + stale + deadlettered.
    """
    outcomes = queries.outcome_counts(db)
    counts = {k: outcomes[k] for k in ("applied", "unchanged", "stale", "duplicate")}
    counts["deadlettered"] = DeadLetterStore(db).count()
    counts["resources"] = outcomes["resources"]
    counts["received"] = sum(counts[k] for k in ("applied", "unchanged", "stale", "duplicate", "deadlettered"))
    return counts


def pipeline_outcome(db, entry: Mapping[str, Any]) -> str | None:
    """'applied' / 'stale' once the event a dead-letter entry carries reached the state store."""
    identity = event_identity_of(entry.get("data", b""), stored_attributes(entry))
    if not identity:
        return None
    snap = db.collection(LEDGER).document(identity).get(**fs.read_options())
    return snap.to_dict().get("outcome") if snap.exists else None
