"""Forward one fetched batch: nothing lost, nothing doubled, nothing retried forever.

The ack contract of the NATS ingress (the JetStream consumer's explicit acks):

- forwarded: acked only once Pub/Sub has confirmed the publish (its message id is back);
- the publish failed: nak'ed with a back-off delay (``backoff``), JetStream delivers it again; once it
  has been delivered ``max_deliver`` times and a last attempt fails too, it is dead-lettered
  (``delivery_exhausted``) and acked. (The consumer itself redelivers without limit: JetStream would stop
  delivering a message past its own max_deliver without anyone seeing it. A Pub/Sub outage fails the
  dead-letter publish as well, so the message is nak'ed again and forwarded once Pub/Sub is back.)
- cannot go anywhere as it is (not a CloudEvent, a subject naming no provider of ours, a header Pub/Sub
  cannot carry as an attribute, too many headers): dead-lettered with its reason, then acked;
- the publish refused for good (``permanent``: InvalidArgument and the like, which no retry fixes):
  dead-lettered at once as ``pubsub_refused``, then acked; never nak'ed for ever;
- a dead-letter publish that fails: nak'ed like a failed forward, never acked unpublished. Refused for good:
  published again with the platform's attributes alone (the originals counted as left out); refused even
  then, acked and logged as an error: the stream keeps it (limits retention, ``max_age``) for a replay.

Each delivery is one span (``nats_ingress``) continuing the trace context of the provider's NATS headers
(``traceparent``, ``tracestate``; malformed or absent: a new trace); what it publishes carries the span's
context, so ingest's span is its child (docs/tracing.md).
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from dcm_status_contracts import deadletter as dl
from dcm_status_contracts import ingress, timeutil, trace_context
from dcm_status_contracts.errors import Reason, Rejected
from dcm_status_contracts.model import clip
from google.api_core import exceptions as gexc
from google.api_core import retry as retries

from shared.nats_ingress.health import IngressHealth
from shared.nats_ingress.route import SERVICE_NAME, Inbound, Outbound, as_pubsub, known_provider, route
from shared.runtime import tracing
from shared.runtime.logs import get_logger
from shared.runtime.nats_settings import NatsSettings
from shared.runtime.settings import Settings

log = get_logger("nats_ingress")
FIRST_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS = 1.0, 10.0


class ForwardOutcome(enum.StrEnum):
    FORWARDED = "forwarded"  # on the provider's ingress topic, acked
    DEAD_LETTERED = "dead_lettered"  # on the dead-letter topic with its reason, acked
    RETRYING = "retrying"  # nak'ed with a delay: JetStream delivers it again
    ABANDONED = "abandoned"  # even its stripped dead letter refused for good: acked, logged, kept in the stream


# Pub/Sub's answers no retry changes (the request itself is wrong), and a client that refuses the request before
# sending it. Everything else (unavailable, deadline, permission, a missing topic: fixable by an operator) is
# transient: nak'ed with a back-off.
PERMANENT = (gexc.InvalidArgument, gexc.OutOfRange, TypeError, ValueError)


def permanent(exc: BaseException) -> bool:
    """Whether a failed publish can never succeed as it is."""
    return isinstance(exc, PERMANENT)


class JetStreamAcks(Protocol):
    """A delivered message's acknowledgements (nats-py's ``Msg`` has these)."""

    async def ack(self) -> None: ...

    async def nak(self, delay: float | None = None) -> None: ...


def backoff(delivered: int) -> float:
    """Seconds before the next delivery of a message delivered ``delivered`` times: 1, 2, 4, 8, then 10."""
    return min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** max(0, delivered - 1))


@dataclass(frozen=True)
class Plan:
    """What to publish for one delivered message: its forward, or its dead letter (with why)."""

    inbound: Inbound
    delivery: JetStreamAcks
    outbound: Outbound | None
    rejection: Rejected | None = None
    provider: str | None = None


def resource_key(plan: Plan) -> str:
    return plan.outbound.resource_key if plan.outbound else ""


def waves(plans: Sequence[Plan]) -> list[list[int]]:
    """The plans' indexes in publishing waves: each resource's n-th update of the batch in wave n; what names
    no resource (dead-lettered, or left to ingest to refuse) in the first."""
    seen: dict[str, int] = {}
    out: list[list[int]] = []
    for i, plan in enumerate(plans):
        key = resource_key(plan)
        n = seen.get(key, -1) + 1 if key else 0
        if key:
            seen[key] = n
        if n == len(out):
            out.append([])
        out[n].append(i)
    return out


def refusal(exc: BaseException, delivered: int, max_deliver: int) -> Rejected | None:
    """Why a failed forward goes to the dead letters now, or None: delivered again later (nak'ed)."""
    if permanent(exc):
        return Rejected(Reason.PUBSUB_REFUSED, f"Pub/Sub refuses the publish for good: {exc!r}",
                        {"error": type(exc).__name__})
    if delivered >= max_deliver:
        return Rejected(Reason.DELIVERY_EXHAUSTED, f"not forwarded after {delivered} deliveries: {exc!r}",
                        {"deliveries": delivered})
    return None


class Forwarder:
    def __init__(self, settings: Settings, nats: NatsSettings, publisher: Any, health: IngressHealth):
        self.settings, self.nats, self.publisher, self.health = settings, nats, publisher, health

    def plan(self, inbound: Inbound, delivery: JetStreamAcks) -> Plan:
        try:
            outbound = route(inbound, self.nats, self.settings)
            return Plan(inbound, delivery, outbound, provider=outbound.provider)
        except Rejected as exc:
            return Plan(inbound, delivery, None, exc, known_provider(inbound.subject, self.nats, self.settings))

    async def forward(self, batch: Sequence[tuple[Inbound, JetStreamAcks]]) -> list[ForwardOutcome]:
        """Publish the batch, then settle each message (ack or nak) by its own result, each resource's updates
        in NATS's order: a resource's later update in the batch goes in a later wave, once the earlier one is
        settled; the next batch is fetched once this one is. No Pub/Sub ordering key: the ingest subscriptions
        deliver unordered (upsert orders by event time), and the client publishes one request per key, a
        quarter of the throughput (benchmarks/nats_ingress.py)."""
        plans = [self.plan(inbound, delivery) for inbound, delivery in batch]
        outcomes: dict[int, ForwardOutcome] = {}
        held: set[str] = set()  # resources whose earlier update goes again later: so do their next ones
        for wave in waves(plans):
            results = await asyncio.gather(*(self._settle_after(plans[i], held) for i in wave))
            outcomes.update(zip(wave, results))
            held |= {resource_key(plans[i]) for i, o in zip(wave, results) if o is ForwardOutcome.RETRYING} - {""}
        return [outcomes[i] for i in range(len(plans))]

    async def _settle_after(self, plan: Plan, held: set[str]) -> ForwardOutcome:
        attributes = {"messaging.system": "nats", "messaging.message.id": plan.inbound.message_id,
                      "dcm.provider": plan.provider or "unknown", "dcm.key": resource_key(plan)}
        with tracing.continuing(SERVICE_NAME, plan.inbound.headers, edge=True, attributes=attributes) as span:
            if resource_key(plan) in held:
                outcome = await self._retry(plan, "an earlier update of its resource is delivered again first")
            else:
                outcome = await self._settle(plan)
            span.set_attribute("dcm.outcome", outcome.value)
            return outcome

    async def _settle(self, plan: Plan) -> ForwardOutcome:
        if plan.outbound is not None:
            try:
                await self._publish(self.settings.topic_path(plan.outbound.topic), plan.outbound.data,
                                    plan.outbound.attributes)
                await plan.delivery.ack()
                self.health.forwarded(plan.inbound)
                return ForwardOutcome.FORWARDED
            except Exception as exc:  # any failure of the publish: never acked unpublished
                rejection = refusal(exc, plan.inbound.delivered, self.nats.max_deliver)
                if rejection is None:
                    return await self._retry(plan, f"publish to {plan.outbound.topic} failed: {exc!r}")
                plan = Plan(plan.inbound, plan.delivery, plan.outbound, rejection, plan.provider)
        return await self._dead_letter(plan)

    async def _dead_letter(self, plan: Plan) -> ForwardOutcome:
        assert plan.rejection is not None
        topic = plan.outbound.topic if plan.outbound else (
            self.settings.ingress_topic(plan.provider) if plan.provider else None)
        original = as_pubsub(plan.inbound, topic)
        attributes = dl.rejection_attributes(original, plan.rejection, SERVICE_NAME, plan.provider, timeutil.now_str())
        try:
            await self._publish_dead_letter(plan, attributes)
        except Exception as exc:
            if not permanent(exc):
                return await self._retry(plan, f"dead-letter publish failed: {exc!r}")
            return await self._abandon(plan, exc)
        await plan.delivery.ack()
        self.health.dead_lettered(plan.inbound)
        log.warning("message dead-lettered: %s", plan.rejection.message, extra={
            "labels": {"reason": plan.rejection.reason.value, "provider": plan.provider or "unknown",
                       "function": SERVICE_NAME},
            "messageId": plan.inbound.message_id, "subject": plan.inbound.subject[:200]})
        return ForwardOutcome.DEAD_LETTERED

    async def _publish_dead_letter(self, plan: Plan, attributes: Mapping[str, str]) -> None:
        """The dead letter; refused for good (an attribute no check foresaw), once more with ours alone."""
        path = self.settings.topic_path(self.settings.topic_deadletter)
        try:
            await self._publish(path, plan.inbound.data, attributes)
        except Exception as exc:
            if not permanent(exc):
                raise
            ours = {k: v for k, v in attributes.items() if ingress.is_platform_attribute(k)}
            dropped = len(attributes) - len(ours) + int(attributes.get(dl.ATTRIBUTES_DROPPED, "0") or 0)
            await self._publish(path, plan.inbound.data, {**ours, dl.ATTRIBUTES_DROPPED: str(dropped)})

    async def _abandon(self, plan: Plan, exc: BaseException) -> ForwardOutcome:
        """Pub/Sub refuses even the dead letter with the platform's attributes alone, for good: acked (never
        nak'ed for ever, holding its provider's budget), said in an error line; the stream keeps it until
        ``max_age`` (limits retention: an ack removes nothing)."""
        await plan.delivery.ack()
        self.health.failed(f"dead letter refused for good: {exc!r}")
        log.error("message neither forwarded nor dead-lettered: Pub/Sub refuses it for good; it stays in the "
                  "stream", extra={"labels": {"provider": plan.provider or "unknown", "function": SERVICE_NAME},
                                   "messageId": plan.inbound.message_id, "subject": plan.inbound.subject[:200],
                                   "streamSequence": plan.inbound.stream_sequence, "error": repr(exc)[:500]})
        return ForwardOutcome.ABANDONED

    async def _retry(self, plan: Plan, error: str) -> ForwardOutcome:
        delay = backoff(plan.inbound.delivered)
        await plan.delivery.nak(delay=delay)
        self.health.failed(error)
        log.warning("not forwarded, JetStream delivers it again in %.0f s", delay, extra={
            "labels": {"provider": plan.provider or "unknown", "function": SERVICE_NAME},
            "messageId": plan.inbound.message_id, "delivered": plan.inbound.delivered, "error": error[:500]})
        return ForwardOutcome.RETRYING

    async def _publish(self, topic_path: str, data: bytes, attributes: Mapping[str, str]) -> str:
        """Publish and wait for Pub/Sub's confirmation (its message id), at most ``publish_timeout_seconds``;
        the client stops retrying by then too, so a publish given up on is not completed later."""
        timeout = self.nats.publish_timeout_seconds
        future = self.publisher.publish(topic_path, data, retry=retries.Retry(timeout=timeout), timeout=timeout,
                                        **{k: clip(v) for k, v in trace_context.inject(attributes).items()})
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
