"""Classify a dead letter: why it failed, whose it is, where it came from.

Two kinds arrive on the dead-letter topic:

- rejections, published by ``ingest`` with ``dcm-reason`` and friends;
- delivery failures, dead-lettered by Pub/Sub itself after max delivery
  attempts, with ``CloudPubSubDeadLetterSource*`` attributes.

Anything else is ``unclassified``. Each classification has a fingerprint
(provider + reason + path/detail) so that ten thousand copies of one provider
bug are one group.

Pub/Sub's attributes are read first: Pub/Sub sets them when it dead-letters, and
a rejection never carries them (``deadletter.original_attributes``), whereas a
message Pub/Sub gave up on carries whatever ``dcm-*`` attributes its publisher
set. A replay marker (``dcm-replay-of``, which names the entry a failure comes
back to) counts only when the message came through a topic no provider can
publish to (``ingress.Origins``): the replay topic or an internal one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import orjson
from dcm_status_contracts import deadletter as dl
from dcm_status_contracts import ingress, pubsub_binding
from dcm_status_contracts.errors import Reason, Rejected
from dcm_status_contracts.identity import resolve
from dcm_status_contracts.model import PubSubMessage
from dcm_status_contracts.schemas import registry

_KNOWN = {r.value for r in Reason}
ENTRY_ID = re.compile(r"[0-9a-f]{32}")  # what shared/deadletter/store.py names an entry


@dataclass(frozen=True)
class Classification:
    reason: str
    message: str
    detail: Mapping[str, Any]
    provider: str | None
    key: str | None
    source_topic: str | None
    source_subscription: str | None
    delivery_count: int | None
    original_message_id: str
    original_publish_time: str | None
    rejected_by: str
    replay_of: str | None = None
    fingerprint: str = field(default="")


def _detail(attributes: Mapping[str, str]) -> dict[str, Any]:
    raw = attributes.get(dl.DETAIL)
    if not raw:
        return {}
    try:
        value = orjson.loads(raw)
        return value if isinstance(value, dict) else {"detail": value}
    except orjson.JSONDecodeError:
        return {"detail": raw}  # clipped at 1024 bytes: keep the text


def fingerprint_of(provider: str | None, reason: str, detail: Mapping[str, Any]) -> str:
    """Stable id of a failure *kind*: provider + reason + the detail that names the cause."""
    parts = [provider or "-", reason]
    for key in ("path", "rule", "schema", "where", "attribute", "missing", "invalid", "resourceType",
                "topicProvider", "eventProvider", "subscription", "limit", "callback"):
        if key in detail:
            parts.append(f"{key}={detail[key]}")
    return hashlib.sha1("|".join(map(str, parts)).encode()).hexdigest()[:16]


def _best_effort_identity(message: PubSubMessage, proven: str | None = None) -> tuple[str | None, str | None]:
    """Provider and resource key of a message we could not process, if they can be read. ``proven``: the
    provider whose ingress subscription it came through; then only a key of that provider is taken."""
    attrs = message.attributes
    if proven is None and attrs.get("provider") and attrs.get("key"):
        return attrs["provider"], attrs["key"]
    try:
        event = pubsub_binding.from_message(message, max_bytes=1 << 30)
        key = resolve(event.attributes, event.data if isinstance(event.data, dict) else {}, proven)
        if proven is None or key.provider == proven:
            return key.provider, str(key)
    except (Rejected, KeyError, TypeError):
        pass
    if proven is not None:
        return proven, None
    try:  # a normalised status update (upsert's input)
        doc = orjson.loads(message.data)
        if isinstance(doc, dict) and "provider" in doc and "key" in doc:
            return str(doc["provider"]), str(doc["key"])
    except orjson.JSONDecodeError:
        pass
    return attrs.get("provider"), attrs.get("key")


def _every_violation(reason: str, detail: dict[str, Any], message: PubSubMessage) -> dict[str, Any]:
    """Ingest names the first schema violation it met (its hot path stops there); the dead letter lists
    them all, from the original event and the schema ingest named. Best effort: the detail as it came
    when the event cannot be read again."""
    uri = detail.get("schema")
    if reason != Reason.SCHEMA_INVALID.value or "violations" in detail or not isinstance(uri, str):
        return detail
    try:
        schema = registry().get(uri)
        found = schema.violations(pubsub_binding.from_message(message, max_bytes=1 << 30).data, prefix="/data")
    except (KeyError, Rejected, ValueError, RecursionError):
        return detail
    return {**detail, "violations": [v.to_dict() for v in found[:10]]} if found else detail


def _replay_of(attrs: Mapping[str, str], trusted: bool) -> str | None:
    """The entry a replayed message names, when its origin vouches for the marker and it reads as an
    entry id (else None)."""
    entry_id = attrs.get(dl.REPLAY_OF) or ""
    return entry_id if trusted and ENTRY_ID.fullmatch(entry_id) else None


def _replayed_for(attrs: Mapping[str, str], origins: ingress.Origins, trusted: bool) -> str | None:
    """The provider a trusted replay was for (the ingress topic it names), if any."""
    return origins.topic_provider(origins.replay_target(attrs)) if trusted else None


def _rejected(message: PubSubMessage, origins: ingress.Origins) -> Classification:
    """A message a function rejected: its ``dcm-*`` annotations say why (believed as far as its origin
    vouches for them)."""
    attrs = message.attributes
    reason = attrs[dl.REASON] if attrs[dl.REASON] in _KNOWN else Reason.UNCLASSIFIED.value
    detail = _every_violation(reason, _detail(attrs), message)
    source_topic = attrs.get(dl.SOURCE_TOPIC) or None  # set by the function that rejected it
    trusted = not origins.provider_can_publish(topic=source_topic)
    provider = _replayed_for(attrs, origins, trusted) or attrs.get(dl.PROVIDER) or None
    replay_of = _replay_of(attrs, trusted)
    return Classification(
        reason=reason,
        message=attrs.get(dl.MESSAGE) or reason,
        detail=detail,
        provider=provider,
        key=attrs.get(dl.KEY) or None,
        source_topic=source_topic,
        source_subscription=None,
        delivery_count=None,
        original_message_id=attrs.get(dl.ORIGINAL_MESSAGE_ID) or message.message_id,
        original_publish_time=attrs.get(dl.ORIGINAL_PUBLISH_TIME) or None,
        rejected_by=attrs.get(dl.REJECTED_BY) or "unknown",
        replay_of=replay_of,
    )


def _exhausted(message: PubSubMessage, origins: ingress.Origins) -> Classification:
    """A message Pub/Sub dead-lettered after its subscription's last delivery attempt."""
    attrs = message.attributes
    subscription = attrs[dl.PS_SUBSCRIPTION]
    if "/" not in subscription and attrs.get(dl.PS_SUBSCRIPTION_PROJECT):
        subscription = f"projects/{attrs[dl.PS_SUBSCRIPTION_PROJECT]}/subscriptions/{subscription}"
    count = int(attrs.get(dl.PS_DELIVERY_COUNT) or 0)
    trusted = not origins.provider_can_publish(subscription=subscription)
    replay_of = _replay_of(attrs, trusted)
    # through an ingress subscription, the subscription says whose it is (the message's claims do not)
    proven = origins.subscription_provider(subscription) or _replayed_for(attrs, origins, trusted)
    provider, key = _best_effort_identity(message, proven)
    return Classification(
        reason=Reason.DELIVERY_EXHAUSTED.value,
        message=(f"delivery to subscription {subscription} failed {count} times; "
                 f"first published {attrs.get(dl.PS_PUBLISH_TIME, 'at an unknown time')}"),
        detail={"subscription": subscription, "deliveryCount": count,
                "subscriptionProject": attrs.get(dl.PS_SUBSCRIPTION_PROJECT),
                "originalPublishTime": attrs.get(dl.PS_PUBLISH_TIME)},
        provider=provider,
        key=key,
        source_topic=None,
        source_subscription=subscription,
        delivery_count=count,
        original_message_id=message.message_id,
        original_publish_time=attrs.get(dl.PS_PUBLISH_TIME),
        rejected_by="pubsub",
        replay_of=replay_of,
    )


