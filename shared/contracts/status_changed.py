"""The status-changed event: the fan-out contract, versioned, both directions.

``build`` is upsert's side; ``from_message`` (-> ``ChangeEventView``) is every consumer's.

A structured CloudEvent (``type = dcm.status.changed``, ``dataschema =
https://schemas.dcm.org/events/status-changed-v{MAJOR}.json``) whose data says
which resource changed, old -> new status with their transition times, every
attribute that changed as a JSON pointer, and a snapshot of the resource.
Message attributes repeat provider, resourceType, oldStatus and newStatus for
Pub/Sub subscription filters. Upsert adds ``notify`` where it publishes: "0" when no enabled
webhook callback can match the change (the notify subscription filters those out), "1" when one
may; a message without it (an older publisher, a replay) is one notify looks at (``notify_wanted``).

Versioning (as Nova's versioned notifications): ``data.version`` is
"MAJOR.MINOR". Adding fields bumps MINOR; removing or changing the meaning of a
field bumps MAJOR and gets a new schema file. Consumers accept any MINOR.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import orjson
from cloudevents.http import CloudEvent

from . import timeutil
from .diff import changes
from .errors import InvalidRequest, Reason, Rejected
from .model import CommonStatus, PubSubMessage, ResourceKey
from .outputs import OUTPUT_FIELDS, Redaction
from .pubsub_binding import JSON_CONTENT_TYPE, to_structured
from .schemas import registry
from .status_update import StatusUpdate

EVENT_TYPE = "dcm.status.changed"
EVENT_SOURCE = "dcm/status/upsert"
# 1.1: cause.publishedAt and cause.sequence added; 1.2: recreated, flapping; 1.3: output_spec and outputs (in
# resource and changes, hidden values as "[redacted]"), and a change of them alone is announced (old and new
# status and transition time then equal: ``ChangeEventView.transition`` is False)
VERSION = "1.3"
SUPPORTED_MAJOR = 1
LABEL_KEYS = ("tenant", "region", "environment")
SCHEMA_URI = "https://schemas.dcm.org/events/status-changed-v1.json"
# The fields whose change a consumer cares about; bookkeeping fields are left out of diffs.
OBSERVED_FIELDS = ("status", "rawStatus", "statusRecognized", "message", "reason",
                   "lastTransitionTime", "metadata", "resourceSpecific", *OUTPUT_FIELDS)


@dataclass(frozen=True)
class ChangeEvent:
    """A ready-to-publish change event: the JSON CloudEvent and its message attributes."""

    event_id: str
    body: bytes
    attributes: Mapping[str, str]

    def to_record(self) -> dict[str, Any]:
        return {"id": self.event_id, "body": self.body.decode(), "attributes": dict(self.attributes)}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "ChangeEvent":
        return cls(record["id"], record["body"].encode(), dict(record["attributes"]))


def observed(doc: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The fields of a resource document whose change is announced (an output map only once there is one)."""
    return {k: doc.get(k) for k in OBSERVED_FIELDS if k in doc or k not in OUTPUT_FIELDS} if doc else None


