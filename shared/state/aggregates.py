"""The fleet's and the pipeline's aggregates: counts, computed live.

Counting never reads the documents counted: every count is an aggregation query (Firestore bills one
read per 1,000 index entries matched), run concurrently. The counts of one aggregate are taken at one
time: the first count's read time (the server's clock), at which the others read (``read_time``), so
``asOf`` says exactly which commits they hold: every one committed at or before it, none after (a
change's ``committedAt`` is its commit time, so a reader can tell which changes a figure holds).

These run where an operator or the platform's schedule asks for them (the CLI, the demo, the sweep's
snapshots: shared/state/snapshots.py); the api serves the snapshots, never a count per reader.
``options`` are the reads' retry and timeout (the callers': shared/api/queries.py passes an operator's).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping

from dcm_status_contracts import timeutil
from dcm_status_contracts.model import CommonStatus
from dcm_status_contracts.schemas import registry
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.state import resources
from shared.state.documents import (
    DEADLETTERS,
    DOCUMENT_RE_REPORTS,
    DOCUMENT_WRITES,
    DUPLICATES,
    HISTORY_OUTCOMES,
    LEDGER,
    PROVIDERS,
    RESOURCES,
    SHARD_SPACE,
    Outcome,
)

COUNT_WORKERS = 16  # counts of one aggregate run at once (per process)
_COUNTING = ThreadPoolExecutor(max_workers=COUNT_WORKERS, thread_name_prefix="count")
READ_TIME = "read_time"


def count(query: Any, options: Mapping[str, Any] | None = None) -> int:
    """A server-side count (an aggregation query: no documents are read)."""
    return int(_count_result(query, options).value)


def _count_result(query: Any, options: Mapping[str, Any] | None) -> Any:
    return query.count().get(**(options or {}))[0][0]


def count_later(query: Any, options: Mapping[str, Any] | None = None) -> Future[int]:
    """``count(query)``, run beside what the caller reads meanwhile."""
    return _COUNTING.submit(count, query, options)


def tally(query: Any, field: str, up_to: int, options: Mapping[str, Any] | None = None) -> dict[Any, int] | None:
    """``{value: n}`` of ``field`` over what ``query`` matches, read in one pass (a projection of the field: one
    read per document in production, where a count is one per 1,000; one scan of the collection on the emulator,
    where every count is a scan of its own), all at one time; None when more than ``up_to`` match (nothing
    counted). A document without the field is counted under None."""
    found: dict[Any, int] = {}
    for snap in query.select([field]).limit(up_to + 1).stream(**(options or {})):
        value = (snap.to_dict() or {}).get(field)
        found[value] = found.get(value, 0) + 1
    return found if sum(found.values()) <= up_to else None


def tally_later(query: Any, field: str, up_to: int, options: Mapping[str, Any] | None = None
                ) -> Future[dict[Any, int] | None]:
    """``tally(query, field, up_to)``, run beside what the caller reads meanwhile."""
    return _COUNTING.submit(tally, query, field, up_to, options)


def counts(queries: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> dict[str, int]:
    """``{name: count}`` of several aggregation queries, run concurrently."""
    futures = {name: count_later(q, options) for name, q in queries.items()}
    return {name: f.result() for name, f in futures.items()}


def counts_at_one_time(queries: Mapping[str, Any], options: Mapping[str, Any] | None = None
                       ) -> tuple[dict[str, int], datetime]:
    """``counts(queries)`` all read at one time, and that time: the first query's read time (the
    server's), or ``options["read_time"]`` when given. One round trip more than ``counts``."""
    options = dict(options or {})
    names = list(queries)
    got: dict[str, int] = {}
    if READ_TIME not in options:
        first = _count_result(queries[names[0]], options)
        got[names[0]] = int(first.value)
        options[READ_TIME] = first.read_time
    got.update(counts({n: queries[n] for n in names if n not in got}, options))
    return {n: got[n] for n in names}, options[READ_TIME]


