"""Read side: look resources up, page through them, count them, and the pipeline's accounting.

Counting never reads the documents counted: every count is an aggregation query
(Firestore bills one read per 1,000 index entries matched), run concurrently; the fleet summary and the
accounting are computed in shared/state/aggregates.py (the api serves the sweep's snapshots of them:
shared/state/snapshots.py).
Page tokens are opaque to clients: ``base64url(JSON [sort, last values...])``.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Collection, Iterable, Iterator, Mapping

from dcm_status_contracts import timeutil, tokens
from dcm_status_contracts.errors import InvalidRequest, Reason
from dcm_status_contracts.model import ResourceKey
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.runtime import firestore as fs
from shared.state import aggregates, resources
from shared.state.documents import (
    DEADLETTERS,
    HISTORY_FIELDS,
    LEDGER,
    PROVIDERS,
    RESOURCE_SHARD_SPACE,
    RESOURCES,
    EntryState,
    Outcome,
)

SEARCH_END = "\uf8ff"  # the last code point Firestore orders: [q, q + SEARCH_END) is "starts with q"
MAX_PAGE_SIZE = 500
DEADLETTER_GROUPS_OF = 500  # the latest entries the dead-letter groups are computed from


class Sort:
    KEY = "key"
    RECENT = "-updatedAt"
    SEARCH = "resourceId"  # forced by a prefix search (Firestore orders by the range field first)


# ---- point reads -------------------------------------------------------------------------
def get_resource(db: firestore.Client, key: ResourceKey, options: Mapping[str, Any] | None = None
                 ) -> dict[str, Any] | None:
    """The resource's newest state: its document, or a newer state its updates coalesced into while it
    was hot (shared/state/resources.py). Lists and counts read documents only."""
    options = options or fs.read_options()
    snap = db.collection(RESOURCES).document(key.doc_id).get(**options)
    doc = resources.newest(db, snap.to_dict() if snap.exists else None, **options)
    return dict(doc) if doc is not None else None


def history(db: firestore.Client, key: ResourceKey, limit: int = 50) -> list[dict[str, Any]]:
    return history_page(db, key, limit)[0]


def history_page(db: firestore.Client, key: ResourceKey, limit: int = 50, token: str | None = None,
                 options: Mapping[str, Any] | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """One page of a resource's history, newest observation first, and the next page's token. History is
    the resource's ledger entries that carry it (applied, stale: only they have ``observedAt``), shown as
    their history fields (shared/state/documents.py)."""
    ledger = db.collection(LEDGER)
    query = (_history_of(ledger, key).order_by("observedAt", direction=firestore.Query.DESCENDING)
             .order_by("__name__", direction=firestore.Query.DESCENDING))
    if token:
        observed_at, entry_id = _token_values(token, "history", 2)
        query = query.start_after({"observedAt": observed_at, "__name__": ledger.document(entry_id)})
    snaps = list(query.limit(limit + 1).stream(**(options or fs.read_options())))
    more = len(snaps) > limit
    snaps = snaps[:limit]
    entries = [s.to_dict() for s in snaps]
    next_token = _token("history", entries[-1]["observedAt"], snaps[-1].id) if more else None
    return entries, next_token


def state_at(db: firestore.Client, key: ResourceKey, at: str,
             options: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The state the platform knew at ``at`` (canonical): the last update applied by then."""
    query = (_history_of(db.collection(LEDGER), key).where(filter=FieldFilter("recordedAt", "<=", at))
             .order_by("recordedAt", direction=firestore.Query.DESCENDING))
    for snap in query.stream(**(options or fs.read_options())):  # stale entries are skipped: a few at most
        entry = snap.to_dict()
        if entry.get("outcome") == Outcome.APPLIED.value:
            return entry
    return None


def _history_of(ledger: Any, key: ResourceKey) -> Any:
    """The ledger entries of one resource, as history entries (composite indexes key + observedAt, key +
    recordedAt: terraform/data_model.tf). Ordered by a history field, they are its history entries only."""
    return ledger.where(filter=FieldFilter("key", "==", str(key))).select(HISTORY_FIELDS)


