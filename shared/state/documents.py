"""The stored state: what upsert and deadletter write to Firestore and the api, the CLI
and the operators read. Collection names, the outcome of an update, and the fields the
change feed is read by. No I/O.

- ``resources/{provider~type~id}``: the current observed state of a resource.
- ``events/{dedupId}``: the dedup ledger and transactional outbox. The entry of an
  update that changed something (``HISTORY_OUTCOMES``: applied, stale) is also its
  resource's history entry: it carries ``HISTORY_FIELDS`` and no ``expireAt``, so it
  is kept as long as history is; the history is read by ``key`` ordered by
  ``observedAt`` or ``recordedAt``, which only history entries carry. Any other
  entry (unchanged) expires (``expireAt``: its TTL). An entry that carries a change
  event (always applied or stale) also carries ``committedAt`` (the server's time of
  the write), ``provider`` and ``resourceType``: it is an entry of the change feed
  (shared/contracts/change_feed.py), kept as long as history.
  ``resources/{..}/history/{dedupId}`` (``HISTORY``): where history was kept before
  issue 32; infra/backfill_history.py folds it into the ledger.
- ``duplicates/{ingressTopic~messageId}``: distinct duplicate publications.
- ``deadletters/{entryId}``: what could not be processed (shared/deadletter/store.py).
- ``callbacks/{callbackId}``: a registered webhook callback and its delivery stats
  (shared/callbacks/registration.py); ``deliveries/{deliveryId}``: a delivery that
  succeeded, so that a redelivered one is not sent twice (``expireAt``: its TTL).
- ``summaries/callbacks``: what the enabled callbacks can match, bounded (their distinct filters,
  the provider/type pairs that have resource callbacks), written in the same transaction as every
  change to a callback; upsert reads it to say on each change event whether notify need look
  (shared/callbacks/summary.py).
- ``resyncs/{provider~batchId}``: a provider's snapshot batch (shared/contracts/resync.py), written
  by upsert from the batch's first event; each resource it listed carries ``resync.id``.
- ``providers/{provider}``: whether a provider reports or has gone silent as a whole
  (shared/contracts/provider_event.py), written by the sweep at each transition only.
- ``aggregates/{summary|stats}``: the fleet summary and the pipeline's accounting as of a time, one
  document each (shared/state/snapshots.py), written by the sweep on its schedule and served by the api:
  a reader costs one read, not the counts.
- ``trends/{YYYYMMDDTHHMM}``: the pipeline's counts of one minute per provider (shared/state/trends.py),
  written by the sweep, served by ``/v1/trends``; kept as long as history.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from dcm_status_contracts import timeutil

RESOURCES = "resources"
HISTORY = "history"
LEDGER = "events"
DUPLICATES = "duplicates"
DEADLETTERS = "deadletters"
CALLBACKS = "callbacks"
DELIVERIES = "deliveries"
RESYNCS = "resyncs"
PROVIDERS = "providers"
SUMMARIES = "summaries"
CALLBACK_SUMMARY = "callbacks"  # the document of SUMMARIES that sums up the callbacks
AGGREGATES = "aggregates"
TRENDS = "trends"  # the pipeline's counts per minute and provider (shared/state/trends.py)

# Ledger fields of a change-feed entry.
COMMITTED_AT = "committedAt"
CHANGE = "change"
# Ledger fields of a history entry (shared/upsert/decide.py history_entry; the output maps when the update
# carried them): what the history API and ?at= answer of a ledger entry.
HISTORY_FIELDS = ("status", "rawStatus", "message", "reason", "observedAt", "lastTransitionTime", "eventId",
                  "eventSource", "sequence", "publishedAt", "recordedAt", "previousStatus", "outcome",
                  "output_spec", "outputs")

# ---- sharded timestamps ------------------------------------------------------------------------------
# Firestore holds a collection whose documents carry a sequentially increasing *indexed* value to about
# 500 writes/s (docs/scale.md). Every such field written at the event rate is either not indexed at all
# (a single-field index exemption, terraform/data_model.tf) or sharded: the document carries ``shard``
# (a fixed function of its resource key) and every index on the timestamp has ``shard`` in front of it,
# so the writes spread over that many index ranges. A query reads every shard (``shard in [...]``,
# ordered by the timestamp: Firestore merges the ranges; a disjunction takes at most 30 values, so more
# shards are read 30 at a time and merged here, shared/state/resources.py), so its order and its
# cursors are those of one unsharded index.
# - the change feed (events.committedAt, written per change): 30 shards, one query, 10,000 changes/s at
#   333 writes/s a range;
# - resources (updatedAt per change, writtenAt per hot write): 60 shards, two queries merged, 10,000
#   changes/s at 167 writes/s a range;
# - resources.staleAt (written by every report: changes, heartbeats and a resync's re-reports) has its own
#   shard field, STALE_SHARD, 360 of them, read by the sweep alone (twelve queries of 30 merged): a
#   resync of 100,000 re-reports/s on top of 10,000 changes/s at 313 writes/s a range. The sweep's
#   per-provider query (provider, shard, staleAt) keeps SHARD: the provider in front already spreads its
#   writes per provider (60 ranges each), and 5,000 providers a tick read two queries each, not twelve.
SHARD = "shard"
SHARDS = 30  # the change feed's
RESOURCE_SHARDS = 60  # the resource documents'
STALE_SHARD = "staleShard"
STALE_SHARDS = 360  # the resource documents' freshness deadline's (staleAt)
MAX_IN = 30  # values of one "in" filter (Firestore)
SHARD_SPACE = tuple(range(SHARDS))  # what the feed reads: every shard a writer may use (any count <= SHARDS)
RESOURCE_SHARD_SPACE = tuple(range(RESOURCE_SHARDS))
STALE_SHARD_SPACE = tuple(range(STALE_SHARDS))
# billing's transitions (a collection group: billing_resources/{key}/transitions), by when they were recorded
# (shared/state/usage/transitions.py RECORDED_US, read by the daily usage snapshot): the busiest fleet's 10,000
# changes/s at 333 writes/s a range; one "in" query reads every shard.
TRANSITIONS = "transitions"
TRANSITION_SHARDS = 30
# collection => its shard fields and how many shards each spreads over (terraform/data_model.tf declares the
# fields: firestore_shard_fields; benchmarks/capacity.py reads both)
SHARD_FIELDS: dict[str, dict[str, int]] = {LEDGER: {SHARD: SHARDS},
                                           RESOURCES: {SHARD: RESOURCE_SHARDS, STALE_SHARD: STALE_SHARDS},
                                           TRANSITIONS: {SHARD: TRANSITION_SHARDS}}

# collection => its fields written at the event rate with sequentially increasing values, and how each
# is kept off one index range: "sharded" (composite indexes with SHARD in front; the single-field index
# exempted) or "unindexed" (a single-field index exemption; never queried). A map field's exemption
# covers its subfields. terraform/data_model.tf declares the same (tests/deploy/test_terraform.py).
SHARDED, UNINDEXED = "sharded", "unindexed"
SEQUENTIAL_FIELDS: dict[str, dict[str, str]] = {
    LEDGER: {COMMITTED_AT: SHARDED, "processedAt": UNINDEXED, "changeAnnouncedAt": UNINDEXED,
             "ingressMessageId": UNINDEXED, "eventId": UNINDEXED, "change.body": UNINDEXED,
             "change.attributes": UNINDEXED, "state": UNINDEXED,
             # a history entry's: queried behind key (one resource's entries), recordedAt also behind the
             # shard (/v1/stats counts the history entries of its window)
             "observedAt": UNINDEXED, "recordedAt": SHARDED, "publishedAt": UNINDEXED,
             "lastTransitionTime": UNINDEXED},
    RESOURCES: {"updatedAt": SHARDED, "staleAt": SHARDED, "writtenAt": SHARDED, "lastSeenAt": UNINDEXED,
                "observedAt": UNINDEXED, "publishedAt": UNINDEXED, "reportedTime": UNINDEXED,
                "lastTransitionTime": UNINDEXED, "createdAt": UNINDEXED, "recentChanges": UNINDEXED,
                "resync.at": UNINDEXED, "resync.index": UNINDEXED,
                "reReported": UNINDEXED},  # RE_REPORTED: the ring rewritten by every re-report, never queried
    # billing's (a collection group): when it recorded one, queried behind the shard by the usage snapshot
    TRANSITIONS: {"recordedUs": SHARDED},
}


# collection => fields no query filters, orders or sums on, whose single-field indexes would only cost index
# entries on every write: the maps a provider fills (each subfield two entries: ascending and descending) and
# free text. Exempted like the unindexed sequential fields (terraform/data_model.tf
# firestore_unfiltered_fields; tests/deploy/test_terraform.py); benchmarks/breakdown.py counts what they save.
# A query on one of them would need its index back first.
UNFILTERED_FIELDS: dict[str, tuple[str, ...]] = {
    RESOURCES: ("resourceSpecific", "extra", "output_spec", "outputs", "message", "flapping"),
    LEDGER: ("output_spec", "outputs", "message"),
}


def stale_shard_of(key: str, shards: int = STALE_SHARDS) -> int:
    """The shard of a resource document's freshness deadline (``STALE_SHARD``): fixed by its key, so a
    re-report moves only its ``staleAt`` within one range."""
    return shard_of(key, shards, STALE_SHARDS)


def shard_of(key: str, shards: int = SHARDS, space: int = SHARDS) -> int:
    """The shard of a resource's documents in one collection (its change-feed entries all in one: one
    resource's changes stay in one index range, in commit order); ``space``: what the readers read."""
    if not 1 <= shards <= space:
        raise ValueError(f"shards must be 1..{space} (the readers read that many), got {shards}")
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % shards


