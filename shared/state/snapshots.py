"""Snapshots of the aggregates: the fleet summary and the pipeline's accounting as of a time, one document
each (``aggregates/summary``, ``aggregates/stats``), computed by the platform on a schedule, not per reader.

The sweep writes them (shared/sweep/handler.py): the summary every tick, the accounting every
``stats_every_seconds`` (its counts read the whole ledger: Firestore bills one read per 1,000 index
entries counted). The api serves them: one read per answer, whoever asks and however often.

A document: ``kind``, ``asOf`` (the time the counts were read at: shared/state/aggregates.py),
``everySeconds`` (how often its writer refreshes it), ``figures`` (the aggregate as JSON bytes: one
field, one index entry, whatever the number of providers), ``computedBy`` and ``computeMs``.

One writer at a time, never an older snapshot over a newer one: a write has a precondition on the
document as it was read (created if it was missing, else unchanged since), so of two writers that read the
same state only the first writes. A fresh deployment with no snapshot yet: the first reader *claims* it
(a document without figures, created with the same precondition), computes it and stores it; every
other reader waits for it (``first``), and a claim whose claimer died is taken over after
``CLAIM_TIMEOUT`` (again by one reader only). So however many readers, the counts run once.
"""

from __future__ import annotations

import enum
import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Mapping

import orjson
from dcm_status_contracts import timeutil
from google.api_core import exceptions as gexc

from shared.state.documents import AGGREGATES

OUTDATED_AFTER_PERIODS = 3  # a snapshot older than this many periods is outdated: its writer is not running
CLAIM_TIMEOUT = timedelta(seconds=60)  # a claim without a snapshot this old: its claimer died; taken over
WAIT_FOR_FIRST = 5.0  # seconds a reader waits for the snapshot another reader claimed
WAIT_STEP = 0.25  # ... reading it again this often (one read each)


class SnapshotKind(enum.Enum):
    SUMMARY = "summary"
    STATS = "stats"


class NotYet(Exception):
    """The first snapshot is being computed by another reader and was not there in time: retry soon."""


@dataclass(frozen=True)
class Snapshot:
    kind: SnapshotKind
    figures: Mapping[str, Any]
    as_of: datetime
    every_seconds: int
    marker: Mapping[str, Any] | None = None  # what its figures depend on, as read with them (aggregates.marker)

    def age(self, now: datetime) -> float:
        return max(0.0, (now - self.as_of).total_seconds())

    def outdated(self, now: datetime) -> bool:
        """Older than its writer's period allows (``OUTDATED_AFTER_PERIODS`` periods): the sweep is not
        refreshing it (not running, or failing)."""
        return self.age(now) > OUTDATED_AFTER_PERIODS * self.every_seconds

    def due(self, now: datetime, slack_seconds: float = 0.0) -> bool:
        """Whether its writer should compute it again: a period has passed (less ``slack_seconds``: the
        ticks that write it come at the period's pace, not exactly a period apart)."""
        return self.age(now) >= self.every_seconds - slack_seconds

    def max_age(self, now: datetime) -> int:
        """Seconds until the next snapshot is expected (0 once it is late): how long a copy may be kept."""
        return max(0, math.floor(self.every_seconds - self.age(now)))

    def answer(self, now: datetime) -> dict[str, Any]:
        """The figures, with when they are from (``asOf``), how often they are refreshed and whether this
        one is late (``outdated``)."""
        return {**self.figures, "asOf": timeutil.format(self.as_of), "everySeconds": self.every_seconds,
                "outdated": self.outdated(now)}


def ref(db: Any, kind: SnapshotKind) -> Any:
    return db.collection(AGGREGATES).document(kind.value)


def decode(kind: SnapshotKind, doc: Mapping[str, Any] | None) -> Snapshot | None:
    """The snapshot a document holds; None for no document or a claim (no figures yet)."""
    if not doc or doc.get("figures") is None:
        return None
    return Snapshot(kind, orjson.loads(doc["figures"]), timeutil.parse(doc["asOf"]), int(doc["everySeconds"]),
                    doc.get("marker"))


