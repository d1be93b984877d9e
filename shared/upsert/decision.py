"""Upsert's decision as data: what it is given (the update aside: ``Policy``, ``Stored``) and what it
answers (``Decision``: the writes of one commit, what to announce, and what is still unread that could
change it). No I/O: shared/upsert/decide.py decides, shared/upsert/store.py reads and writes Firestore.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Mapping

from dcm_status_contracts.outputs import Redaction
from dcm_status_contracts.status_changed import ChangeEvent

from shared.state.documents import (
    RESOURCE_SHARDS,
    SHARDS,
    STALE_SHARDS,
    FlapPolicy,
    Outcome,
    shard_of,
    stale_shard_of,
)


def never_stale(provider: str, resource_type: str) -> int | None:
    return None


@dataclass(frozen=True)
class Policy:
    """How updates are decided, whatever is stored: the settings' part of the decision.

    ``stale_after(provider, type)``: seconds after a report the resource is no longer known to be as shown
    (Settings.stale_after); None: never. ``flapping``: how many changes in what window flag a resource.
    ``redaction``: the output values change events show as ``[redacted]`` (the document and its history keep
    them). ``shards``, ``resource_shards``, ``stale_shards``: how many index ranges the change feed's, the
    resource documents' and their freshness deadline's sequential fields spread over (shared/state/documents.py;
    the readers read every shard of their space: a count beyond it is refused)."""

    ledger_ttl: timedelta = timedelta(days=7)
    stale_after: Callable[[str, str], int | None] = never_stale
    flapping: FlapPolicy = FlapPolicy()
    redaction: Redaction = field(default_factory=Redaction.default)
    shards: int = SHARDS
    resource_shards: int = RESOURCE_SHARDS
    stale_shards: int = STALE_SHARDS

    def __post_init__(self) -> None:
        shard_of("", self.shards), shard_of("", self.resource_shards, RESOURCE_SHARDS)  # what readers would miss
        stale_shard_of("", self.stale_shards)  # the sweep reads that many (Settings.stale_shards)


@dataclass(frozen=True)
class LedgerEntry:
    """The update's ledger entry as read (``doc`` None: there is none), or not read (``read`` False: the
    update is newer than the stored state, so it has none, or its create fails and the next attempt reads it).
    ``id``: the entry's (a legacy entry's, ``StatusUpdate.legacy_dedup_id``, once that one was found)."""

    id: str
    doc: Mapping[str, Any] | None = None
    read: bool = True

    @property
    def exists(self) -> bool:
        return self.doc is not None


@dataclass(frozen=True)
class Stored:
    """What is stored for an update: its resource's document, the states a hot resource's latest updates left
    on the ledger (``coalesced``), and the update's ledger entry."""

    document: Mapping[str, Any] | None
    ledger: LedgerEntry
    coalesced: tuple[Mapping[str, Any], ...] = ()


class WriteOp(enum.Enum):
    CREATE = "create"  # must not exist
    UPDATE = "update"  # must be unchanged since read
    SET = "set"


class Server(enum.Enum):
    """A field value the store has Firestore fill in when it commits."""

    TIME = "time"  # the commit's time


@dataclass(frozen=True)
class Increment:
    """A field value the store has Firestore add to what is stored when it commits."""

    by: int = 1


@dataclass(frozen=True)
class Write:
    """One document write of the commit (``data``'s top-level values may be ``Server`` or ``Increment``)."""

    op: WriteOp
    collection: str
    doc_id: str
    data: Mapping[str, Any]


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    previous_status: str | None
    status: str | None
    change: ChangeEvent | None  # to publish (new, or still pending from an earlier delivery)
    ledger_id: str | None = None  # the ledger entry a duplicate was found under (its change is marked there)


class Standing(enum.Enum):
    """Where an update stands against what is stored: it names the outcome, one function each (decide.py)."""

    DELIVERED_BEFORE = "delivered_before"  # its ledger entry exists: a redelivery, or a duplicate publication
    RE_REPORTED_BEFORE = "re_reported_before"  # a re-report of it is in the document's ring: a duplicate
    SAME_EVENT = "same_event"  # the stored state is this very event (its ledger entry expired since)
    OLDER = "older"  # older than the newest stored state: stale
    RE_REPORT = "re_report"  # newer, but nothing observed changed (a resync, a heartbeat): unchanged
    NEWER = "newer"  # newer and different: applied


class Unread(enum.Enum):
    """What the decision did not read and could change it: the store reads it and has it decided again."""

    NOTHING = "nothing"
    LEDGER = "ledger"  # the update's ledger entry (it is not newer than the state: it may have been processed)
    LEGACY_LEDGER = "legacy_ledger"  # no ledger entry, not newer: an earlier version's entry may hold it


@dataclass(frozen=True)
class Decision:
    """What to do with one update: the writes of one commit (preconditions included: it fails whole if
    anyone wrote first), the result (what to announce: ``result.change``), and what is still unread."""

    standing: Standing
    result: Result
    writes: tuple[Write, ...]
    unread: Unread = Unread.NOTHING
