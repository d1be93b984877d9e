"""What the registered callbacks can match, summed up in one small document (``summaries/callbacks``),
so that upsert can say on each change event whether any callback may want it (the change event's
``notify`` attribute; the notify subscription filters on it: docs/callbacks.md "What it costs").

The summary holds, for the *enabled* callbacks only:

- ``filters``: each distinct filter of the filter callbacks, with how many have it (at most
  ``MAX_FILTERS`` listed; more are counted in ``overflow``, and then every change "may match");
- ``resourceTypes``: for the resource callbacks (there may be millions: their keys are never listed),
  the ``provider/type`` pairs that have one. Added to, never taken from, by registrations: the
  summary is written only when a pair appears, so registering many resources' callbacks does not make
  it a hot document (Firestore holds about one sustained write a second to one document). A pair
  whose callbacks are all gone stays (its changes "may match") until ``rebuild`` recounts;
- ``revision``: how many times it was written.

It is bounded: ``MAX_FILTERS`` filters of at most 4 x 256 characters, and one count per provider and
resource type. It is written in the same Firestore transaction as the callback it accounts for
(``for_update`` then ``write``: registry.py, store.py), so it never says
"no callback" while one that matches is enabled; it can say "may match" when none does (a callback
disabled outside these paths, a filter whose labels do not match), which only costs notify a look.

No document (a deployment older than the summary, or a new one before its first callback): the first
registration creates it when no other callback exists; while callbacks registered before it exist,
it stays absent and every change "may match" (fail-open), until ``rebuild`` (``dcm-status callbacks
summarize``) counts them.

Upsert reads it through view.py (``read``), cached for ``DCM_CALLBACK_VIEW_TTL``
seconds: a callback registered less than that ago can miss a change (docs/callbacks.md "Registration
lag"). Any failure to read it answers "may match".
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import orjson
from dcm_status_contracts.errors import InvalidRequest
from google.cloud import firestore

from shared.callbacks.registration import Callback, Filter, Scope
from shared.state.documents import CALLBACK_SUMMARY, CALLBACKS, SUMMARIES

MAX_FILTERS = 200  # distinct filters listed; more: every change "may match" (the document stays < 250 KB)


def filter_id(where: Filter) -> str:
    """A stable name of a filter (a map key of the summary)."""
    return hashlib.sha256(orjson.dumps(where.to_doc(), option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def resource_type_of(key: str | None) -> str | None:
    """``provider/type`` of a resource key ``provider/type/id``."""
    parts = (key or "").split("/", 2)
    return f"{parts[0]}/{parts[1]}" if len(parts) == 3 and all(parts) else None


@dataclass(frozen=True)
class CallbackSummary:
    """What the enabled callbacks can match. No I/O."""

    filters: Mapping[str, tuple[Filter, int]] = field(default_factory=dict)  # filter id -> (filter, count)
    overflow: int = 0  # enabled filter callbacks beyond MAX_FILTERS distinct filters: not listed
    resource_types: frozenset[str] = frozenset()  # "provider/type" pairs with resource callbacks (add-only)
    revision: int = 0
    complete: bool = True  # False: a rebuild under way (``rebuild``): its readers take it as unknown

    # ---- the decision ---------------------------------------------------------------------------
    @property
    def needs_resource(self) -> bool:
        """Whether a decision needs the changed resource (a listed filter has a label)."""
        return any(where.label for where, _ in self.filters.values())

    @property
    def empty(self) -> bool:
        return not self.filters and not self.overflow and not self.resource_types

    def may_match(self, change: Mapping[str, Any]) -> bool:
        """Whether an enabled callback may ask for ``change`` (an item of the change feed; ``resource``
        needed only when ``needs_resource``)."""
        if self.overflow > 0:
            return True
        if f"{change.get('provider')}/{change.get('resourceType')}" in self.resource_types:
            return True
        return any(where.matches(change) for where, _ in self.filters.values())

    # ---- keeping it right -----------------------------------------------------------------------
    def changed(self, before: Callback | None, after: Callback | None) -> "CallbackSummary":
        """This summary once a callback went from ``before`` to ``after`` (None: absent)."""
        out = self._without(before) if before is not None and not before.disabled else self
        out = out._with(after) if after is not None and not after.disabled else out
        return replace(out, revision=self.revision + 1)

    def _with(self, cb: Callback) -> "CallbackSummary":
        if cb.scope is Scope.RESOURCE:
            pair = resource_type_of(cb.key)
            if pair is None:
                return replace(self, overflow=self.overflow + 1)  # never seen: a key is provider/type/id
            return replace(self, resource_types=self.resource_types | {pair})
        fid = filter_id(cb.filter)
        if fid in self.filters:
            where, n = self.filters[fid]
            return replace(self, filters={**self.filters, fid: (where, n + 1)})
        if len(self.filters) >= MAX_FILTERS:
            return replace(self, overflow=self.overflow + 1)
        return replace(self, filters={**self.filters, fid: (cb.filter, 1)})

    def _without(self, cb: Callback) -> "CallbackSummary":
        # Counts never go below 0 (a summary created while the callback existed uncounted: fail-open anyway)
        if cb.scope is Scope.RESOURCE:
            return self  # add-only (another callback may share the pair: only a recount knows); rebuild
        fid = filter_id(cb.filter)
        if fid in self.filters:
            where, n = self.filters[fid]
            left = {**self.filters, fid: (where, n - 1)}
            return replace(self, filters={k: v for k, v in left.items() if v[1] > 0})
        return replace(self, overflow=max(0, self.overflow - 1))

    # ---- stored form ----------------------------------------------------------------------------
    def to_doc(self) -> dict[str, Any]:
        return {"filters": {fid: {"filter": where.to_doc(), "count": n} for fid, (where, n) in self.filters.items()},
                "overflow": self.overflow, "resourceTypes": sorted(self.resource_types), "revision": self.revision,
                "complete": self.complete, "updatedAt": firestore.SERVER_TIMESTAMP}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> "CallbackSummary":
        """ValueError on a document that is not a summary (its readers then fail open)."""
        try:
            filters = {str(fid): (Filter.of(entry["filter"]), int(entry["count"]))
                       for fid, entry in (doc.get("filters") or {}).items()}
            return cls._of(filters, doc)
        except (InvalidRequest, TypeError, KeyError, AttributeError, ValueError) as exc:
            raise ValueError(f"not a callback summary: {exc}") from exc

    @classmethod
    def _of(cls, filters: Mapping[str, tuple[Filter, int]], doc: Mapping[str, Any]) -> "CallbackSummary":
        return cls(filters={k: v for k, v in filters.items() if v[1] > 0}, overflow=int(doc.get("overflow") or 0),
                   resource_types=frozenset(_strings(doc.get("resourceTypes") or [])),
                   revision=int(doc.get("revision") or 0), complete=doc.get("complete", True) is not False)


def _strings(values: Any) -> list[str]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"expected a list of provider/type, got {str(values)[:80]}")
    return values


# ---- in a callback's transaction ------------------------------------------------------------------
def summary_ref(db: firestore.Client) -> Any:
    return db.collection(SUMMARIES).document(CALLBACK_SUMMARY)


def for_update(db: firestore.Client, transaction: Any, callback_id: str) -> CallbackSummary | None:
    """The summary to update in ``transaction`` (read before its writes), or None when it is to stay absent:
    it does not exist and callbacks other than ``callback_id`` exist (registered before the summary was)."""
    snap = summary_ref(db).get(transaction=transaction)
    if snap.exists:
        try:
            return CallbackSummary.from_doc(snap.to_dict() or {})
        except ValueError:
            return None  # not a summary (altered by hand): left as it is, upsert's view reads it as unknown
    others = [s.id for s in db.collection(CALLBACKS).limit(2).stream(transaction=transaction)]
    return None if [i for i in others if i != callback_id] else CallbackSummary()


def write(db: firestore.Client, transaction: Any, summary: CallbackSummary | None, before: Callback | None,
          after: Callback | None) -> None:
    """Account for a callback going from ``before`` to ``after`` in the same transaction (nothing when the
    summary is to stay absent, or when the change does not change what can match)."""
    if summary is None:
        return
    new = summary.changed(before, after)
    created = summary.revision == 0  # no document yet: write it even when empty ("no callback", known)
    if created or replace(new, revision=summary.revision) != summary:
        transaction.set(summary_ref(db), new.to_doc())


def read(db: firestore.Client, timeout: float) -> CallbackSummary | None:
    """The summary as stored, outside any transaction; None when it is not known: absent while callbacks
    exist (registered before it). Absent with no callback at all: an empty summary (nothing to match).
    Firestore's errors, and ValueError on a document that is no summary, are raised."""
    snap = summary_ref(db).get(timeout=timeout)
    if snap.exists:
        found = CallbackSummary.from_doc(snap.to_dict() or {})
        return found if found.complete else None
    anyone = list(db.collection(CALLBACKS).limit(1).select([]).stream(timeout=timeout))
    return None if anyone else CallbackSummary()