class Outcome(enum.StrEnum):
    """What became of one status update (stored in the ledger as ``outcome``)."""

    APPLIED = "applied"  # the resource now shows it
    STALE = "stale"  # older than what the resource shows: kept in history, announced as late
    DUPLICATE = "duplicate"  # this event (source + id) was processed before
    UNCHANGED = "unchanged"  # a re-report of what the resource shows: only last-seen is recorded


# The outcomes whose ledger entry is the resource's history entry (kept: no TTL).
HISTORY_OUTCOMES = frozenset({Outcome.APPLIED, Outcome.STALE})


class EntryState(enum.StrEnum):
    """Where a dead-letter entry stands (stored as ``state``)."""

    OPEN = "open"  # waiting for an operator
    REPLAYED = "replayed"  # sent back; its outcome is the pipeline's (dcm-status dlq show)
    REPLAY_FAILED = "replay_failed"  # a replay failed again and came back here


class PlatformReason(enum.StrEnum):
    """The reasons of states the platform sets itself (shared/sweep/), never a provider."""

    NOT_REPORTED = "NotReported"  # no report within the freshness deadline: UNKNOWN, last known kept
    NOT_IN_SNAPSHOT = "NotInSnapshot"  # a complete snapshot of its provider no longer lists it: DELETED


