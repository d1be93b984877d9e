"""Notify's first handler: a change event (``dcm-status-changed``) fanned out into one delivery per
callback that asks for it, each published to ``dcm-status-callbacks`` (shared/notify/handler.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from dcm_status_contracts import status_changed, timeutil
from dcm_status_contracts.delivery import Delivery
from dcm_status_contracts.errors import Transient
from dcm_status_contracts.model import PubSubMessage

from shared.callbacks.store import CallbackStore
from shared.runtime.logs import get_logger
from shared.runtime.publishing import publish
from shared.runtime.settings import Settings

log = get_logger("notify")


class FanOut:
    def __init__(self, store: CallbackStore, publisher: Any, settings: Settings, clock: Callable[[], datetime]):
        self.store = store
        self.publisher = publisher
        self.settings = settings
        self.clock = clock

    def __call__(self, message: PubSubMessage) -> list[str]:
        """One delivery per callback that asks for this change; their ids. A change upsert marked as one no
        callback can match (``notify="0"``: the subscription's filter, which the emulator ignores) is acked
        without a read."""
        if not status_changed.notify_wanted(message.attributes):
            return []
        change = status_changed.from_message(message)
        if change.late:
            return []
        item = self.store.change_item(change.event_id)
        if item is None:  # the outbox publishes after the commit: not readable yet, or the ledger expired
            raise Transient(f"the ledger entry of change {change.event_id} holds no change (yet)")
        first = timeutil.format(self.clock())
        sent = []
        for cb in self.store.matching(item):
            data, attributes = Delivery(cb.id, item, first).to_message()
            publish(self.publisher, self.settings.topic_path(self.settings.topic_callbacks), data, attributes)
            sent.append(attributes["deliveryId"])
        if sent:
            log.info("change fanned out", extra={"key": item["key"], "eventId": change.event_id,
                                                 "deliveries": len(sent)})
        return sent