SUMMARIZED_FIELDS = ("hook", "scope", "createdAt", "key", "filter", "disabled")  # what a rebuild reads of each


def rebuild(db: firestore.Client, attempts: int = 5) -> CallbackSummary | None:
    """Count every callback again into the summary (after an upgrade, or to repair it); None when callbacks
    kept changing during every attempt (nothing written but the placeholder: try again).

    Optimistic: the summary's revision is noted (a placeholder marked incomplete is created first when there
    is none, so every registration from then on counts itself into it and bumps its revision), the callbacks
    are read (outside a transaction: there may be many), and the count is written only if the revision has
    not moved meanwhile."""
    ref = summary_ref(db)

    @firestore.transactional
    def start(transaction: Any) -> int:
        snap = ref.get(transaction=transaction)
        try:
            found = CallbackSummary.from_doc(snap.to_dict() or {}) if snap.exists else None
        except ValueError:
            found = None
        if found is None:
            found = CallbackSummary(revision=1, complete=False)
            transaction.set(ref, found.to_doc())
        return found.revision

    @firestore.transactional
    def finish(transaction: Any, seen: int, counted: CallbackSummary) -> bool:
        snap = ref.get(transaction=transaction)
        if not snap.exists or int((snap.to_dict() or {}).get("revision") or 0) != seen:
            return False
        transaction.set(ref, counted.to_doc())
        return True

    for _ in range(attempts):
        seen = start(db.transaction())
        counted = CallbackSummary()
        for snap in db.collection(CALLBACKS).select(list(SUMMARIZED_FIELDS)).stream():
            counted = counted.changed(None, Callback.from_doc(snap.id, snap.to_dict() or {}))
        counted = replace(counted, revision=seen + 1, complete=True)
        if finish(db.transaction(), seen, counted):
            return counted
    return None