@dataclass(frozen=True)
class FlapPolicy:
    """More than ``changes`` status changes within ``window_seconds`` is flapping (topology.yaml's
    ``flapping``). Judged on the changes' own transition times, so a redelivery or a backlog drained
    late judges the same."""

    changes: int = 5
    window_seconds: int = 600

    def judge(self, recent: Sequence[str], at: str) -> tuple[list[str], dict[str, int] | None]:
        """The recent transition times to keep once a change at ``at`` is added (within the window of
        the newest, at most changes + 1 of them: the document stays small), and the flag: ``{changes,
        windowSeconds}`` when flapping, else None."""
        times = sorted({*(t for t in recent if isinstance(t, str)), at})
        newest = timeutil.parse(times[-1])
        kept = [t for t in times if (newest - timeutil.parse(t)).total_seconds() < self.window_seconds]
        kept = kept[-(self.changes + 1):]
        flag = {"changes": len(kept), "windowSeconds": self.window_seconds} if len(kept) > self.changes else None
        return kept, flag

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> "FlapPolicy":
        """``{changes, window}`` as the topology writes it; ValueError/TypeError if it is not."""
        policy = cls(int(doc.get("changes", cls.changes)),
                     timeutil.duration_seconds(doc.get("window", cls.window_seconds)))
        if policy.changes < 1 or policy.window_seconds < 1:
            raise ValueError(f"flapping needs changes >= 1 and a window >= 1s, got {dict(doc)}")
        return policy


