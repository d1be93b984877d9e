"""The transition set of every resource, as upsert stores it with each change (``recorded_transition``, in the
commit of the change's ledger entry: shared/upsert/decide.py) and every usage reader reads it (the CLI's report,
the api's /v1/usage, billing's daily usage snapshot).

- ``billing_resources/{provider~type~id}/transitions/{changeEventId}``: one
  document per change event: status, at (= newTransitionTime, canonical),
  labels, late, the resource's key, provider and resourceType, and
  ``oldSide``: the old side of the change (oldStatus since oldTransitionTime,
  see ``implied_document``), which readers see as a transition of its own,
  ``{changeEventId}~old``; a late change's ``resumedSide``: the status a
  re-report showed after it (``Resumed``), ``{changeEventId}~resumed``.

**One Firestore write per change event**, and nothing else: the parent
``billing_resources/{key}`` document is never written (a subcollection needs
no parent document), so there is no second write, no transaction, no read
before the write and no hot document: one more write in upsert's commit of the
change. The write is keyed by the change event's id and its content is a
function of the change event alone (but ``recordedAt`` and ``recordedUs``:
when): a change decided again (a commit that lost to another writer) writes
the same document, and a redelivery of its update writes nothing (its ledger
entry says it was processed), so updates delivered in any order converge to
the same set of documents.

Readers find the resources through the transitions themselves: a
collection-group query on ``transitions`` with equality filters on
``provider`` and ``resourceType`` (every transition document carries them,
from the first version on) returns every matching resource's whole set in
one query; a tenant filter first finds the resources that ever had that
tenant label (``labels.tenant ==``), then reads those resources' whole sets,
since a resource that moved between tenants is split between them by the
labels of each transition. terraform/data_model.tf declares the
collection-group indexes those filters need (``GROUP_FILTER_FIELDS``).

Parent documents written before (identity, ``tenants``, ``firstAtUs`` /
``lastAtUs``, merged at every change) are left where they are and read by
nobody: their transitions are found like any other.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterator, Mapping

from dcm_status_contracts import timeutil
from dcm_status_contracts.model import CommonStatus
from dcm_status_contracts.status_changed import ChangeEventView
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.state import documents
from shared.state.usage.intervals import Transition, microseconds

BILLING_RESOURCES = "billing_resources"
TRANSITIONS = documents.TRANSITIONS  # a collection-group name: no other collection may be called so
PAGE = 1000  # documents per query page: each page is one RPC with its own deadline (the reader's options)
IMPLIED_SUFFIX = "~old"  # id suffix of the transition implied by a change's old side
OLD_SIDE = "oldSide"  # the field of a transition document that holds it
RESUMED_SUFFIX, RESUMED_SIDE = "~resumed", "resumedSide"  # a late change's resumed side: its id suffix and field
KEY, PROVIDER, RESOURCE_TYPE, TENANT_LABEL, AT_US = "key", "provider", "resourceType", "labels.tenant", "atUs"
# When upsert recorded the document (µs since the epoch) and its shard: the daily usage snapshot
# (shared/state/usage/snapshot.py) reads what was recorded since it last looked, one collection-group query
# over (shard in every shard, recordedUs). A value increasing at the change rate, so only ever indexed behind
# the shard (documents.SEQUENTIAL_FIELDS; terraform/data_model.tf exempts its single-field index and declares
# the composite one).
RECORDED_US = "recordedUs"
# The fields readers filter the ``transitions`` collection group on (equality): each needs a single-field
# index of collection-group scope, which Firestore does not keep by default (terraform/data_model.tf).
GROUP_FILTER_FIELDS = (PROVIDER, RESOURCE_TYPE, TENANT_LABEL)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def epoch_us(dt: datetime) -> int:
    return microseconds(dt - EPOCH)


def transition_document(change: ChangeEventView, now: str, recorded_us: int | None = None) -> dict[str, Any]:
    """The transition document of a change (``recorded_transition``: with its old side); ``recorded_us``: when (with its shard, what the daily usage
    snapshot reads by)."""
    return {
        "status": change.new_status,
        "at": change.at,
        "atUs": epoch_us(timeutil.parse(change.at)),
        "observedAt": change.observed_at,
        "publishedAt": change.published_at,
        "eventId": change.event_id,
        "implied": False,
        "oldStatus": change.old_status,
        "late": change.late,
        "labels": dict(change.labels),
        "key": change.key,
        "provider": change.provider,
        "resourceType": change.resource_type,
        "recordedAt": now,
        **({} if recorded_us is None else {
            RECORDED_US: recorded_us,
            documents.SHARD: documents.shard_of(change.event_id, documents.TRANSITION_SHARDS,
                                                documents.TRANSITION_SHARDS)}),
    }


def transitions_path(doc_id: str) -> str:
    """The collection path of one resource's transitions (``billing_resources/{doc id}/transitions``)."""
    return f"{BILLING_RESOURCES}/{doc_id}/{TRANSITIONS}"


