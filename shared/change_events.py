"""The status-changed event: the fan-out contract, versioned.

A structured CloudEvent (``type = dcm.status.changed``, ``dataschema =
https://schemas.dcm.org/events/status-changed-v{MAJOR}.json``) whose data says
which resource changed, old -> new status with their transition times, every
attribute that changed as a JSON pointer, and a snapshot of the resource.
Message attributes repeat provider, resourceType, oldStatus and newStatus for
Pub/Sub subscription filters.

Versioning (as Nova's versioned notifications): ``data.version`` is
"MAJOR.MINOR". Adding fields bumps MINOR; removing or changing the meaning of a
field bumps MAJOR and gets a new schema file. Consumers accept any MINOR.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import orjson
from cloudevents.conversion import to_json
from cloudevents.http import CloudEvent

from shared.diff import changes
from shared.model import StatusUpdate

EVENT_TYPE = "dcm.status.changed"
EVENT_SOURCE = "dcm/status/upsert"
VERSION = "1.0"
SCHEMA_URI = "https://schemas.dcm.org/events/status-changed-v1.json"
CONTENT_TYPE = "application/cloudevents+json"
# The fields whose change a consumer cares about; bookkeeping fields are left out of diffs.
OBSERVED_FIELDS = ("status", "rawStatus", "statusRecognized", "message", "reason",
                   "lastTransitionTime", "metadata", "resourceSpecific")


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
    return {k: doc.get(k) for k in OBSERVED_FIELDS} if doc else None


def build(update: StatusUpdate, old: Mapping[str, Any] | None, new: Mapping[str, Any], late: bool) -> ChangeEvent:
    """The change event for one applied (or late) update; id derives from the causing event.

    ``old`` and ``new`` are resource documents (``new`` is announced as the snapshot).
    """
    old_status = old.get("status") if old else None
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
        "changes": changes(observed(old), observed(new)),
        "resource": dict(new),
        "cause": {"eventId": update.event_id, "source": update.event_source,
                  "observedAt": update.observed_at},
    }
    event = CloudEvent({
        "id": update.dedup_id,
        "source": EVENT_SOURCE,
        "type": EVENT_TYPE,
        "subject": str(update.key),
        "time": update.observed_at,
        "datacontenttype": "application/json",
        "dataschema": SCHEMA_URI,
    }, data)
    attributes = {
        "content-type": CONTENT_TYPE,
        "provider": update.key.provider,
        "resourceType": update.key.resource_type,
        "oldStatus": old_status or "",
        "newStatus": new["status"],
        "late": "true" if late else "false",
        "key": str(update.key)[:1000],
    }
    return ChangeEvent(update.dedup_id, to_json(event), attributes)


def parse(body: bytes) -> dict[str, Any]:
    """The JSON CloudEvent of a change event message."""
    return orjson.loads(body)
