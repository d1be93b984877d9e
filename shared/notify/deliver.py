"""Notify's two other handlers: a delivery (one change for one callback) on its first lane
(``dcm-status-callbacks``) or its retry lane (``dcm-status-callbacks-retry``), signed and POSTed to its hook
(shared/notify/handler.py says what each lane does on failure)."""

from __future__ import annotations

import enum
import threading
from datetime import datetime
from typing import Any, Callable

from dcm_status_contracts import delivery as delivery_contract
from dcm_status_contracts import timeutil
from dcm_status_contracts.delivery import Delivery
from dcm_status_contracts.errors import Reason, Rejected, Transient
from dcm_status_contracts.model import PubSubMessage

from shared.callbacks import egress, webhook
from shared.callbacks.hooks import redact_hook
from shared.callbacks.registration import Callback
from shared.callbacks.store import CallbackStore
from shared.runtime import secretbox, tracing
from shared.runtime.logs import get_logger
from shared.runtime.publishing import publish
from shared.runtime.settings import Settings

log = get_logger("notify")
Post = Callable[..., egress.HookResponse]


class Lane(enum.StrEnum):
    FIRST = "first"
    RETRY = "retry"


class DeliveryOutcome(enum.StrEnum):
    """What became of one delivery message."""

    DELIVERED = "delivered"
    HANDED_OFF = "handed_off"  # to the retry lane
    DISABLED = "disabled"  # the receiver answered 410: the callback is disabled
    ALREADY_DELIVERED = "already_delivered"  # a redelivery of one that succeeded
    DROPPED = "dropped"  # the callback was removed or disabled before this delivery


class Calls:
    """The calls this instance has under way to each receiver, and how many it
    may have: one at a time to a receiver not known to answer fast (new, or its last call failed
    or took over ``FAST_SECONDS``), up to ``limit`` at once to one that is. A receiver that hangs
    thus holds one push slot per lane at most, never a lane (the emulator pushes 2 at a time)."""

    FAST_SECONDS = 1.0

    def __init__(self, limit: int):
        self.limit = max(1, limit)
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}
        self._fast: dict[str, bool] = {}

    def admit(self, callback_id: str) -> bool:
        with self._lock:
            allowed = self.limit if self._fast.get(callback_id) else 1
            if self._open.get(callback_id, 0) >= allowed:
                return False
            self._open[callback_id] = self._open.get(callback_id, 0) + 1
            return True

    def done(self, callback_id: str, response: egress.HookResponse | None) -> None:
        with self._lock:
            self._fast[callback_id] = bool(response and response.ok and response.seconds < self.FAST_SECONDS)
            left = self._open.get(callback_id, 1) - 1
            if left:
                self._open[callback_id] = left
            else:
                self._open.pop(callback_id, None)


