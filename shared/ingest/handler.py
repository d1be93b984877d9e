"""The ingest use case: validate and normalise, then forward to upsert.

A Rejected raised here reaches the entry point, which dead-letters the
original message with the reason and acks it (``shared.runtime.entrypoint``).
"""

from __future__ import annotations

from dcm_status_contracts import status_update
from dcm_status_contracts.ingress import Arrival
from dcm_status_contracts.model import PubSubMessage

from shared.ingest.admit import admit
from shared.ingest.normalize import normalize
from shared.runtime.clients import Runtime
from shared.runtime.logs import get_logger
from shared.runtime.publishing import publish
from shared.runtime.settings import Settings

log = get_logger("ingest")


class Ingest:
    def __init__(self, settings: Settings, publisher):
        self.settings = settings
        self.publisher = publisher
        self.origins = settings.origins

    @classmethod
    def build(cls, runtime: Runtime) -> "Ingest":
        return cls(runtime.settings, runtime.publisher)

    def __call__(self, message: PubSubMessage, arrival: Arrival | None = None) -> None:
        """Forward every update the message reports (a Cloud Native Events event may report several): a
        failed publish raises, Pub/Sub redelivers, and upsert drops the updates it already has. Only the
        attributes the message's origin vouches for are read (``admit``). ``arrival``: what its topic
        proves, as the entry point asked it (asked here when not given)."""
        admitted, arrival = admit(message, arrival or self.origins.arrival(message.topic), self.origins)
        for update in normalize(admitted, self.settings, arrival):
            key = str(update.key)
            publish(self.publisher, self.settings.lane_path(update.key.provider),
                    status_update.to_bytes(update),
                    {"key": key, "provider": update.key.provider, "resourceType": update.key.resource_type,
                     "status": update.status},
                    ordering_key=key)
            log.info("event accepted", extra={
                "labels": {"provider": update.key.provider, "resourceType": update.key.resource_type},
                "key": key, "status": update.status, "eventId": update.event_id})
