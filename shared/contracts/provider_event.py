"""The provider-level event: a provider silent as a whole, then reporting again. Both directions.

The sweep (shared/sweep/) publishes one to ``dcm-status-providers`` at each transition, never per
resource: when none of a provider's resources has been reported within its freshness deadline, the
platform says so once (``dcm.provider.silent``), and once more when a report comes again
(``dcm.provider.reporting``). The audit consumer records them; ``GET /v1/providers`` and the
dashboard show where each provider stands.

A structured CloudEvent, ``source = dcm/platform/freshness``, ``subject`` the provider, with a
deterministic id (provider, state, since): a transition published twice (a tick redelivered, a
write of the state that failed after the publish) is one event to a consumer that deduplicates.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Mapping

import orjson
from cloudevents.http import CloudEvent

from . import timeutil
from .errors import Reason, Rejected
from .identity import PLATFORM_SOURCE
from .model import PubSubMessage
from .pubsub_binding import JSON_CONTENT_TYPE, to_structured
from .schemas import registry

EVENT_SOURCE = PLATFORM_SOURCE + "freshness"
VERSION = "1.0"
SCHEMA_URI = "https://schemas.dcm.org/events/provider-v1.json"


class ProviderState(enum.StrEnum):
    REPORTING = "REPORTING"  # at least one of its resources was reported within its deadline
    SILENT = "SILENT"  # none was: the provider as a whole has stopped reporting

    @property
    def event_type(self) -> str:
        return f"dcm.provider.{self.value.lower()}"


TYPES = {s.event_type: s for s in ProviderState}


@dataclass(frozen=True)
class ProviderTransition:
    """A provider silent as a whole, or reporting again: one per transition (not a provider's own event,
    status_report.ProviderEvent)."""

    provider: str
    state: ProviderState
    since: str  # SILENT: when its newest deadline passed; REPORTING: its newest report when the sweep saw it
    last_seen_at: str | None  # its newest report the platform knows of
    deadline_seconds: int | None  # report_every + grace of the provider (its own, else the default)

    @property
    def event_id(self) -> str:
        return f"{self.provider}/{self.state.value}/{self.since}"

    def to_dict(self) -> dict[str, Any]:
        return {"version": VERSION, "provider": self.provider, "state": self.state.value, "since": self.since,
                "lastSeenAt": self.last_seen_at, "deadlineSeconds": self.deadline_seconds}


def to_message(event: ProviderTransition) -> tuple[bytes, dict[str, str]]:
    """The message body (a JSON CloudEvent) and its attributes."""
    body, attributes = to_structured(CloudEvent({
        "id": event.event_id, "source": EVENT_SOURCE, "type": event.state.event_type,
        "subject": event.provider, "time": event.since, "datacontenttype": JSON_CONTENT_TYPE,
        "dataschema": SCHEMA_URI}, event.to_dict()))
    return body, {**attributes, "provider": event.provider, "state": event.state.value}


def from_message(message: PubSubMessage) -> ProviderTransition:
    """The provider event a message carries, or Rejected saying why it can never be read."""
    try:
        event = orjson.loads(message.data)
    except orjson.JSONDecodeError as exc:
        raise Rejected(Reason.MALFORMED_JSON, f"provider event is not JSON: {exc}") from exc
    if not isinstance(event, dict) or event.get("type") not in TYPES:
        got = event.get("type") if isinstance(event, dict) else None
        raise Rejected(Reason.NOT_A_CLOUDEVENT, f"expected type {' or '.join(TYPES)}, got {got!r}",
                       {"attribute": "type", "invalid": got})
    data = event.get("data")
    schema = registry().get(SCHEMA_URI)
    if not isinstance(data, dict) or not schema.is_valid(data):
        found = schema.violations(data, prefix="/data") if isinstance(data, dict) else []
        raise Rejected(Reason.SCHEMA_INVALID,
                       f"{found[0].path}: {found[0].message}" if found else "provider event has no data object",
                       {"schema": SCHEMA_URI, "violations": [v.to_dict() for v in found[:10]]})
    return from_dict(data)


def from_dict(data: Mapping[str, Any]) -> ProviderTransition:
    return ProviderTransition(str(data["provider"]), ProviderState(data["state"]), timeutil.canonical(data["since"]),
                         data.get("lastSeenAt"), data.get("deadlineSeconds"))
