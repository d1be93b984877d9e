"""One keeper of the daily usage snapshot at a time (shared/state/usage/snapshot.py).

Two sweep ticks can keep it at once (a tick redelivered while the first still runs, a long first keep past its
ack deadline). Each would write the chunks it computed from the transitions up to its own ``until``; the older
one's chunks written last, under the newer one's watermark, would lose the transitions between the two for
good. So a keeper first claims the snapshot's state document (``claim``: its ``keeper`` fields, written only
when no other claim is younger than ``LEASE``), and every commit it makes after carries a write to that
document preconditioned on its last update time (``Claim.guard``): once another keeper has claimed it, the next
commit fails whole and the keeper stops (``Claim.lost``), having written nothing of what it computed since.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Mapping

from dcm_status_contracts import timeutil
from google.api_core import exceptions as gexc
from google.cloud import firestore

# How long a claim keeps other keepers away: longer than a keep takes (the sweep's timeout, 60 s by default), so a
# second tick waits rather than computing in vain; a crashed keeper's claim ends with it. Correctness never rests
# on it: a keeper that outlives its claim loses its next commit (``guard``).
LEASE = timedelta(minutes=30)
KEEPER, KEEPER_UNTIL = "keeper", "keeperUntil"
LOST = (gexc.FailedPrecondition, gexc.Conflict)  # another keeper's write came between (Conflict: a create that lost)


@dataclass
class Claim:
    """This keeper's hold on the state document: its token and the document's update time as it last wrote it."""

    db: Any
    ref: Any
    token: str
    update_time: Any
    doc: Mapping[str, Any]  # the state document as read when claimed (the claim's precondition: still so)
    lost: bool = False

    def guard(self, batch: Any, now: datetime) -> None:
        """Adds to ``batch`` (first) the write that makes it fail whole if another keeper came since."""
        batch.update(self.ref, {"keeperAt": timeutil.format(now)},
                     option=self.db.write_option(last_update_time=self.update_time))

    def committed(self, results: list[Any]) -> None:
        """After a guarded batch's commit: the update time its first write (the guard) left."""
        self.update_time = results[0].update_time

    def release(self, fields: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> bool:
        """The state's new fields written and the claim given up, if still held; False if another keeper came."""
        try:
            self.ref.update({**fields, KEEPER: firestore.DELETE_FIELD, KEEPER_UNTIL: firestore.DELETE_FIELD},
                            option=self.db.write_option(last_update_time=self.update_time),
                            **dict(options or {}))
        except LOST:
            self.lost = True
        return not self.lost


def claim(db: Any, ref: Any, now: datetime, options: Mapping[str, Any] | None = None) -> Claim | None:
    """The state document (``ref``) claimed for this keeper; None while another's claim is younger than LEASE."""
    snap = ref.get(**dict(options or {}))
    doc = snap.to_dict() if snap.exists else {}
    held = doc.get(KEEPER_UNTIL)
    if doc.get(KEEPER) and held and timeutil.parse(held) > now:
        return None
    token = uuid.uuid4().hex
    fields = {KEEPER: token, KEEPER_UNTIL: timeutil.format(now + LEASE)}
    try:
        if snap.exists:
            result = ref.update(fields, option=db.write_option(last_update_time=snap.update_time),
                                **dict(options or {}))
        else:
            result = ref.create(fields, **dict(options or {}))
    except LOST:
        return None
    return Claim(db, ref, token, result.update_time, doc)