def build(update: StatusUpdate, old: Mapping[str, Any] | None, new: Mapping[str, Any], late: bool,
          redaction: Redaction = Redaction()) -> ChangeEvent:
    """The change event for one applied (or late) update; id derives from the causing event.

    ``old`` and ``new`` are resource documents (``new`` is announced as the snapshot). ``redaction``: the
    output values every consumer of the event sees as ``[redacted]`` (a change of one is still announced).
    """
    old_status = old.get("status") if old else None
    recreated = old_status == CommonStatus.DELETED and new["status"] != CommonStatus.DELETED and not late
    flapping = new.get("flapping") if not late else None
    data = {
        "version": VERSION,
        "key": str(update.key),
        "provider": update.key.provider,
        "resourceType": update.key.resource_type,
        "resourceId": update.key.resource_id,
        "oldStatus": old_status,
        "newStatus": new["status"],
        "oldTransitionTime": old.get("lastTransitionTime") if old else None,
        "newTransitionTime": new["lastTransitionTime"],
        "late": late,
        "recreated": recreated,  # a resource that was DELETED exists again (a newer report than the deletion)
        "flapping": flapping,  # {changes, windowSeconds} when it changes too often (FlapPolicy), else null
        "changes": redaction.changes(changes(observed(old), observed(new))),
        "resource": redaction.resource(new),
        "cause": {"eventId": update.event_id, "source": update.event_source,
                  "observedAt": update.observed_at, "publishedAt": update.published_at,
                  "sequence": update.sequence},
    }
    body, binding = to_structured(CloudEvent({
        "id": update.dedup_id,
        "source": EVENT_SOURCE,
        "type": EVENT_TYPE,
        "subject": str(update.key),
        "time": update.observed_at,
        "datacontenttype": JSON_CONTENT_TYPE,
        "dataschema": SCHEMA_URI,
    }, data))
    attributes = {
        **binding,
        "provider": update.key.provider,
        "resourceType": update.key.resource_type,
        "oldStatus": old_status or "",
        "newStatus": new["status"],
        "late": "true" if late else "false",
        "recreated": "true" if recreated else "false",
        "flapping": "true" if flapping else "false",
        "key": str(update.key),  # clipped to Pub/Sub's 1,024 bytes where it is published
    }
    return ChangeEvent(update.dedup_id, body, attributes)


# The attribute upsert sets on each change event it publishes: may a webhook callback want it? Set at
# publication (not stored with the change event: a re-publication decides again). infra/topology.yaml's
# dcm-notify filter, 'NOT attributes.notify = "0"', lets a message without it through.
NOTIFY_ATTRIBUTE = "notify"
NOTIFY_YES, NOTIFY_NO = "1", "0"


def notify_wanted(attributes: Mapping[str, str]) -> bool:
    """Whether notify must look at a change event: anything but an explicit "0" (absent: maybe)."""
    return attributes.get(NOTIFY_ATTRIBUTE) != NOTIFY_NO


# ---- the consumer's side ---------------------------------------------------------------
@dataclass(frozen=True)
class ChangeEventView:
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
    published_at: str = ""  # cause.publishedAt (since 1.1): orders changes stamped at the same instant
    reason: str | None = None  # the resource's reason (NotReported, NotInSnapshot: states the platform set)
    old_reason: str | None = None  # the old state's reason (from ``changes``; ``reason`` when it did not change)
    recreated: bool = False  # since 1.2: DELETED before, exists again
    flapping: Mapping[str, int] | None = None  # since 1.2: {changes, windowSeconds} when flapping

    @property
    def transition(self) -> bool:
        """A status transition (not only new output maps, since 1.3: same status at the same time)."""
        return self.late or self.old_status != self.new_status or self.old_at != self.at

    @property
    def doc_id(self) -> str:
        return ResourceKey(self.provider, self.resource_type, self.resource_id).doc_id


def labels_of(resource: Mapping[str, Any]) -> dict[str, str]:
    """tenant / region / environment from the snapshot's metadata, when present."""
    metadata = resource.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        return {}
    return {k: str(metadata[k]) for k in LABEL_KEYS if metadata.get(k) not in (None, "")}


def parse_label(text: str, parameter: str = "label") -> tuple[str, str]:
    """``tenant:acme`` -> ("tenant", "acme"), or InvalidRequest naming the labels there are."""
    name, sep, value = text.partition(":")
    if not sep or not value or name not in LABEL_KEYS:
        raise InvalidRequest(f"{parameter}: expected LABEL:VALUE with LABEL one of {', '.join(LABEL_KEYS)}, "
                             f"got {text[:100]!r}", parameter)
    return name, value


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


