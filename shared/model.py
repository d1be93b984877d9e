"""The data the functions pass between them, as frozen dataclasses."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping
from urllib.parse import quote, unquote

from shared.errors import Reason, Rejected

RESOURCE_KEY_SEPARATOR = "/"


@dataclass(frozen=True, order=True)
class ResourceKey:
    """provider/resourceType/resourceId: one observed resource."""

    provider: str
    resource_type: str
    resource_id: str

    def __str__(self) -> str:
        return f"{self.provider}/{self.resource_type}/{self.resource_id}"

    @property
    def doc_id(self) -> str:
        """A Firestore document id (no '/', never '.' or '__x__')."""
        return f"{self.provider}~{self.resource_type}~{quote(self.resource_id, safe='')}"

    @classmethod
    def parse(cls, text: str) -> "ResourceKey":
        parts = text.split(RESOURCE_KEY_SEPARATOR, 2)
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"expected PROVIDER/TYPE/ID, got {text!r}")
        return cls(*parts)

    @classmethod
    def from_doc_id(cls, doc_id: str) -> "ResourceKey":
        provider, resource_type, rid = doc_id.split("~", 2)
        return cls(provider, resource_type, unquote(rid))


def event_identity(source: str, event_id: str) -> str:
    """The deduplication key of a CloudEvent: its source and id, hashed (length-prefixed: unambiguous)."""
    return hashlib.sha256(f"{len(source)}:{source}{event_id}".encode()).hexdigest()


@dataclass(frozen=True)
class PubSubMessage:
    """One Pub/Sub message as a push subscription delivered it."""

    data: bytes
    attributes: Mapping[str, str]
    message_id: str
    publish_time: str | None = None
    topic: str | None = None  # short topic name, from the push endpoint path

    @property
    def size(self) -> int:
        return len(self.data) + sum(len(k) + len(v) for k, v in self.attributes.items())


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
    version: int = field(default=1)

    @property
    def dedup_id(self) -> str:
        return event_identity(self.event_source, self.event_id)

    @property
    def order(self) -> tuple[str, str, str]:
        """Total order of updates to one resource: event time, then identity as tie-break."""
        return (self.observed_at, self.event_source, self.event_id)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["key"] = str(self.key)
        d["provider"], d["resource_type"], d["resource_id"] = (
            self.key.provider, self.key.resource_type, self.key.resource_id)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "StatusUpdate":
        try:
            fields = {k: d[k] for k in cls.__dataclass_fields__ if k != "key" and k in d}
            key = ResourceKey(d["provider"], d["resource_type"], d["resource_id"])
            return cls(key=key, **fields)
        except (KeyError, TypeError) as exc:
            raise Rejected(Reason.UNKNOWN, f"normalised status message is malformed: {exc}") from exc