# ---- lists --------------------------------------------------------------------------------
@dataclass(frozen=True)
class ResourceFilter:
    provider: str | None = None
    resource_type: str | None = None
    status: str | None = None
    label: tuple[str, str] | None = None  # (tenant|region|environment, value)
    search: str | None = None  # resource id prefix

    def equalities(self) -> list[tuple[str, str]]:
        pairs = [("provider", self.provider), ("resourceType", self.resource_type), ("status", self.status)]
        if self.label:
            pairs.append((f"metadata.{self.label[0]}", self.label[1]))
        return [(f, v) for f, v in pairs if v]

    def query(self, db: firestore.Client) -> Any:
        query: Any = db.collection(RESOURCES)
        for field, value in self.equalities():
            query = query.where(filter=FieldFilter(field, "==", value))
        if self.search:
            query = (query.where(filter=FieldFilter("resourceId", ">=", self.search))
                     .where(filter=FieldFilter("resourceId", "<", self.search + SEARCH_END)))
        return query


def list_resources(db: firestore.Client, provider: str | None = None, resource_type: str | None = None,
                   status: str | None = None, limit: int | None = None) -> Iterator[dict[str, Any]]:
    query = ResourceFilter(provider, resource_type, status).query(db)
    if limit:
        query = query.limit(limit)
    for doc in query.stream(**fs.read_options()):
        yield doc.to_dict()


def resource_page(db: firestore.Client, where: ResourceFilter, sort: str = Sort.KEY, limit: int = 50,
                  token: str | None = None, options: Mapping[str, Any] | None = None
                  ) -> tuple[list[dict[str, Any]], str | None]:
    """One page of resources matching ``where``, sorted, and the next page's token (None on the last)."""
    sort = Sort.SEARCH if where.search else sort
    field = {Sort.SEARCH: "resourceId", Sort.RECENT: "updatedAt"}.get(sort)
    descending = sort == Sort.RECENT
    # updatedAt is sharded (shared/state/documents.py): every shard read, in groups merged in the same order
    queries = (resources.shard_groups(where.query(db), RESOURCE_SHARD_SPACE) if sort == Sort.RECENT
               else [where.query(db)])
    after = _after(db, sort, field, token)
    queries = [_ordered(q, field, descending, after) for q in queries]
    snaps = resources.merged(queries, field, descending, limit + 1, **(options or fs.read_options()))
    more = len(snaps) > limit
    snaps = snaps[:limit]
    docs = [s.to_dict() for s in snaps]
    if not more:
        return docs, None
    return docs, _token(sort, *([docs[-1][field]] if field else []), snaps[-1].id)


def _after(db: firestore.Client, sort: str, field: str | None, token: str | None) -> dict[str, Any] | None:
    """Where the page starts: after the position its token names."""
    if not token:
        return None
    values = _token_values(token, sort, 2 if field else 1)
    position = {"__name__": db.collection(RESOURCES).document(values[-1])}
    return {field: values[0], **position} if field else position


def _ordered(query: Any, field: str | None, descending: bool, after: dict[str, Any] | None) -> Any:
    direction = firestore.Query.DESCENDING if descending else firestore.Query.ASCENDING
    if field:
        query = query.order_by(field, direction=direction)
    query = query.order_by("__name__", direction=direction)
    return query.start_after(after) if after else query


def _token(kind: str, *values: str) -> str:
    return tokens.to_token([kind, *values])


def _token_values(token: str, kind: str, n: int) -> list[str]:
    """The values of a page token the API handed out; the last is always a document id."""
    try:
        got = tokens.from_token(token)
    except ValueError as exc:
        raise InvalidRequest("pageToken: not a page token of this list", "pageToken") from exc
    if (not isinstance(got, list) or len(got) != n + 1 or got[0] != kind
            or not all(isinstance(v, str) for v in got) or not fs.is_document_id(got[-1])):
        raise InvalidRequest("pageToken: not a page token of this list (filters or sort changed?)", "pageToken")
    return got[1:]


# ---- counts (shared/state/aggregates.py: the one place they are computed) ------------------------
statuses = aggregates.statuses


def count(query: Any, options: Mapping[str, Any] | None = None) -> int:
    """A server-side count (an aggregation query: no documents are read)."""
    return aggregates.count(query, options or fs.read_options())


def total(query: Any, field: str, options: Mapping[str, Any] | None = None) -> int:
    """A server-side sum of a numeric field (an aggregation query: no documents are read)."""
    return aggregates.total(query, field, options or fs.read_options())


def count_later(query: Any, options: Mapping[str, Any] | None = None) -> Future[int]:
    """``count(query)``, run beside what the caller reads meanwhile."""
    return aggregates.count_later(query, options or fs.read_options())


