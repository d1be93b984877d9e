"""The stored state: what upsert and deadletter write to Firestore and the api, the CLI
and the operators read. Collection names, the outcome of an update, and the fields the
change feed is read by. No I/O.

- ``resources/{provider~type~id}``: the current observed state of a resource;
  ``resources/{..}/history/{dedupId}``: every update that changed something.
- ``events/{dedupId}``: the dedup ledger and transactional outbox. An entry that
  carries a change event also carries ``committedAt`` (the server's time of the
  write), ``provider`` and ``resourceType``: it is an entry of the change feed
  (shared/contracts/change_feed.py), kept as long as the ledger (its TTL).
- ``duplicates/{ingressTopic~messageId}``: distinct duplicate publications.
- ``deadletters/{entryId}``: what could not be processed (shared/deadletter/store.py).
- ``callbacks/{callbackId}``: a registered webhook callback and its delivery stats
  (shared/contracts/callback.py); ``deliveries/{deliveryId}``: a delivery that
  succeeded, so that a redelivered one is not sent twice (``expireAt``: its TTL).
- ``resyncs/{provider~batchId}``: a provider's snapshot batch (shared/contracts/resync.py), written
  by upsert from the batch's first event; each resource it listed carries ``resync.id``.
"""

from __future__ import annotations

import enum

RESOURCES = "resources"
HISTORY = "history"
LEDGER = "events"
DUPLICATES = "duplicates"
DEADLETTERS = "deadletters"
CALLBACKS = "callbacks"
DELIVERIES = "deliveries"
RESYNCS = "resyncs"

# Ledger fields of a change-feed entry.
COMMITTED_AT = "committedAt"
CHANGE = "change"


class Outcome(enum.StrEnum):
    """What became of one status update (stored in the ledger as ``outcome``)."""

    APPLIED = "applied"  # the resource now shows it
    STALE = "stale"  # older than what the resource shows: kept in history, announced as late
    DUPLICATE = "duplicate"  # this event (source + id) was processed before
    UNCHANGED = "unchanged"  # a re-report of what the resource shows: only last-seen is recorded


class EntryState(enum.StrEnum):
    """Where a dead-letter entry stands (stored as ``state``)."""

    OPEN = "open"  # waiting for an operator
    REPLAYED = "replayed"  # sent back; its outcome is the pipeline's (dcm-status dlq show)
    REPLAY_FAILED = "replay_failed"  # a replay failed again and came back here


class PlatformReason(enum.StrEnum):
    """The reasons of states the platform sets itself (shared/sweep/), never a provider."""

    NOT_REPORTED = "NotReported"  # no report within the freshness deadline: UNKNOWN, last known kept
    NOT_IN_SNAPSHOT = "NotInSnapshot"  # a complete snapshot of its provider no longer lists it: DELETED
