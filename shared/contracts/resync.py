"""The resync marker: a provider's whole inventory sent as one batch, both directions.

Every event of a batch carries five CloudEvents extension attributes:

- ``resyncid``: the batch, unique per resync;
- ``resynctotal``: how many resources the batch has;
- ``resyncindex``: this event's place in it, 0 .. total-1;
- ``resyncat``: when the provider began taking the snapshot (RFC 3339): a resource reported after
  that may rightly be missing from it;
- ``resyncscope``: the resource types the snapshot covers, comma-separated: a resource of another
  type is never judged by it.

The platform records, per resource, the last batch that listed it (upsert), and, from the event
with index 0, the batch itself (``resyncs/{provider~id}``). ``not_in_snapshot`` is the decision the
sweep makes once a batch is complete: only then, and only for resources in scope, not listed,
last reported before ``resyncat`` and not already DELETED. A partial, reordered or duplicated
batch cannot delete anything: completeness is the count of distinct resources marked with the
batch, never the count of events received.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from . import timeutil
from .errors import Reason, Rejected
from .model import CommonStatus

ID, TOTAL, INDEX, AT, SCOPE = "resyncid", "resynctotal", "resyncindex", "resyncat", "resyncscope"
ATTRIBUTES = (ID, TOTAL, INDEX, AT, SCOPE)
MAX_TOTAL = 1_000_000


@dataclass(frozen=True)
class ResyncMark:
    batch: str
    total: int
    index: int
    at: str  # canonical RFC 3339
    scope: tuple[str, ...]

    def attributes(self) -> dict[str, Any]:
        return {ID: self.batch, TOTAL: self.total, INDEX: self.index, AT: self.at, SCOPE: ",".join(self.scope)}

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.batch, "total": self.total, "index": self.index, "at": self.at, "scope": list(self.scope)}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> "ResyncMark":
        return cls(doc["id"], doc["total"], doc["index"], doc["at"], tuple(doc["scope"]))

    @classmethod
    def of(cls, attributes: Mapping[str, Any]) -> "ResyncMark | None":
        """The mark an event carries; None without one; Rejected for a partial or malformed one (a mark
        that could be misread must not be able to delete anything)."""
        present = [a for a in ATTRIBUTES if a in attributes]
        if not present:
            return None
        missing = [a for a in ATTRIBUTES if a not in attributes]
        invalid: list[str] = []

        def integer(name: str, low: int, high: int) -> int:
            try:
                value = int(str(attributes[name]))
            except (KeyError, ValueError):
                value = -1
            if not low <= value <= high:
                invalid.append(name)
            return value

        total = integer(TOTAL, 1, MAX_TOTAL) if TOTAL in attributes else 0
        index = integer(INDEX, 0, max(total - 1, 0)) if INDEX in attributes else 0
        at = ""
        if AT in attributes:
            try:
                at = timeutil.canonical(str(attributes[AT]))
            except ValueError:
                invalid.append(AT)
        scope = tuple(sorted(s for s in str(attributes.get(SCOPE, "")).split(",") if s))
        if SCOPE in attributes and not scope:
            invalid.append(SCOPE)
        if ID in attributes and not str(attributes[ID]):
            invalid.append(ID)
        if missing or invalid:
            raise Rejected(Reason.NOT_A_CLOUDEVENT, "resync marker: " + "; ".join(
                [f"missing {', '.join(missing)}"] * bool(missing) + [f"invalid {', '.join(invalid)}"] * bool(invalid)),
                {"missing": missing, "invalid": invalid})
        return cls(str(attributes[ID]), total, index, at, scope)


def not_in_snapshot(batch: ResyncMark, held: Iterable[Mapping[str, Any]]) -> list[str]:
    """The keys of the resources a complete batch shows the provider no longer has: in its scope, not
    listed by it, last reported before the snapshot began, not DELETED already. ``held``: the
    provider's stored resource documents."""
    gone = []
    for doc in held:
        if doc.get("resourceType") not in batch.scope or doc.get("status") == CommonStatus.DELETED:
            continue
        if (doc.get("resync") or {}).get("id") == batch.batch:
            continue  # listed
        if (doc.get("observedAt") or "") >= batch.at:
            continue  # reported after the snapshot began: it may be newer than the snapshot
        gone.append(doc["key"])
    return gone
