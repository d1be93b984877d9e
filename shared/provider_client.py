"""What a provider uses to report status: build the CloudEvent, publish it.

    reporter = StatusReporter(publisher, project="my-project", provider="aws")
    reporter.report("vm", "i-0abc", "RUNNING", "VM is running.")

Structured mode (the JSON CloudEvent is the message data) by default; binary
mode (``ce-*`` attributes, data = the JSON payload) on request. Ordering key
= resource key, so one resource's reports arrive in order.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Mapping

from cloudevents.conversion import to_binary, to_json
from cloudevents.http import CloudEvent
from google.cloud import pubsub_v1

from shared import timeutil
from shared.schemas import registry

INGRESS_TEMPLATE = "dcm-status-ingress-{provider}"


def status_type(provider: str, resource_type: str, resource_id: str) -> str:
    infix = "instances." if resource_type in ("vm", "container") else ""
    return f"dcm.providers.{provider}.{resource_type}.{infix}{resource_id}.status"


def build_event(provider: str, resource_type: str, resource_id: str, status: str, message: str = "",
                *, event_id: str | None = None, time: str | None = None, reason: str | None = None,
                last_transition_time: str | None = None, metadata: Mapping[str, Any] | None = None,
                resource_specific: Mapping[str, Any] | None = None, source: str | None = None,
                dataschema: str | None = "current") -> CloudEvent:
    data: dict[str, Any] = {"status": status, "message": message}
    if reason:
        data["reason"] = reason
    if last_transition_time:
        data["lastTransitionTime"] = last_transition_time
    if metadata:
        data["metadata"] = dict(metadata)
    if resource_specific:
        data["resourceSpecific"] = dict(resource_specific)
    attributes = {
        "id": event_id or str(uuid.uuid4()),
        "source": source or f"{provider}-provider",
        "type": status_type(provider, resource_type, resource_id),
        "time": time or timeutil.now_str(),
        "datacontenttype": "application/json",
    }
    if dataschema == "current":
        current = registry().current.get(resource_type)
        if current:
            attributes["dataschema"] = current.uri
    elif dataschema:
        attributes["dataschema"] = dataschema
    return CloudEvent(attributes, data)


def to_message(event: CloudEvent, mode: str = "structured") -> tuple[bytes, dict[str, str]]:
    """The Pub/Sub message (data, attributes) for an event in the given binding mode."""
    if mode == "structured":
        return to_json(event), {"content-type": "application/cloudevents+json"}
    if mode == "binary":
        headers, body = to_binary(event)
        attrs = {k.lower(): v for k, v in headers.items()}
        attrs["content-type"] = attrs.pop("content-type", "application/json")
        return body, attrs
    raise ValueError(f"mode must be structured or binary, not {mode!r}")


@dataclass
class StatusReporter:
    publisher: pubsub_v1.PublisherClient
    project: str
    provider: str
    topic_template: str = INGRESS_TEMPLATE

    @property
    def topic_path(self) -> str:
        return self.publisher.topic_path(self.project, self.topic_template.replace("{provider}", self.provider))

    def publish_event(self, event: CloudEvent, mode: str = "structured", ordering_key: str = ""):
        data, attrs = to_message(event, mode)
        return self.publisher.publish(self.topic_path, data, ordering_key=ordering_key, **attrs)

    def report(self, resource_type: str, resource_id: str, status: str, message: str = "",
               mode: str = "structured", **fields: Any):
        """Publish one status report; returns the publish future."""
        event = build_event(self.provider, resource_type, resource_id, status, message, **fields)
        return self.publish_event(event, mode)