class Deliver:
    """One lane's handler: the delivery a message carries, tried once (``Lane`` says what a failure does)."""

    def __init__(self, lane: Lane, store: CallbackStore, publisher: Any, settings: Settings, calls: Calls,
                 keys: secretbox.KeySource, post: Post = egress.post, clock: Callable[[], datetime] = timeutil.now):
        self.lane = lane
        self.store = store
        self.publisher = publisher
        self.settings = settings
        self.calls = calls
        self.keys = keys  # opens the signing secrets
        self.post = post
        self.clock = clock

    def __call__(self, message: PubSubMessage) -> DeliveryOutcome:
        d = delivery_contract.from_message(message)
        found = self.store.get(d.callback_id, d.id)
        if found is None or found[0].disabled:
            log.warning("delivery dropped: its callback was removed or disabled", extra={
                "labels": {"callback": d.callback_id}, "deliveryId": d.id, "key": d.change["key"]})
            return DeliveryOutcome.DROPPED
        cb, stats, delivered = found
        if delivered:
            return DeliveryOutcome.ALREADY_DELIVERED
        if self.lane is Lane.FIRST and stats.get("consecutiveFailures"):
            return self._hand_off(message)
        cb = self._opened(cb, d)
        if not self.calls.admit(cb.id):  # busy: a hanging receiver holds one push slot per lane at most
            if self.lane is Lane.FIRST:
                return self._hand_off(message)
            raise Transient(f"callback {cb.id}: a call to its receiver is under way here; Pub/Sub brings this "
                            "delivery again")
        response = None
        try:
            response = self.call(cb, d)
        finally:
            self.calls.done(cb.id, response)
        self.store.record(cb.id, d.id, response, self.clock())
        return self._answered(message, cb, d, response)

    def _answered(self, message: PubSubMessage, cb: Callback, d: Delivery,
                  response: egress.HookResponse) -> DeliveryOutcome:
        """What the receiver's answer (recorded) makes of the delivery: delivered, the callback disabled (410),
        given up (its retry period over: dead-lettered), handed to the retry lane, or raised for Pub/Sub's retry."""
        labels = {"callback": cb.id, "lane": self.lane.value, "status": str(response.status)}
        if response.ok:
            log.info("callback delivered", extra={"labels": labels, "deliveryId": d.id,
                                                  "seconds": round(response.seconds, 3)})
            return DeliveryOutcome.DELIVERED
        if response.gone:
            self.store.disable(cb.id, f"the receiver answered 410 Gone at {timeutil.format(self.clock())}")
            log.warning("callback disabled: the receiver answered 410 Gone", extra={"labels": labels})
            return DeliveryOutcome.DISABLED
        started = d.period_started(message.attributes)
        if (self.clock() - started).total_seconds() >= cb.retry_seconds:
            self.store.exhausted(cb.id)
            raise Rejected(Reason.CALLBACK_EXHAUSTED,
                           f"callback {cb.id}: {redact_hook(cb.hook)} failed for {cb.retry_seconds} s since "
                           f"{timeutil.format(started)}; last: {response.error}",
                           {"callback": cb.id, "hook": redact_hook(cb.hook), "lastStatus": response.status,
                            "lastError": response.error, "since": timeutil.format(started),
                            "deliveryId": d.id}, key=d.change["key"])
        if self.lane is Lane.FIRST:
            return self._hand_off(message)
        raise Transient(f"callback {cb.id}: {response.error}; Pub/Sub retries it on its back-off")

    def call(self, cb: Callback, d: Delivery) -> egress.HookResponse:
        """One signed POST of a delivery to its hook."""
        now = self.clock()
        payload = webhook.body(d.change, cb.token)
        headers = webhook.signed_headers(cb.signing_secrets(now), d.id, now, payload)
        # a child span of the delivery's: the hook's scheme, host and port only (its path may hold a credential);
        # no trace context is sent to the receiver
        with tracing.child("webhook", {"dcm.callback": cb.id, "dcm.hook": redact_hook(cb.hook),
                                       "dcm.key": d.change["key"]}) as span:
            response = self.post(cb.hook, payload, headers, self.settings.hook_timeout_seconds,
                                 self.settings.local_mode, ports=self.settings.hook_ports)
            span.set_attributes({"http.response.status_code": response.status or 0,
                                 "dcm.outcome": response.category.value})
            return response

    def _opened(self, cb: Callback, d: Delivery) -> Callback:
        """``cb`` with its signing secrets in force opened; Rejected(callback_secret_unavailable) when none
        opens (nothing can be signed: dead-lettered, replayable once the key is back or the secret rotated)."""
        now = self.clock()
        opened, failed = cb.opened(self.keys.open, now)
        if not failed:
            return opened
        labels = {"callback": cb.id}
        if opened.signing_secrets(now):
            log.warning("a signing secret of the callback does not open; the others sign", extra={
                "labels": labels, "deliveryId": d.id, "why": list(failed)})
            return opened
        why = f"no signing secret opens: {failed[0]}"
        unsigned = egress.HookResponse(None, why, None, 0.0, egress.CallOutcome.SECRET_UNAVAILABLE)
        self.store.record(cb.id, d.id, unsigned, now)
        raise Rejected(Reason.CALLBACK_SECRET_UNAVAILABLE, f"callback {cb.id}: {why}; nothing was sent",
                       {"callback": cb.id, "deliveryId": d.id, "why": list(failed)}, key=d.change["key"])

    def _hand_off(self, message: PubSubMessage) -> DeliveryOutcome:
        publish(self.publisher, self.settings.topic_path(self.settings.topic_callbacks_retry), message.data,
                message.attributes)
        return DeliveryOutcome.HANDED_OFF