def read(db: Any, kind: SnapshotKind, options: Mapping[str, Any] | None = None) -> tuple[Snapshot | None, Any]:
    """The stored snapshot (None if none yet) and the document as read (for a write's precondition)."""
    snap = ref(db, kind).get(**(options or {}))
    return decode(kind, snap.to_dict() if snap.exists else None), snap


def store(db: Any, kind: SnapshotKind, figures: Mapping[str, Any], every_seconds: int, read_as: Any, by: str,
          compute_ms: int = 0, options: Mapping[str, Any] | None = None,
          marker: Mapping[str, Any] | None = None) -> bool:
    """Write a snapshot over the document ``read_as`` (as ``read`` returned it), only if it is still as
    read; False when another writer came first (its snapshot stays). ``figures["asOf"]``: its time;
    ``marker``: what they depend on, as read with them (the next writer counts again only if it moved)."""
    doc = {"kind": kind.value, "asOf": figures["asOf"], "everySeconds": every_seconds,
           "figures": orjson.dumps({k: v for k, v in figures.items() if k != "asOf"}),
           "computedBy": by, "computeMs": compute_ms, "writtenAt": timeutil.now_str(),
           "marker": dict(marker) if marker is not None else None}
    try:
        if read_as.exists:
            read_as.reference.update(doc, option=db.write_option(last_update_time=read_as.update_time),
                                     **(options or {}))
        else:
            read_as.reference.create(doc, **(options or {}))
    except (gexc.FailedPrecondition, gexc.Conflict):  # Conflict: AlreadyExists (a create that lost)
        return False
    return True


def first(db: Any, kind: SnapshotKind, compute: Callable[[], Mapping[str, Any]], every_seconds: int, by: str,
          options: Mapping[str, Any] | None = None, clock: Callable[[], datetime] = timeutil.now,
          sleep: Callable[[float], None] = time.sleep, wait: float | None = None) -> Snapshot:
    """The stored snapshot; when there is none yet, the first one: computed and stored by this caller if it
    wins the claim, else waited for (``NotYet`` after ``wait`` seconds). ``compute()`` returns the
    figures, ``asOf`` included."""
    deadline = time.monotonic() + (WAIT_FOR_FIRST if wait is None else wait)
    while True:
        got, snap = read(db, kind, options)
        if got is not None:
            return got
        claim = _claim(db, kind, snap, clock(), by, options)
        if claim is not None:
            started = time.monotonic()
            figures = compute()
            store(db, kind, figures, every_seconds, claim, by, round((time.monotonic() - started) * 1000), options)
            return Snapshot(kind, {k: v for k, v in figures.items() if k != "asOf"},
                            timeutil.parse(figures["asOf"]), every_seconds)
        if time.monotonic() + WAIT_STEP > deadline:
            raise NotYet(f"the first {kind.value} snapshot is being computed")
        sleep(WAIT_STEP)


def _claim(db: Any, kind: SnapshotKind, snap: Any, now: datetime, by: str, options: Mapping[str, Any] | None) -> Any:
    """Claim the snapshot's first computation: the claim as written (for the snapshot's precondition), or
    None if another caller holds a live claim or came first."""
    doc = snap.to_dict() if snap.exists else None
    if doc is not None and now - timeutil.parse(doc["claimedAt"]) < CLAIM_TIMEOUT:
        return None  # someone computes it now
    claim = {"kind": kind.value, "claimedAt": timeutil.format(now), "claimedBy": by}
    try:
        if doc is None:
            result = snap.reference.create(claim, **(options or {}))
        else:  # a claim its claimer left: taken over by one caller only
            result = snap.reference.update(claim, option=db.write_option(last_update_time=snap.update_time),
                                           **(options or {}))
    except (gexc.FailedPrecondition, gexc.Conflict):
        return None
    return _Written(snap.reference, result.update_time)


@dataclass(frozen=True)
class _Written:
    """A document as this caller wrote it: what ``store`` needs for its precondition."""

    reference: Any
    update_time: Any
    exists: bool = True
