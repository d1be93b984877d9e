"""The consumer side of the status-changed contract, shared by billing and audit.

``decode`` turns a Pub/Sub message from the changed topic into a ``Change``,
or raises ``Rejected``: not JSON, not a ``dcm.status.changed`` CloudEvent, an
unknown MAJOR version, or data that does not validate against
``status-changed-v1.json``. Any MINOR version of v1 is accepted (minor bumps
only add fields).

A consumer lets ``Rejected`` reach its entry point (``shared.entrypoint``),
which publishes the message, intact, to the dead-letter topic with the reason
(the same ``dcm-*`` attributes ingest uses), then acks. It lands in
``dcm-status dlq`` at once, grouped and replayable (replay re-publishes to the
changed topic; every consumer is idempotent by event id), instead of being
retried pointlessly five times first. Only Firestore and Pub/Sub failures
raise ``Transient`` so that Pub/Sub redelivers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import orjson

from shared import change_events, timeutil
from shared.errors import Reason, Rejected
from shared.logs import get_logger
from shared.model import PubSubMessage, ResourceKey
from shared.schemas import registry

SUPPORTED_MAJOR = 1
LABEL_KEYS = ("tenant", "region", "environment")

log = get_logger("consumer")


@dataclass(frozen=True)
class Change:
    """One status change as a consumer sees it."""

    event_id: str  # the CloudEvent id: dedup id of the causing provider event
    key: str
    provider: str
    resource_type: str
    resource_id: str
    old_status: str | None
    new_status: str
    at: str  # newTransitionTime, canonical
    old_at: str | None
    observed_at: str  # cause.observedAt, canonical
    late: bool
    labels: Mapping[str, str]
    version: str
    old_labels: Mapping[str, str] | None = None  # the labels of the old state (from ``changes``)

    @property
    def doc_id(self) -> str:
        return ResourceKey(self.provider, self.resource_type, self.resource_id).doc_id


def labels_of(resource: Mapping[str, Any]) -> dict[str, str]:
    """tenant / region / environment from the snapshot's metadata, when present."""
    metadata = resource.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        return {}
    return {k: str(metadata[k]) for k in LABEL_KEYS if metadata.get(k) not in (None, "")}


def old_labels_of(labels: Mapping[str, str], changes: Any) -> dict[str, str]:
    """The labels before this change: the snapshot's, with /metadata/{label} changes undone."""
    out = dict(labels)
    for c in changes if isinstance(changes, list) else []:
        attribute = c.get("attribute") if isinstance(c, Mapping) else None
        for k in LABEL_KEYS:
            if attribute == f"/metadata/{k}":
                if c.get("old") in (None, ""):
                    out.pop(k, None)
                else:
                    out[k] = str(c["old"])
    return out


def _major(version: Any) -> int | None:
    try:
        return int(str(version).split(".", 1)[0])
    except ValueError:
        return None


def decode(message: PubSubMessage) -> Change:
    try:
        event = change_events.parse(message.data)
    except orjson.JSONDecodeError as exc:
        raise Rejected(Reason.MALFORMED_JSON, f"change event is not JSON: {exc}") from exc
    if not isinstance(event, dict) or not isinstance(event.get("id"), str) or not event["id"]:
        raise Rejected(Reason.NOT_A_CLOUDEVENT, "change event is not a structured CloudEvent with an id")
    if event.get("type") != change_events.EVENT_TYPE:
        raise Rejected(Reason.NOT_A_CLOUDEVENT, f"expected type {change_events.EVENT_TYPE}, got {event.get('type')!r}",
                       {"attribute": "type", "invalid": event.get("type")})
    data = event.get("data")
    if not isinstance(data, dict):
        raise Rejected(Reason.SCHEMA_INVALID, "change event has no data object", {"path": "/data"})
    major = _major(data.get("version"))
    if major != SUPPORTED_MAJOR:
        raise Rejected(Reason.UNKNOWN_SCHEMA,
                       f"change event version {data.get('version')!r}: this consumer reads {SUPPORTED_MAJOR}.x",
                       {"schema": event.get("dataschema"), "version": data.get("version")},
                       key=data.get("key") if isinstance(data.get("key"), str) else None)
    schema = registry().get(change_events.SCHEMA_URI)
    if not schema.is_valid(data):
        found = schema.violations(data, prefix="/data")
        first = found[0] if found else None
        raise Rejected(Reason.SCHEMA_INVALID,
                       f"{first.path}: {first.message}" if first else "change event data is invalid",
                       {"schema": change_events.SCHEMA_URI,
                        **({"path": first.path, "rule": first.rule} if first else {}),
                        "violations": [v.to_dict() for v in found[:10]]},
                       key=data.get("key") if isinstance(data.get("key"), str) else None)
    try:
        at = timeutil.canonical(data["newTransitionTime"])
        old_at = timeutil.canonical(data["oldTransitionTime"]) if data["oldTransitionTime"] else None
        observed_at = timeutil.canonical(data["cause"]["observedAt"])
    except ValueError as exc:
        raise Rejected(Reason.SCHEMA_INVALID, f"change event time: {exc}", {"schema": change_events.SCHEMA_URI},
                       key=data["key"]) from exc
    return Change(
        event_id=event["id"],
        key=data["key"],
        provider=data["provider"],
        resource_type=data["resourceType"],
        resource_id=data["resourceId"],
        old_status=data["oldStatus"],
        new_status=data["newStatus"],
        at=at,
        old_at=old_at,
        observed_at=observed_at,
        late=data["late"],
        labels=labels_of(data["resource"]),
        version=data["version"],
        old_labels=old_labels_of(labels_of(data["resource"]), data["changes"]) if data["oldStatus"] else None,
    )
