"""The aggregates as the api serves them: the sweep's snapshots (shared/state/snapshots.py), never a count
per reader.

An answer costs one read of the snapshot's document, and none while the instance keeps the snapshot it
read (``KEEP_SECONDS`` at most, and never more than half the snapshot's period): however many dashboards
are open, an instance reads each snapshot at most once every few seconds. A deployment with no snapshot
yet has its first one computed once, by the first reader (``snapshots.first``: one writer, the others wait).
No caller can make the api compute the aggregates again: no parameter asks for it (an operator who wants
them live runs ``dcm-status stats`` / ``dcm-status status``, with Firestore credentials).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Mapping

from google.api_core import exceptions as gexc

from shared.state import aggregates, snapshots
from shared.state.snapshots import SnapshotKind, Snapshot

KEEP_SECONDS = 5.0


@dataclass(frozen=True)
class Periods:
    """How often the sweep refreshes each snapshot (the settings it writes them with)."""

    summary_seconds: int = 60
    stats_seconds: int = 900

    def of(self, kind: SnapshotKind) -> int:
        return self.summary_seconds if kind is SnapshotKind.SUMMARY else self.stats_seconds


class Served:
    def __init__(self, db: Any, providers: tuple[str, ...], periods: Periods, options: Mapping[str, Any],
                 window_days: int = 7, monotonic: Callable[[], float] = time.monotonic):
        self.db = db
        self.periods = periods
        self.options = options
        self._monotonic = monotonic
        self._compute: dict[SnapshotKind, Callable[[], dict[str, Any]]] = {
            SnapshotKind.SUMMARY: lambda: aggregates.summary(db, providers, options),
            SnapshotKind.STATS: lambda: aggregates.stats(db, options, window_days)}
        self._kept: dict[SnapshotKind, tuple[float, Snapshot]] = {}
        self._locks = {kind: threading.Lock() for kind in SnapshotKind}

    def get(self, kind: SnapshotKind) -> Snapshot:
        """The snapshot: the one this instance read less than its keep time ago, else the stored one
        (``snapshots.NotYet`` while another reader computes the first one)."""
        with self._locks[kind]:  # one read per instance at a time; the others take what it read
            kept = self._kept.get(kind)
            if kept is not None and self._monotonic() - kept[0] < self.keep_seconds(kind):
                return kept[1]
            got = snapshots.first(self.db, kind, self._compute[kind], self.periods.of(kind), "api", self.options)
            self._kept[kind] = (self._monotonic(), got)
            return got

    def statuses_seen(self, resource_type: str | None = None) -> frozenset[str] | None:
        """The statuses the fleet summary last saw (of ``resource_type``, of every type when None): those a
        filtered list's counts per status start with (shared/api/queries.py ``status_counts_of``). None when
        there is no summary yet, or it cannot be read: never computed here, never an error."""
        try:
            with self._locks[SnapshotKind.SUMMARY]:
                kept = self._kept.get(SnapshotKind.SUMMARY)
                if kept is None or self._monotonic() - kept[0] >= self.keep_seconds(SnapshotKind.SUMMARY):
                    got, _ = snapshots.read(self.db, SnapshotKind.SUMMARY, self.options)
                    if got is None:
                        return None
                    kept = self._kept[SnapshotKind.SUMMARY] = (self._monotonic(), got)
        except (gexc.GoogleAPIError, ValueError, KeyError):  # a hint only: without it every status is counted
            return None
        by_type = kept[1].figures.get("byType") or {}
        return frozenset(s for t, counted in by_type.items() if resource_type in (None, t) for s in counted)

    def keep_seconds(self, kind: SnapshotKind) -> float:
        return min(KEEP_SECONDS, self.periods.of(kind) / 2)


def cache_control(snapshot: Snapshot, now: datetime) -> str:
    """What a client may keep it for: until the next snapshot is expected (none of it once it is late).
    ``private``: an answer of the api is for its caller, never for a shared cache."""
    return f"private, max-age={snapshot.max_age(now)}"