# ---- which of two states is newer, and coalesced states of a hot resource --------------------------
ORDER_FIELDS = ("observedAt", "eventId", "eventSource", "sequence", "publishedAt", "reportedTime", "lastSeenAt")
# A resource's document is written at most HOT_RATE times a second sustained (Firestore holds about
# one sustained write a second to one document), after a burst of HOT_BURST: a token bucket kept on the
# document itself (writeTokens, writtenAt), so it costs no write of its own.
HOT_RATE = 1.0
HOT_BURST = 5.0
HOT_QUIET = 10.0  # seconds without a write before the sweep stops treating a resource as hot
DOCUMENT_WRITES = "documentWrites"  # how many times the document was written (a transform of each write)
# A re-report of unchanged state writes the resource document only (no ledger entry): the document keeps the
# dedup ids (and ingress message ids) of its latest RE_REPORT_RING re-reports, so that a later copy of one is
# known as a duplicate, and counts them (the ledger-less part of the ``unchanged`` figure, shared/api). A
# provider's re-report also keeps its status and transition time (``s``, ``at``): a change delivered late, older
# than it, then knows when the resource was seen back in that status (shared/upsert/decide.py ``_resumed``).
RE_REPORTED = "reReported"  # [{"id": dedupId, "in": ingressMessageId[, "s": status, "at": time]}], oldest first
DOCUMENT_RE_REPORTS = "documentReReports"
RE_REPORT_RING = 16
# The document's own bookkeeping: never part of a state carried on the ledger or copied from one.
BOOKKEEPING = ("hot", "writtenAt", "writeTokens", DOCUMENT_WRITES, RE_REPORTED, DOCUMENT_RE_REPORTS)


def compare_order(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> int:
    """Is the state (or update) ``mine`` newer (1) than ``theirs``, older (-1), or the very same event (0)?
    Both carry the order fields of a resource document (``ORDER_FIELDS``).

    The same source's CloudEvents ``sequence`` decides when both carry one (compared as strings, as the
    extension says). Otherwise event time; at the same instant (providers that stamp whole seconds) the
    later ingress publication; then source and id, so the order is total and every delivery order
    converges to one state.
    """
    same_source = mine["eventSource"] == theirs["eventSource"]
    if same_source and mine["eventId"] == theirs["eventId"]:
        return 0
    if same_source and mine.get("sequence") and theirs.get("sequence") and mine["sequence"] != theirs["sequence"]:
        return 1 if mine["sequence"] > theirs["sequence"] else -1
    a = (mine["observedAt"], mine.get("publishedAt") or "", mine["eventSource"], mine["eventId"])
    b = (theirs["observedAt"], theirs.get("publishedAt") or "", theirs["eventSource"], theirs["eventId"])
    return 1 if a > b else -1


def write_tokens(doc: Mapping[str, Any], now: Any) -> float:
    """How many writes the resource document may take now (below 1: it is hot, its updates coalesce)."""
    written = doc.get("writtenAt")
    if not written:
        return HOT_BURST
    idle = max(0.0, (now - timeutil.parse(written)).total_seconds())
    return min(HOT_BURST, float(doc.get("writeTokens", HOT_BURST)) + idle * HOT_RATE)


def quiet_for(doc: Mapping[str, Any], now: Any) -> float:
    """Seconds since the resource document was last written."""
    written = doc.get("writtenAt")
    return (now - timeutil.parse(written)).total_seconds() if written else float("inf")


def without_bookkeeping(state: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k not in BOOKKEEPING}


def newest_state(stored: Mapping[str, Any] | None, coalesced: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The resource's newest state: its document, or a coalesced state newer than it (the ``state`` of a
    hot resource's latest ledger entries, written while the document was not)."""
    newest = stored
    for state in coalesced:
        if newest is None or compare_order(state, newest) > 0:
            newest = state
    return newest
