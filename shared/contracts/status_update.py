"""The normalised status update: ingest -> upsert on ``dcm-status-normalized``.

An internal contract, versioned and schema-checked like the public ones
(``schemas/internal/status-update-v1.json``): ``to_bytes`` is ingest's side,
``from_bytes`` upsert's. A message that breaks the contract is ``malformed_internal``;
one of another major version is ``unknown_schema`` (ingest and upsert deployed
at different versions: replay it once upsert reads that version).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

import orjson

from . import limits
from .errors import Reason, Rejected
from .model import ResourceKey, event_identity, legacy_event_identity
from .outputs import OUTPUT_FIELDS
from .schemas import SCHEMA_URI_PREFIX, registry

VERSION = 1
STORED_MAPS = ("metadata", "resource_specific", "extra", *OUTPUT_FIELDS)  # provider data upsert stores as maps
SCHEMA_URI = SCHEMA_URI_PREFIX + "internal/status-update-v1.json"


@dataclass(frozen=True)
class StatusUpdate:
    """A validated, normalised status report: what ingest hands to upsert."""

    key: ResourceKey
    status: str
    raw_status: str
    status_recognized: bool
    message: str
    reason: str | None
    last_transition_time: str
    observed_at: str
    metadata: Mapping[str, Any]
    resource_specific: Mapping[str, Any]
    event_id: str
    event_source: str
    event_type: str
    event_subject: str | None
    dataschema: str
    schema_defaulted: bool
    ingress_message_id: str
    ingress_topic: str | None
    received_at: str
    replay_of: str | None = None
    transition_reported: bool = False  # the provider sent lastTransitionTime (else it is the event time)
    sequence: str | None = None  # CloudEvents sequence extension, lexicographically comparable (per source)
    published_at: str | None = None  # when the provider's message was published on its ingress topic
    reported_time: str | None = None  # the event time as sent, when it was ahead of the clock and clamped
    extra: Mapping[str, Any] = field(default_factory=dict)  # data fields beyond the common ones, kept
    part: str | None = None  # which resource of a several-resource event (a Cloud Native Events address)
    metrics_only: bool = False  # only metrics: the stored status stays as it is
    resync: Mapping[str, Any] | None = None  # the resync marker (shared/contracts/resync.py), as a dict
    output_spec: Mapping[str, Any] | None = None  # what the resource offers others (shared/contracts/outputs.py);
    outputs: Mapping[str, Any] | None = None  # ... None: the event did not carry it, the stored one is kept

    @property
    def dedup_id(self) -> str:
        """Provider (the ingress topic's), source and id (and part): a redelivered event is one update, each
        resource of one event its own, and two providers' events are never one another's duplicate."""
        return event_identity(self.key.provider, self.event_source, self._event_ref)

    @property
    def legacy_dedup_id(self) -> str:
        """The ledger id an earlier version wrote for this event (source and id only): read, never written."""
        return legacy_event_identity(self.event_source, self._event_ref)

    @property
    def _event_ref(self) -> str:
        return self.event_id if self.part is None else f"{self.event_id}#{self.part}"



_FIELDS = tuple(f.name for f in fields(StatusUpdate))


def to_document(update: StatusUpdate) -> dict[str, Any]:
    """The update as the message's JSON object. Its fields as they are (``dataclasses.asdict`` deep-copied
    every map, a quarter of ingest's own CPU per event for a copy ``to_bytes`` drops at once: issue 32); the
    only nested dataclass, the key, is spelled out."""
    doc = {name: getattr(update, name) for name in _FIELDS}
    doc.update(version=VERSION, key=str(update.key), provider=update.key.provider,
               resource_type=update.key.resource_type, resource_id=update.key.resource_id)
    return doc


def to_bytes(update: StatusUpdate) -> bytes:
    return orjson.dumps(to_document(update))


def from_bytes(data: bytes) -> StatusUpdate:
    """The update a normalised message carries, or Rejected (malformed_internal / unknown_schema)."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise Rejected(Reason.MALFORMED_INTERNAL, f"normalised status message is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise Rejected(Reason.MALFORMED_INTERNAL, "normalised status message is not a JSON object")
    breach = limits.too_deep(doc, limits.MAX_EVENT_DEPTH)
    if breach:
        raise Rejected(Reason.MALFORMED_INTERNAL, f"normalised status message: {breach.path}: {breach.message}",
                       {"path": breach.path, "rule": breach.rule})
    key = doc.get("key") if isinstance(doc.get("key"), str) else None
    version = doc.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version != VERSION:
        raise Rejected(Reason.UNKNOWN_SCHEMA,
                       f"normalised status message version {version!r}: this upsert reads {VERSION}",
                       {"schema": SCHEMA_URI, "version": version}, key=key)
    schema = registry().get(SCHEMA_URI)
    if not schema.is_valid(doc):
        found = schema.violations(doc)
        first = found[0]
        raise Rejected(Reason.MALFORMED_INTERNAL, f"normalised status message: {first.path}: {first.message}",
                       {"schema": SCHEMA_URI, "path": first.path, "rule": first.rule,
                        "violations": [v.to_dict() for v in found[:10]]}, key=key)
    breach = limits.storable({k: doc.get(k) or {} for k in STORED_MAPS})
    if breach:  # what ingest checks; a message that did not come through ingest is checked here too
        raise Rejected(Reason.MALFORMED_INTERNAL, f"normalised status message: {breach.path}: {breach.message}",
                       {"schema": SCHEMA_URI, "path": breach.path, "rule": breach.rule}, key=key)
    fields = {k: doc[k] for k in StatusUpdate.__dataclass_fields__ if k != "key" and k in doc}
    return StatusUpdate(key=ResourceKey(doc["provider"], doc["resource_type"], doc["resource_id"]), **fields)