def _check_data(event: Mapping[str, Any], data: Mapping[str, Any]) -> None:
    """Rejected unless ``data`` is of the supported MAJOR version and valid against its schema."""
    major = _major(data.get("version"))
    if major != SUPPORTED_MAJOR:
        raise Rejected(Reason.UNKNOWN_SCHEMA,
                       f"change event version {data.get('version')!r}: this consumer reads {SUPPORTED_MAJOR}.x",
                       {"schema": event.get("dataschema"), "version": data.get("version")},
                       key=data.get("key") if isinstance(data.get("key"), str) else None)
    schema = registry().get(SCHEMA_URI)
    if not schema.is_valid(data):
        found = schema.violations(data, prefix="/data")
        first = found[0] if found else None
        raise Rejected(Reason.SCHEMA_INVALID,
                       f"{first.path}: {first.message}" if first else "change event data is invalid",
                       {"schema": SCHEMA_URI,
                        **({"path": first.path, "rule": first.rule} if first else {}),
                        "violations": [v.to_dict() for v in found[:10]]},
                       key=data.get("key") if isinstance(data.get("key"), str) else None)


def from_message(message: PubSubMessage) -> ChangeEventView:
    """The change a message of the changed topic carries, or Rejected saying why it can never be read.

    Any MINOR version of the supported MAJOR is accepted (minor bumps only add fields).
    """
    try:
        event = orjson.loads(message.data)
    except orjson.JSONDecodeError as exc:
        raise Rejected(Reason.MALFORMED_JSON, f"change event is not JSON: {exc}") from exc
    if not isinstance(event, dict) or not isinstance(event.get("id"), str) or not event["id"]:
        raise Rejected(Reason.NOT_A_CLOUDEVENT, "change event is not a structured CloudEvent with an id")
    if event.get("type") != EVENT_TYPE:
        raise Rejected(Reason.NOT_A_CLOUDEVENT, f"expected type {EVENT_TYPE}, got {event.get('type')!r}",
                       {"attribute": "type", "invalid": event.get("type")})
    data = event.get("data")
    if not isinstance(data, dict):
        raise Rejected(Reason.SCHEMA_INVALID, "change event has no data object", {"path": "/data"})
    _check_data(event, data)
    return _view(event["id"], data)


def _old_reason(data: Mapping[str, Any]) -> str | None:
    """The old state's reason: the snapshot's, with a /reason change undone (None for a first sight)."""
    if not data["oldStatus"]:
        return None
    for c in data["changes"] if isinstance(data["changes"], list) else []:
        if isinstance(c, Mapping) and c.get("attribute") == "/reason":
            return c["old"] if isinstance(c.get("old"), str) else None
    reason = data["resource"].get("reason")
    return reason if isinstance(reason, str) else None


def from_change(change: ChangeEvent) -> ChangeEventView:
    """The view every consumer reads from ``change`` (``from_message`` of its message): for the producer, which
    built it valid (no schema check; a time it could not parse is Rejected, as in ``from_message``)."""
    return _view(change.event_id, orjson.loads(change.body)["data"])


def _view(event_id: str, data: Mapping[str, Any]) -> ChangeEventView:
    """The view of a change event's valid ``data``: its times canonical, labels read from its snapshot."""
    try:
        at = timeutil.canonical(data["newTransitionTime"])
        old_at = timeutil.canonical(data["oldTransitionTime"]) if data["oldTransitionTime"] else None
        observed_at = timeutil.canonical(data["cause"]["observedAt"])
    except ValueError as exc:
        raise Rejected(Reason.SCHEMA_INVALID, f"change event time: {exc}", {"schema": SCHEMA_URI},
                       key=data["key"]) from exc
    return ChangeEventView(
        event_id=event_id,
        key=data["key"],
        provider=data["provider"],
        resource_type=data["resourceType"],
        resource_id=data["resourceId"],
        old_status=data["oldStatus"],
        new_status=data["newStatus"],
        at=at,
        old_at=old_at,
        observed_at=observed_at,
        published_at=data["cause"].get("publishedAt") or "",
        late=data["late"],
        labels=labels_of(data["resource"]),
        version=data["version"],
        old_labels=old_labels_of(labels_of(data["resource"]), data["changes"]) if data["oldStatus"] else None,
        reason=data["resource"].get("reason") if isinstance(data["resource"].get("reason"), str) else None,
        old_reason=_old_reason(data),
        recreated=data.get("recreated") is True,
        flapping=data.get("flapping") if isinstance(data.get("flapping"), dict) else None,
    )
