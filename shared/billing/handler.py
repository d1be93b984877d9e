"""The billing use case: keep the daily usage snapshot, on the sweep's ticks.

Every change's transition of usage is recorded by upsert, in the commit that writes the change's ledger entry
(shared/state/usage/transitions.py ``recorded_transition``; issue 40): a change is recorded with the state
change, so billing can neither miss one nor dead-letter one, and it is no consumer of the changed topic any more
(the proposal's "Instance Stopped" story is still a filtered consumer of it: audit, shared/audit/). Billing
stores transitions, not running totals: the usage intervals are a pure function of the stored transition set
(``shared.state.usage.intervals``), computed when a report asks, which is what makes usage correct under
at-least-once delivery and out-of-order arrival (a late change is one more transition in the set and corrects
the intervals it falls into).

On a tick of the sweep's topic (``shared.runtime.ticks``: Cloud Scheduler in production, the local stack's
keeper locally), every ``usage_every_seconds`` (``DCM_USAGE_EVERY_SECONDS``; 0: never), billing brings the daily
usage snapshot up to date (shared/state/usage/snapshot.py ``tick``: what was recorded since it last looked, each
transition read once, under its keeper's claim), so a usage computation reads a few documents per day of its
window. A failure acks the tick all the same: the next one does the same work.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Callable

from dcm_status_contracts import timeutil
from dcm_status_contracts.model import PubSubMessage

from shared.runtime import firestore as fs
from shared.runtime import ticks
from shared.runtime.clients import Runtime
from shared.runtime.logs import get_logger
from shared.state.usage import snapshot as usage_snapshot

log = get_logger("billing")


class Billing:
    def __init__(self, db: Any, usage_every: int, clock: Callable[[], datetime] = timeutil.now):
        self.db = db
        self.usage_every = usage_every  # seconds between keeps of the daily usage snapshot; 0: never
        self.clock = clock  # a tick's time

    @classmethod
    def build(cls, runtime: Runtime) -> "Billing":
        return cls(runtime.firestore, runtime.settings.usage_every_seconds)

    def __call__(self, message: PubSubMessage) -> None:
        """One tick (its body is never read: ``shared.runtime.ticks``)."""
        ticks.run(log, "billing", self.clock(),
                  (("keep the usage snapshot; the next tick does", self.usage_every, self.usage),))

    def usage(self, now_dt: datetime) -> dict[str, int]:
        """The daily usage snapshot (shared/state/usage/snapshot.py), once its watermark is ``usage_every``
        seconds old (before: one read, its state)."""
        with fs.guard("Firestore query"):
            done = usage_snapshot.tick(self.db, now_dt, every=timedelta(seconds=self.usage_every))
        if done.get("lost"):
            log.warning("usage snapshot: another keeper claimed it mid-keep; this one stopped, it keeps on", extra=done)
        elif done.get("chunksWritten"):
            log.info("usage snapshot kept", extra=done)
        return done