@dataclass(frozen=True)
class Resumed:
    """What a late change was followed by, in the order the provider saw them: a re-report of ``status`` with a
    later transition time (``at``), which upsert took for no change when it came first (shared/upsert/decide.py
    ``_resumed``). In that order it was a transition back; readers see it as one, ``{changeEventId}~resumed``."""

    status: str
    at: str
    labels: Mapping[str, str]


def recorded_transition(change: ChangeEventView, now: datetime, resumed: Resumed | None = None
                        ) -> dict[str, Any] | None:
    """The transition document of ``change`` recorded at ``now`` (its old side in ``oldSide``, a late one's
    ``resumed`` side in ``resumedSide``), stored as ``transitions_path(change.doc_id)/{change.event_id}``; None
    for a change that is no transition of usage:

    - the platform's "not reported lately" (UNKNOWN, reason NotReported) is no observed state: usage goes on as
      last known until the provider reports again (then its report, at its own time, is the next transition);
    - new output maps only (status-changed 1.3: same status at the same time): usage is as it was.

    Upsert writes it in the commit that writes the change's ledger entry (shared/upsert/decide.py): a change is
    recorded with the state change, or not at all."""
    if change.new_status == CommonStatus.UNKNOWN and change.reason == documents.PlatformReason.NOT_REPORTED:
        return None
    if not change.transition:
        return None
    recorded_at = timeutil.format(now)
    doc = transition_document(change, recorded_at, epoch_us(now))
    implied = implied_document(change, recorded_at)
    if implied:
        doc[OLD_SIDE] = implied[1]
    if resumed is not None and change.late:
        doc[RESUMED_SIDE] = resumed_document(change, resumed, recorded_at)
    return doc


def resumed_document(change: ChangeEventView, resumed: Resumed, now: str) -> dict[str, Any]:
    """A late change's resumed side, as a transition of its own (implied, as an old side is)."""
    return {"status": resumed.status, "at": resumed.at, "atUs": epoch_us(timeutil.parse(resumed.at)),
            "observedAt": "", "eventId": change.event_id, "implied": True, "oldStatus": change.new_status,
            "late": False, "labels": dict(resumed.labels), "key": change.key, "provider": change.provider,
            "resourceType": change.resource_type, "recordedAt": now}


