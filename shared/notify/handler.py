"""The notify use case: webhook callbacks (the Deltacloud tracker's design) on top of the change
events.

Three topics reach it (the push path says which), each its own handler (``Notify`` routes by topic):

- ``dcm-status-changed``: ``FanOut`` (fan_out.py). A change upsert marked ``notify="0"`` (no enabled
  callback can match it: shared/callbacks/summary.py) is acked at once, unread; the subscription's filter
  keeps those away in production, not on the emulator. The change's ledger entry makes the change-feed item a
  receiver is sent (the same object ``GET /v1/changes`` serves, cursor included); one delivery
  per matching callback is published to ``dcm-status-callbacks``. Late changes (refused as
  stale: the resource did not change) are not sent; the feed has them.
- ``dcm-status-callbacks``, the first lane (``Deliver``, deliver.py): one attempt, then ack whatever
  happens. A receiver that fails, is already failing (consecutive failures), or is busy (this instance is calling it
  already, and it has not shown it answers fast: ``Calls``) hands the delivery to the retry lane
  instead, so it never holds up the others.
- ``dcm-status-callbacks-retry``, the retry lane (``Deliver`` too): an attempt, and on failure a raise,
  so that Pub/Sub's retry policy schedules the next one (infra/topology.yaml). A busy receiver is not
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

from datetime import datetime
from typing import Any, Callable

from dcm_status_contracts import timeutil
from dcm_status_contracts.errors import Reason, Rejected
from dcm_status_contracts.model import PubSubMessage

from shared.callbacks import egress
from shared.callbacks.store import CallbackStore
from shared.notify.deliver import Calls, Deliver, Lane, Post
from shared.notify.fan_out import FanOut
from shared.runtime import secretbox
from shared.runtime.clients import Runtime
from shared.runtime.settings import Settings


class Notify:
    """The three handlers, by the topic that reached notify: the change events' fan-out, and the two lanes of
    the deliveries (which share ``calls``: a receiver is called once at a time whichever lane calls it)."""

    def __init__(self, store: CallbackStore, publisher: Any, settings: Settings, post: Post = egress.post,
                 clock: Callable[[], datetime] = timeutil.now, keys: secretbox.KeySource | None = None):
        keys = keys or secretbox.for_settings(settings)  # opens the signing secrets
        self.calls = Calls(settings.callback_concurrency)
        self.fan_out = FanOut(store, publisher, settings, clock)
        self.first_lane, self.retry_lane = (Deliver(lane, store, publisher, settings, self.calls, keys, post, clock)
                                            for lane in (Lane.FIRST, Lane.RETRY))
        self.handlers: dict[str, Callable[[PubSubMessage], Any]] = {
            settings.topic_changed: self.fan_out, settings.topic_callbacks: self.first_lane,
            settings.topic_callbacks_retry: self.retry_lane}

    @classmethod
    def build(cls, runtime: Runtime) -> "Notify":
        return cls(CallbackStore(runtime.firestore, runtime.settings.ledger_ttl_days), runtime.publisher,
                   runtime.settings, keys=secretbox.for_settings(runtime.settings))

    def __call__(self, message: PubSubMessage) -> Any:
        handler = self.handlers.get(message.topic)
        if handler is None:
            raise Rejected(Reason.MALFORMED_INTERNAL, f"notify reads no topic {message.topic!r}",
                           {"topic": message.topic})
        return handler(message)
