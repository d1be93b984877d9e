"""Operator reads that span two use cases (so they live here, not in ``shared/``):
the pipeline outcome of a dead letter's event. (The pipeline's accounting is the api's:
shared/api/queries.py ``stats``.)"""

from __future__ import annotations

from typing import Any, Mapping

from shared.deadletter.replay import event_identity_of
from shared.deadletter.store import stored_attributes
from shared.runtime import firestore as fs
from shared.state.documents import LEDGER


def pipeline_outcome(db, entry: Mapping[str, Any]) -> str | None:
    """'applied' / 'stale' once the event a dead-letter entry carries reached the state store."""
    identity = event_identity_of(entry.get("data", b""), stored_attributes(entry), entry.get("provider"))
    if not identity:
        return None
    snap = db.collection(LEDGER).document(identity).get(**fs.read_options())
    return snap.to_dict().get("outcome") if snap.exists else None