def implied_document(change: ChangeEventView, now: str) -> tuple[str, dict[str, Any]] | None:
    """The old side of a change, as a transition of its own: ``(doc id, document)``.

    A change ``old -> new`` also says "the resource was ``oldStatus`` from
    ``oldTransitionTime`` on" (what upsert held). Usually that repeats a
    transition already stored; it matters when the old state was stored
    without a change event of its own: a report with the *same* status but a
    later transition time (RUNNING 10:00, RUNNING again 13:00 after a stop
    at 12:30 that arrived late) is not a status change for upsert. Late
    events carry no old side. Ties at the same instant go to real transitions
    (an implied one has the empty ``observedAt``, which sorts first).
    The platform's "not reported lately" (UNKNOWN, NotReported) is no old
    side: no observed state, usage went on as last known through the silence.
    """
    if change.late or not change.old_status or not change.old_at:
        return None
    if change.old_status == CommonStatus.UNKNOWN and change.old_reason == documents.PlatformReason.NOT_REPORTED:
        return None
    doc_id = change.event_id + IMPLIED_SUFFIX
    return doc_id, {
        "status": change.old_status,
        "at": change.old_at,
        "atUs": epoch_us(timeutil.parse(change.old_at)),
        "observedAt": "",
        "eventId": change.event_id,
        "implied": True,
        "oldStatus": None,
        "late": False,
        "labels": dict(change.old_labels or {}),
        "key": change.key,
        "provider": change.provider,
        "resourceType": change.resource_type,
        "recordedAt": now,
    }


@dataclass(frozen=True)
class ResourceTransitions:
    """One resource's identity and its whole transition set (old sides included)."""

    doc_id: str
    key: str
    provider: str
    resource_type: str
    transitions: list[Transition]


class TransitionReader:
    """The read side of the transition sets. ``options``: each query page's retry and timeout (the caller's:
    an operator's read options, the api's)."""

    def __init__(self, db: firestore.Client, options: Mapping[str, Any] | None = None):
        self.db = db
        self.options = dict(options or {})

    def transitions_ref(self, doc_id: str):
        return self.db.collection(BILLING_RESOURCES).document(doc_id).collection(TRANSITIONS)

    # ---- read side -------------------------------------------------------------
    def transition_sets(self, provider: str | None = None, resource_type: str | None = None,
                        tenant: str | None = None, workers: int = 8) -> list[ResourceTransitions]:
        """Every resource with a transition matching the filters, each with its *whole* transition set.

        Without ``tenant``: one collection-group query (each transition read once). With ``tenant``: the
        resources that ever had that tenant label (a projection of the matching transitions), then each
        one's whole set, ``workers`` at a time (a matching transition is read twice).
        """
        if tenant:
            doc_ids = {snap.reference.parent.parent.id
                       for snap in pages(self._group_query(provider, resource_type, tenant).select([KEY]),
                                         options=self.options)}
            if not doc_ids:
                return []
            with ThreadPoolExecutor(max_workers=max(1, min(workers, len(doc_ids)))) as pool:
                sets = list(pool.map(lambda d: (d, self.transition_documents(d)), sorted(doc_ids)))
        else:
            grouped: dict[str, list[dict[str, Any]]] = {}
            for snap in pages(self._group_query(provider, resource_type, None), options=self.options):
                grouped.setdefault(snap.reference.parent.parent.id, []).extend(_with_sides(snap))
            sets = sorted(grouped.items())
        return [resource_transitions(doc_id, docs) for doc_id, docs in sets if docs]

    def _group_query(self, provider: str | None, resource_type: str | None, tenant: str | None) -> Any:
        query: Any = self.db.collection_group(TRANSITIONS)
        for field_path, value in ((PROVIDER, provider), (RESOURCE_TYPE, resource_type), (TENANT_LABEL, tenant)):
            if value:
                query = query.where(filter=FieldFilter(field_path, "==", value))
        return query

    def transition_documents(self, doc_id: str) -> list[dict[str, Any]]:
        """The transitions of one resource, each with its ``id``: a change's old side as one of its own
        (``implied``, id ``{changeEventId}~old``)."""
        out: list[dict[str, Any]] = []
        for snap in pages(self.transitions_ref(doc_id), options=self.options):
            out.extend(_with_sides(snap))
        return out

    def transitions(self, doc_id: str) -> list[Transition]:
        return [to_transition(d) for d in self.transition_documents(doc_id)]

    def recorded(self, after_us: int, until_us: int | None = None) -> dict[str, ResourceTransitions]:
        """The transitions recorded in ``(after_us, until_us]`` (old sides included), per resource: one query over
        (shard in every shard, recordedUs), each read once. Documents written before the field are not found."""
        grouped: dict[str, list[dict[str, Any]]] = {}
        shards = list(range(documents.TRANSITION_SHARDS))
        query: Any = (self.db.collection_group(TRANSITIONS).where(filter=FieldFilter(documents.SHARD, "in", shards))
                      .where(filter=FieldFilter(RECORDED_US, ">", after_us)))
        if until_us is not None:
            query = query.where(filter=FieldFilter(RECORDED_US, "<=", until_us))
        for snap in pages(query.order_by(RECORDED_US), options=self.options):
            grouped.setdefault(snap.reference.parent.parent.id, []).extend(_with_sides(snap))
        return {doc_id: resource_transitions(doc_id, docs) for doc_id, docs in sorted(grouped.items())}

    def since(self, doc_id: str, at_us: int) -> list[Transition]:
        """One resource's transitions whose document's time is ``at_us`` or later (old sides included): its
        subcollection's own single-field index, no hotspot (one resource's writes)."""
        out: list[dict[str, Any]] = []
        query = self.transitions_ref(doc_id).where(filter=FieldFilter(AT_US, ">=", at_us)).order_by(AT_US)
        for snap in pages(query, options=self.options):
            out.extend(_with_sides(snap))
        return [to_transition(d) for d in out]

    def stored_changes(self) -> int:
        """ChangeEventView events stored: an aggregation query."""
        return int(self.db.collection_group(TRANSITIONS).count().get(**self.options)[0][0].value)

    def earliest_at_us(self) -> int | None:
        """The earliest transition time stored (µs since the epoch), old sides included; None when empty.
        Reads every transition document (a projection): for the demo's fleet, not for a production one."""
        firsts = []
        projection = self.db.collection_group(TRANSITIONS).select([AT_US, f"{OLD_SIDE}.{AT_US}"])
        for snap in pages(projection, options=self.options):
            doc = snap.to_dict()
            firsts += [v for v in (doc.get(AT_US), (doc.get(OLD_SIDE) or {}).get(AT_US)) if v is not None]
        return min(firsts, default=None)