def statuses(resource_type: str | None = None) -> tuple[str, ...]:
    """The normalised statuses of a resource type (of every type when None), UNKNOWN included."""
    reg = registry()
    types = [resource_type] if resource_type else list(reg.resource_types)
    found: list[str] = []
    for t in types:
        schema = reg.current.get(t)
        found += [s for s in (schema.statuses if schema else ()) if s not in found]
    return tuple(found + ([CommonStatus.UNKNOWN.value] if CommonStatus.UNKNOWN not in found else []))


def summary_queries(db: Any, providers: Iterable[str]) -> dict[str, Any]:
    """The counts of the summary: the total first, then one per type and status, one per provider."""
    resources = db.collection(RESOURCES)
    queries: dict[str, Any] = {"total": resources}
    for t in registry().resource_types:
        for s in statuses(t):
            queries[f"type:{t}:{s}"] = (resources.where(filter=FieldFilter("resourceType", "==", t))
                                        .where(filter=FieldFilter("status", "==", s)))
    for p in providers:
        queries[f"provider:{p}"] = resources.where(filter=FieldFilter("provider", "==", p))
    return queries


def marker(db: Any, providers: Iterable[str], options: Mapping[str, Any] | None = None
           ) -> tuple[dict[str, Any], datetime]:
    """What the summary's counts depend on, in one aggregation query (one read per 1,000 resources), and its
    read time: how many resource documents there are and how many writes they have had in all (every write of
    one adds to its ``documentWrites``: upsert's, the sweep's), with the providers counted. Equal at two times:
    no resource document was written in between (none is ever deleted), so counts read at the first hold at
    the second."""
    result = db.collection(RESOURCES).count(alias="n").sum(DOCUMENT_WRITES, alias="w").get(**(options or {}))
    got = {r.alias: r for r in result[0]}
    return ({"resources": int(got["n"].value), "writes": int(got["w"].value or 0), "providers": sorted(providers)},
            got["n"].read_time)