def counts(queries: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> dict[str, int]:
    """``{name: count}`` of several aggregation queries, run concurrently."""
    return aggregates.counts(queries, options or fs.read_options())


def status_counts_later(db: firestore.Client, where: ResourceFilter, likely: Collection[str] | None = None,
                        options: Mapping[str, Any] | None = None) -> dict[str, Future[int]]:
    """The counts per status of what matches ``where``, started now (to run beside the page): none when it names
    a status (its count is the total); else those of the ``likely`` statuses, every status of its types when
    None (``status_counts_of`` counts the rest only if these do not add up to the total)."""
    if where.status:
        return {}
    return {s: count_later(_of_status(db, where, s), options) for s in statuses(where.resource_type)
            if likely is None or s in likely}


def status_counts_of(db: firestore.Client, where: ResourceFilter, total: int,
                     started: Mapping[str, Future[int]] | None = None,
                     options: Mapping[str, Any] | None = None) -> dict[str, int]:
    """Matching resources per status (only the statuses some resource has), given ``total`` (how many match)
    and the counts ``status_counts_later`` started. Every resource has one status, so counts that add up to the
    total are all there is; when they fall short (a status the fleet summary had not seen yet), the statuses
    not counted yet are counted too: as exact as counting every status, at one count per status present."""
    if where.status:
        return {where.status: total} if total else {}
    got = {s: f.result() for s, f in (started or {}).items()}
    if sum(got.values()) != total:
        got.update(counts({s: _of_status(db, where, s) for s in statuses(where.resource_type) if s not in got},
                          options))
    return {s: n for s, n in got.items() if n}


@dataclass(frozen=True)
class ListCounts:
    """A list's total and, when asked for, its counts per status: started beside its page
    (``list_counts_later``), read after it (``result``)."""
    db: Any
    where: ResourceFilter
    likely: Collection[str] | None  # the statuses the fleet summary saw (None: every status of the types)
    options: Mapping[str, Any] | None
    total: Future[int] | None = None
    statuses: Mapping[str, Future[int]] | None = None  # None: no counts per status asked for
    tally: Future[dict[Any, int] | None] | None = None  # a search's statuses in one pass of its rows

    def result(self) -> tuple[int, dict[str, int] | None]:
        """``(total, {status: n} or None)``; a one-pass tally that found more rows than it reads is counted
        after all, with the counts per status (``status_counts_of``)."""
        if self.tally is not None:
            tallied = self.tally.result()
            if tallied is None:
                return _counted(self.db, self.where, True, self.likely, self.options).result()
            return sum(tallied.values()), {s: n for s, n in tallied.items() if s is not None}
        total = self.total.result() if self.total is not None else 0
        if self.statuses is None:
            return total, None
        return total, status_counts_of(self.db, self.where, total, self.statuses, self.options)


def list_counts_later(db: firestore.Client, where: ResourceFilter, with_counts: bool,
                      likely: Collection[str] | None = None, tally_up_to: int = 0,
                      options: Mapping[str, Any] | None = None) -> ListCounts:
    """What a list answers beside its page, started now: its total (an aggregation query) and, ``with_counts``,
    its counts per status (``status_counts_later``). A search (``q``) with counts and no status filter reads its
    rows' statuses in one pass instead, when ``tally_up_to`` > 0 and they are at most that many (total and counts
    at one time; DCM_SEARCH_COUNT_ROWS: the local stack's, whose emulator scans the whole collection for every
    query, a count per status included; production counts, at one read per 1,000 resources a count)."""
    if with_counts and where.search and not where.status and tally_up_to > 0:
        return ListCounts(db, where, likely, options,
                          tally=aggregates.tally_later(where.query(db), "status", tally_up_to,
                                                       options or fs.read_options()))
    return _counted(db, where, with_counts, likely, options)


def _counted(db: firestore.Client, where: ResourceFilter, with_counts: bool, likely: Collection[str] | None,
             options: Mapping[str, Any] | None) -> ListCounts:
    return ListCounts(db, where, likely, options, total=count_later(where.query(db), options),
                      statuses=status_counts_later(db, where, likely, options) if with_counts else None)


def _of_status(db: firestore.Client, where: ResourceFilter, status: str) -> Any:
    return (ResourceFilter(where.provider, where.resource_type, None, where.label, where.search).query(db)
            .where(filter=FieldFilter("status", "==", status)))


def summary(db: firestore.Client, providers: Iterable[str], options: Mapping[str, Any] | None = None
            ) -> dict[str, Any]:
    """The fleet summary computed live (shared/state/aggregates.py summary), with an operator's read
    options; the api serves the sweep's snapshot of it instead (shared/state/snapshots.py)."""
    return aggregates.summary(db, providers, options or fs.read_options())


def providers(db: firestore.Client, names: Iterable[str], deadline: Any = lambda provider: None,
              options: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Where each provider stands: SILENT or REPORTING as the sweep last found it (``providers/{p}``,
    written at each transition), UNSEEN while it holds no resource; its resources (aggregation
    queries) and its freshness deadline (``deadline(provider)``, seconds)."""
    names = list(names)
    held = counts({p: db.collection(RESOURCES).where(filter=FieldFilter("provider", "==", p)) for p in names},
                  options)
    states = {s.id: s.to_dict() for s in db.collection(PROVIDERS).stream(**(options or fs.read_options()))}
    out = []
    for p in names:
        known = states.get(p) or {}
        state = known.get("state") or ("REPORTING" if held[p] else "UNSEEN")
        out.append({"provider": p, "state": state, "since": known.get("since"),
                    "lastSeenAt": known.get("lastSeenAt"), "deadlineSeconds": deadline(p), "resources": held[p]})
    return out


def status_counts(db: firestore.Client) -> dict[str, dict[str, int]]:
    """{resourceType: {status: n}} over all resources, computed live."""
    return summary(db, ())["byType"]


def outcome_counts(db: firestore.Client, options: Mapping[str, Any] | None = None,
                   window_days: int = 7) -> dict[str, int]:
    """Updates per outcome over the ledger's retention window, the dead letters and the resources held."""
    return aggregates.outcome_counts(db, options or fs.read_options(), window_days)


def stats(db: firestore.Client, options: Mapping[str, Any] | None = None, window_days: int = 7) -> dict[str, Any]:
    """The pipeline's accounting computed live: shared/state/aggregates.py ``stats`` (the one place it is
    computed), with an operator's read options. ``received`` = applied + unchanged (re-reports) +
    duplicate + stale + deadlettered; ``asOf``: the time the counts were read at."""
    return aggregates.stats(db, options or fs.read_options(), window_days)


def announced_changes(db: firestore.Client) -> int:
    """Ledger entries that carry a change event: every change upsert announced since history is kept on the
    ledger (a change entry is an applied or stale update's: no TTL)."""
    return count(db.collection(LEDGER).where(filter=FieldFilter("change", "!=", None)))


# ---- dead letters -----------------------------------------------------------------------------
def deadletter_summary(db: firestore.Client, provider: str | None = None, reason: str | None = None,
                       options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Dead letters per reason (aggregation queries) and the groups of the latest entries."""
    base: Any = db.collection(DEADLETTERS)
    if provider:
        base = base.where(filter=FieldFilter("provider", "==", provider))
    reasons = [reason] if reason else [r.value for r in Reason]
    got = counts({"total": base, **{r: base.where(filter=FieldFilter("reason", "==", r)) for r in reasons}},
                 options)
    latest = base.where(filter=FieldFilter("reason", "==", reason)) if reason else base
    fields = ["fingerprint", "reason", "provider", "message", "occurrences", "state", "firstSeen", "lastSeen"]
    entries = [s.to_dict() for s in latest.order_by("lastSeen", direction=firestore.Query.DESCENDING)
               .limit(DEADLETTER_GROUPS_OF).select(fields).stream(**(options or fs.read_options()))]
    return {"total": got.pop("total") if not reason else got[reason],
            "byReason": {r: n for r, n in got.items() if n and r != "total"},
            "groups": groups(entries), "groupsOf": len(entries)}


def groups(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entries grouped by fingerprint, biggest first."""
    table: dict[str, dict[str, Any]] = {}
    for e in entries:
        g = table.setdefault(e["fingerprint"], {
            "fingerprint": e["fingerprint"], "reason": e["reason"], "provider": e.get("provider"),
            "message": e["message"], "entries": 0, "occurrences": 0, "open": 0,
            "firstSeen": e["firstSeen"], "lastSeen": e["lastSeen"]})
        g["entries"] += 1
        g["occurrences"] += e.get("occurrences", 1)
        g["open"] += e.get("state") != EntryState.REPLAYED
        g["firstSeen"] = min(g["firstSeen"], e["firstSeen"])
        g["lastSeen"] = max(g["lastSeen"], e["lastSeen"])
    return sorted(table.values(), key=lambda g: (-g["occurrences"], g["fingerprint"]))


def canonical_time(value: str, parameter: str) -> str:
    try:
        return timeutil.canonical(value)
    except ValueError as exc:
        raise InvalidRequest(f"{parameter}: {exc}", parameter) from exc