def pages(query: Any, size: int | None = None, options: Mapping[str, Any] | None = None) -> Iterator[Any]:
    """Every document of ``query`` (in ``__name__`` order), one page of ``size`` per RPC: a stream of the
    whole collection group in one RPC would have to finish within one read deadline."""
    size = size or PAGE
    last = None
    while True:
        page = query.limit(size) if last is None else query.start_after(last).limit(size)
        snaps = list(page.stream(**(options or {})))
        yield from snaps
        if len(snaps) < size:
            return
        last = snaps[-1]


def _with_sides(snap) -> list[dict[str, Any]]:
    return with_sides(snap.id, snap.to_dict())


def with_sides(doc_id: str, stored: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A stored transition document as the transitions it holds, each with its ``id``: itself, its old side and
    its resumed side (if any)."""
    doc = {"id": doc_id, **stored}
    sides = [(IMPLIED_SUFFIX, doc.pop(OLD_SIDE, None)), (RESUMED_SUFFIX, doc.pop(RESUMED_SIDE, None))]
    return [doc, *({"id": doc_id + suffix, **side} for suffix, side in sides if side)]


def resource_transitions(doc_id: str, docs: list[dict[str, Any]]) -> ResourceTransitions:
    """A resource's identity (from its transitions: every one carries it) and its transition set."""
    first = docs[0]
    return ResourceTransitions(doc_id, first["key"], first["provider"], first["resourceType"],
                               [to_transition(d) for d in docs])


def to_transition(doc: dict[str, Any]) -> Transition:
    """A stored transition document (with its ``id``) as an interval-arithmetic Transition."""
    return Transition(timeutil.parse(doc["at"]), doc["status"], doc.get("id") or doc["eventId"],
                      doc.get("observedAt", ""), dict(doc.get("labels") or {}), doc.get("publishedAt") or "")
