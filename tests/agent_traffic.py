"""What the DCM environment-agent publishes under a provider's NATS account, on its real subjects: traffic that is
not status (issue 38 item 3), shared by the functional and e2e tiers."""

from __future__ import annotations

import uuid
from typing import Any

import orjson

AGENT = "agent-1"


def agent_traffic(provider: str) -> list[tuple[str, bytes]]:
    """What the environment-agent publishes under a provider's account, on its real subjects
    (dcm-project/environment-agent, internal/cloudevent/types.go at 46e0e11, builder.go at a1886fa,
    health/cepublisher.go and messaging/topics.go at 12f4e92): CloudEvents with source ``dcm/agents/{name}``,
    data naming ``resource_id`` (not ``id``); ``dcm.agent.{name}[.cancel]`` carry the control-plane's requests."""

    def ce(ce_type: str, data: dict[str, Any], source: str = f"dcm/agents/{AGENT}") -> bytes:
        return orjson.dumps({"specversion": "1.0", "id": str(uuid.uuid4()), "source": source, "type": ce_type,
                             "time": "2026-11-28T00:00:00Z", "datacontenttype": "application/json", "data": data})

    return [
        ("dcm.agents.responses", ce("dcm.agent.creation-acknowledged", {"resource_id": "vm-9", "status": "ACCEPTED"})),
        ("dcm.agents.health", ce("dcm.agent.health.service-type-degraded", {
            "agentId": AGENT, "agentName": AGENT, "topicName": AGENT, "serviceType": "vm",
            "reason": "service provider health check failures exceeded threshold", "affectedProvider": provider})),
        (f"dcm.agent.{AGENT}", ce("dcm.request.create", {"resource_id": "vm-9", "spec": {}}, "//dcm/control-plane")),
        (f"dcm.agent.{AGENT}.cancel", ce("dcm.request.cancel", {"resource_id": "vm-9"}, "//dcm/control-plane")),
    ]


async def listen_to_agent_subjects(platform: Any, received: list[Any]) -> None:
    """Subscribe a platform-account connection, as a core subscriber would, to every agent subject under every
    provider's prefix; what arrives is appended to ``received``."""

    async def got(msg: Any) -> None:
        received.append(msg)

    await platform.subscribe("providers.*.dcm.agents.>", cb=got)
    await platform.subscribe("providers.*.dcm.agent.>", cb=got)
    await platform.flush()