def summary(db: Any, providers: Iterable[str], options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Resources per type and status, and per provider (aggregation queries), and the providers silent as a
    whole (``providers/{p}``: one read each), all as of one time (``asOf``)."""
    return summary_since(db, providers, None, options)[0]


def summary_since(db: Any, providers: Iterable[str], previous: Any = None,
                  options: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``summary``, and its ``marker``: counted again only when the marker moved since the ``previous`` summary
    (a snapshot: shared/state/snapshots.py, with the marker it was counted at); else its counts, as of now (no
    resource document was written since they were read). The silent providers are read again either way."""
    providers = list(providers)
    mark, at = marker(db, providers, options)
    options = {**(options or {}), READ_TIME: at}
    if previous is not None and previous.marker == mark:
        kept = previous.figures
        by_type, by_provider, total = kept["byType"], kept["byProvider"], kept["total"]
    else:
        seen = previous.figures.get("byType") if previous is not None else None
        got = summary_counts(db, providers, seen, options)
        by_type, by_provider, total = _by_type(got), _by_provider(got), got["total"]
    silent = [{"provider": s.id, "since": d.get("since"), "lastSeenAt": d.get("lastSeenAt")}
              for s in db.collection(PROVIDERS).where(filter=FieldFilter("state", "==", "SILENT")).stream(**options)
              for d in [s.to_dict()]]
    return {"total": total, "byType": by_type, "byProvider": by_provider,
            "silentProviders": sorted(silent, key=lambda d: d["provider"]), "asOf": timeutil.format(at)}, mark


def summary_counts(db: Any, providers: Iterable[str], seen: Mapping[str, Mapping[str, int]] | None,
                   options: Mapping[str, Any]) -> dict[str, int]:
    """The summary's counts (``summary_queries``' names), at the read time ``options`` give: the total, one per
    type and per provider, and one per status of a type that the ``seen`` summary's counts had (every status of
    every type when None); a type whose counted statuses fall short of its count (a status it did not have
    then) has the rest of its statuses counted too. Every resource has one status: exact, at one count per
    type and per status present rather than one per status of the registry."""
    every = summary_queries(db, providers)
    first = {n: q for n, q in every.items() if not n.startswith("type:") or seen is None
             or n.split(":", 2)[2] in (seen.get(n.split(":", 2)[1]) or {})}
    types = {} if seen is None else {f"of:{t}": db.collection(RESOURCES).where(
        filter=FieldFilter("resourceType", "==", t)) for t in registry().resource_types}
    got = counts({**first, **types}, options)
    short = [t for t in types if sum(n for name, n in got.items() if name.startswith(f"type:{t[3:]}:")) != got[t]]
    rest = {n: q for n, q in every.items() if n not in got and any(n.startswith(f"type:{t[3:]}:") for t in short)}
    got.update(counts(rest, options) if rest else {})
    return {n: got.get(n, 0) for n in every}


def _by_type(got: Mapping[str, int]) -> dict[str, dict[str, int]]:
    by_type: dict[str, dict[str, int]] = {}
    for name, n in got.items():
        if name.startswith("type:") and n:
            _, t, s = name.split(":", 2)
            by_type.setdefault(t, {})[s] = n
    return by_type


def _by_provider(got: Mapping[str, int]) -> dict[str, int]:
    return {name.split(":", 1)[1]: n for name, n in got.items() if name.startswith("provider:") and n}


def status_counts(db: Any) -> dict[str, dict[str, int]]:
    """{resourceType: {status: n}} over all resources."""
    return summary(db, ())["byType"]


def outcome_queries(db: Any, window_days: int = 7) -> dict[str, Any]:
    """The counts of the accounting: updates per outcome over the ledger's retention window (``window_days``:
    DCM_LEDGER_TTL_DAYS), distinct duplicate publications, dead letters, and the resources held. An applied or
    stale update's entry is its resource's history (no TTL): counted by ``recordedAt`` within the window, over
    every shard; a hot resource's re-report entry and a duplicate's record expire with the window (TTL)."""
    ledger = db.collection(LEDGER)
    since = timeutil.format(timeutil.now() - timedelta(days=window_days))
    [every_shard] = resources.shard_groups(ledger, SHARD_SPACE)
    return {
        **{o.value: every_shard.where(filter=FieldFilter("outcome", "==", o.value))
           .where(filter=FieldFilter("recordedAt", ">=", since)) for o in HISTORY_OUTCOMES},
        Outcome.UNCHANGED.value: ledger.where(filter=FieldFilter("outcome", "==", Outcome.UNCHANGED.value)),
        Outcome.DUPLICATE.value: db.collection(DUPLICATES),
        "deadlettered": db.collection(DEADLETTERS),
        "resources": db.collection(RESOURCES),
    }


def total(query: Any, field: str, options: Mapping[str, Any] | None = None) -> int:
    """A server-side sum of a numeric field (an aggregation query: no documents are read)."""
    result = query.sum(field).get(**(options or {}))
    return int(result[0][0].value or 0)


def outcome_counts(db: Any, options: Mapping[str, Any] | None = None, window_days: int = 7) -> dict[str, int]:
    """Updates per outcome over the ledger's retention window, the dead letters and the resources held."""
    return stats(db, options, window_days)


def stats(db: Any, options: Mapping[str, Any] | None = None, window_days: int = 7) -> dict[str, Any]:
    """Outcome counters over the ledger's retention window (``window_days``), as of one time (``asOf``): the
    one place the accounting is computed (the CLI, the demo and the sweep's snapshot all call it).

    ``received`` is every provider message that reached a final outcome:
    applied + unchanged (re-reports) + duplicate + stale + deadlettered. ``unchanged``: the re-reports the
    ledger holds (a hot resource's, and those recorded before a re-report stopped writing a ledger entry) and
    those only their resource's document counts (``documentReReports``, since the resource was first stored:
    a re-report of unchanged state leaves no ledger entry to count in the window, shared/upsert/decide.py).
    """
    outcomes, at = counts_at_one_time(outcome_queries(db, window_days), options)
    outcomes[Outcome.UNCHANGED.value] += total(db.collection(RESOURCES), DOCUMENT_RE_REPORTS,
                                               {**(options or {}), READ_TIME: at})
    counted = (Outcome.APPLIED.value, Outcome.UNCHANGED.value, Outcome.STALE.value, Outcome.DUPLICATE.value,
               "deadlettered")
    final = {o: outcomes[o] for o in counted}
    return {**final, "resources": outcomes["resources"], "received": sum(final.values()),
            "asOf": timeutil.format(at)}
