"""What a provider uses to report status: build the CloudEvent, publish it.

    reporter = StatusReporter(publisher, project="my-project", provider="aws")
    reporter.report("vm", "i-0abc", "RUNNING", "VM is running.")

Structured mode (the JSON CloudEvent is the message data) by default; binary
mode (``ce-*`` attributes, data = the JSON payload) on request. No ordering
key unless the caller gives one (``publish_event(..., ordering_key=...)``):
upsert orders by event time, not by arrival.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cloudevents.http import CloudEvent
from google.cloud import pubsub_v1

from shared.contracts.status_report import BindingMode, build_event, to_message

INGRESS_TEMPLATE = "dcm-status-ingress-{provider}"


@dataclass
class StatusReporter:
    publisher: pubsub_v1.PublisherClient
    project: str
    provider: str
    topic_template: str = INGRESS_TEMPLATE

    @property
    def topic_path(self) -> str:
        return self.publisher.topic_path(self.project, self.topic_template.replace("{provider}", self.provider))

    def publish_event(self, event: CloudEvent, mode: BindingMode | str = BindingMode.STRUCTURED,
                      ordering_key: str = ""):
        data, attrs = to_message(event, mode)
        return self.publisher.publish(self.topic_path, data, ordering_key=ordering_key, **attrs)

    def report(self, resource_type: str, resource_id: str, status: str, message: str = "",
               mode: BindingMode | str = BindingMode.STRUCTURED, **fields: Any):
        """Publish one status report; returns the publish future."""
        event = build_event(self.provider, resource_type, resource_id, status, message, **fields)
        return self.publish_event(event, mode)
