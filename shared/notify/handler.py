"""The notify use case: webhook callbacks (the Deltacloud tracker's design) on top of the change
events.

Three topics reach it (the push path says which):

- ``dcm-status-changed``: fan out. A change upsert marked ``notify="0"`` (no enabled callback can
  match it: shared/state/callback_summary.py) is acked at once, unread; the subscription's filter
  keeps those away in production, not on the emulator. The change's ledger entry makes the change-feed item a
  receiver is sent (the same object ``GET /v1/changes`` serves, cursor included); one delivery
  per matching callback is published to ``dcm-status-callbacks``. Late changes (refused as
  stale: the resource did not change) are not sent; the feed has them.
- ``dcm-status-callbacks``, the first lane: one attempt, then ack whatever happens. A receiver
  that fails, is already failing (consecutive failures), or is busy (this instance is calling it
  already, and it has not shown it answers fast: ``Calls``) hands the delivery to the retry lane
  instead, so it never holds up the others.
- ``dcm-status-callbacks-retry``, the retry lane: an attempt, and on failure a raise, so that
  Pub/Sub's retry policy schedules the next one (infra/topology.yaml). A busy receiver is not
  called twice at once here either: the delivery is raised back without a call.

Any 2xx delivers (recorded, so a redelivered message is not sent again). 410 Gone disables the
callback. A failure once the callback's retry period is over (3 days by default, from the first
attempt or from a replay) is ``Rejected(callback_exhausted)``: the entry point dead-letters it,
with the callback, the hook (scheme, host and port only: its path and query often carry a
credential) and the last status and error, and ``dcm-status dlq replay`` sends it again. Every
attempt updates the callback's stats.

The signing secrets are stored sealed (shared/runtime/secretbox.py); notify opens those in force
for each call. One that does not open (sealed with a key dropped from the ring, or altered) is
skipped with a warning while another signs; when none opens, nothing is sent and the delivery is
``Rejected(callback_secret_unavailable)``: dead-lettered (replay it once the key is back or the
secret rotated), never retried in a loop and never a crash.
"""

from __future__ import annotations

import enum
import threading
from datetime import datetime
from typing import Any, Callable

from dcm_status_contracts import callback, status_changed, timeutil
from dcm_status_contracts import delivery as delivery_contract
from dcm_status_contracts.callback import Callback, Outcome, redact_hook
from dcm_status_contracts.delivery import Delivery
from dcm_status_contracts.errors import Reason, Rejected, Transient
from dcm_status_contracts.model import PubSubMessage

from shared.notify.store import CallbackStore
from shared.runtime import egress, secretbox, tracing
from shared.runtime.clients import Runtime
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


class Notify:
    def __init__(self, store: CallbackStore, publisher: Any, settings: Settings, post: Post = egress.post,
                 clock: Callable[[], datetime] = timeutil.now, keys: secretbox.KeySource | None = None):
        self.store = store
        self.keys = keys or secretbox.for_settings(settings)  # opens the signing secrets
        self.publisher = publisher
        self.settings = settings
        self.post = post
        self.clock = clock
        self.calls = Calls(settings.callback_concurrency)

    @classmethod
    def build(cls, runtime: Runtime) -> "Notify":
        return cls(CallbackStore(runtime.firestore, runtime.settings.ledger_ttl_days), runtime.publisher,
                   runtime.settings, keys=secretbox.for_settings(runtime.settings))

    def __call__(self, message: PubSubMessage) -> Any:
        s = self.settings
        if message.topic == s.topic_changed:
            return self.fan_out(message)
        if message.topic == s.topic_callbacks:
            return self.deliver(message, Lane.FIRST)
        if message.topic == s.topic_callbacks_retry:
            return self.deliver(message, Lane.RETRY)
        raise Rejected(Reason.MALFORMED_INTERNAL, f"notify reads no topic {message.topic!r}",
                       {"topic": message.topic})

    # ---- fan out ------------------------------------------------------------------------------
    def fan_out(self, message: PubSubMessage) -> list[str]:
        """One delivery per callback that asks for this change; their ids. A change upsert marked as one no
        callback can match (``notify="0"``: the subscription's filter, which the emulator ignores) is acked
        without a read."""
        if not status_changed.notify_wanted(message.attributes):
            return []
        change = status_changed.decode(message)
        if change.late:
            return []
        item = self.store.change_item(change.event_id)
        if item is None:  # the outbox publishes after the commit: not readable yet, or the ledger expired
            raise Transient(f"the ledger entry of change {change.event_id} holds no change (yet)")
        first = timeutil.format(self.clock())
        sent = []
        for cb in self.store.matching(item):
            data, attributes = Delivery(cb.id, item, first).encode()
            publish(self.publisher, self.settings.topic_path(self.settings.topic_callbacks), data, attributes)
            sent.append(attributes["deliveryId"])
        if sent:
            log.info("change fanned out", extra={"key": item["key"], "eventId": change.event_id,
                                                 "deliveries": len(sent)})
        return sent

    # ---- deliver ------------------------------------------------------------------------------
    def deliver(self, message: PubSubMessage, lane: Lane) -> DeliveryOutcome:
        d = delivery_contract.decode(message)
        found = self.store.get(d.callback_id, d.id)
        if found is None or found[0].disabled:
            log.warning("delivery dropped: its callback was removed or disabled", extra={
                "labels": {"callback": d.callback_id}, "deliveryId": d.id, "key": d.change["key"]})
            return DeliveryOutcome.DROPPED
        cb, stats, delivered = found
        if delivered:
            return DeliveryOutcome.ALREADY_DELIVERED
        if lane is Lane.FIRST and stats.get("consecutiveFailures"):
            return self._hand_off(message)
        cb = self._opened(cb, d)
        if not self.calls.admit(cb.id):  # busy: a hanging receiver holds one push slot per lane at most
            if lane is Lane.FIRST:
                return self._hand_off(message)
            raise Transient(f"callback {cb.id}: a call to its receiver is under way here; Pub/Sub brings this "
                            "delivery again")
        response = None
        try:
            response = self.call(cb, d)
        finally:
            self.calls.done(cb.id, response)
        self.store.record(cb.id, d.id, response, self.clock())
        labels = {"callback": cb.id, "lane": lane.value, "status": str(response.status)}
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
        if lane is Lane.FIRST:
            return self._hand_off(message)
        raise Transient(f"callback {cb.id}: {response.error}; Pub/Sub retries it on its back-off")

    def call(self, cb: Callback, d: Delivery) -> egress.HookResponse:
        """One signed POST of a delivery to its hook."""
        now = self.clock()
        payload = callback.body(d.change, cb.token)
        headers = callback.signed_headers(cb.signing_secrets(now), d.id, now, payload)
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
        self.store.record(cb.id, d.id, egress.HookResponse(None, why, None, 0.0, Outcome.SECRET_UNAVAILABLE), now)
        raise Rejected(Reason.CALLBACK_SECRET_UNAVAILABLE, f"callback {cb.id}: {why}; nothing was sent",
                       {"callback": cb.id, "deliveryId": d.id, "why": list(failed)}, key=d.change["key"])

    def _hand_off(self, message: PubSubMessage) -> DeliveryOutcome:
        publish(self.publisher, self.settings.topic_path(self.settings.topic_callbacks_retry), message.data,
                message.attributes)
        return DeliveryOutcome.HANDED_OFF