def _unmarked(message: PubSubMessage) -> Classification:
    """A message on the dead-letter topic with no reason at all."""
    provider, key = _best_effort_identity(message)
    return Classification(
        reason=Reason.UNCLASSIFIED.value,
        message="message on the dead-letter topic carries no reason",
        detail={}, provider=provider, key=key, source_topic=None, source_subscription=None,
        delivery_count=None, original_message_id=message.message_id,
        original_publish_time=message.publish_time, rejected_by="unknown",
    )


def classify(message: PubSubMessage, origins: ingress.Origins = ingress.Origins()) -> Classification:
    """Why ``message`` failed, whose it is, where it came from. ``origins``: the topology's names
    (the function's settings), to tell a provider's topics from the platform's."""
    attrs = message.attributes
    if dl.PS_SUBSCRIPTION not in attrs and dl.REASON in attrs:
        result = _rejected(message, origins)
    elif dl.PS_SUBSCRIPTION in attrs:
        result = _exhausted(message, origins)
    else:
        result = _unmarked(message)
    fp = fingerprint_of(result.provider, result.reason, result.detail)
    return dataclasses.replace(result, fingerprint=fp)


def unclassifiable(message: PubSubMessage, error: Exception) -> Classification:
    """A dead letter triage itself could not read: stored as it is, with the error, never retried forever
    (under its own entry: a replay marker on a message that could not be read is not believed)."""
    attrs = message.attributes
    result = Classification(
        reason=Reason.UNCLASSIFIED.value, message=f"triage failed on this dead letter: {error!r}"[:1000],
        detail={"error": type(error).__name__}, provider=attrs.get(dl.PROVIDER) or attrs.get("provider"),
        key=attrs.get(dl.KEY) or None, source_topic=attrs.get(dl.SOURCE_TOPIC) or None,
        source_subscription=attrs.get(dl.PS_SUBSCRIPTION) or None, delivery_count=None,
        original_message_id=attrs.get(dl.ORIGINAL_MESSAGE_ID) or message.message_id,
        original_publish_time=message.publish_time, rejected_by=attrs.get(dl.REJECTED_BY) or "unknown")
    return dataclasses.replace(result, fingerprint=fingerprint_of(result.provider, result.reason, result.detail))
