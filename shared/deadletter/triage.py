"""Classify a dead letter: why it failed, whose it is, where it came from.

Two kinds arrive on the dead-letter topic:

- rejections, published by ``ingest`` with ``dcm-reason`` and friends;
- delivery failures, dead-lettered by Pub/Sub itself after max delivery
  attempts, with ``CloudPubSubDeadLetterSource*`` attributes.

Anything else is ``unclassified``. Each classification has a fingerprint
(provider + reason + path/detail) so that ten thousand copies of one provider
bug are one group.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any, Mapping

import orjson

from shared.contracts import dead_letter as dl
from shared.contracts.errors import Reason, Rejected
from shared.contracts.identity import resolve
from shared.contracts.model import PubSubMessage
from shared.contracts.schemas import registry
from shared.contracts.status_report import decode

_KNOWN = {r.value for r in Reason}


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


def _best_effort_identity(message: PubSubMessage) -> tuple[str | None, str | None]:
    """Provider and resource key of a message we could not process, if they can be read."""
    attrs = message.attributes
    if attrs.get("provider") and attrs.get("key"):
        return attrs["provider"], attrs["key"]
    try:
        event = decode(message, max_bytes=1 << 30)
        key = resolve(event.attributes, event.data if isinstance(event.data, dict) else {})
        return key.provider, str(key)
    except (Rejected, KeyError, TypeError):
        pass
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
        found = schema.violations(decode(message, max_bytes=1 << 30).data, prefix="/data")
    except (KeyError, Rejected, ValueError, RecursionError):
        return detail
    return {**detail, "violations": [v.to_dict() for v in found[:10]]} if found else detail


def classify(message: PubSubMessage) -> Classification:
    attrs = message.attributes
    replay_of = attrs.get(dl.REPLAY_OF)
    if dl.REASON in attrs:
        reason = attrs[dl.REASON] if attrs[dl.REASON] in _KNOWN else Reason.UNCLASSIFIED.value
        detail = _every_violation(reason, _detail(attrs), message)
        provider = attrs.get(dl.PROVIDER) or None
        result = Classification(
            reason=reason,
            message=attrs.get(dl.MESSAGE) or reason,
            detail=detail,
            provider=provider,
            key=attrs.get(dl.KEY) or None,
            source_topic=attrs.get(dl.SOURCE_TOPIC) or None,
            source_subscription=None,
            delivery_count=None,
            original_message_id=attrs.get(dl.ORIGINAL_MESSAGE_ID) or message.message_id,
            original_publish_time=attrs.get(dl.ORIGINAL_PUBLISH_TIME) or None,
            rejected_by=attrs.get(dl.REJECTED_BY) or "unknown",
            replay_of=replay_of,
        )
    elif dl.PS_SUBSCRIPTION in attrs:
        subscription = attrs[dl.PS_SUBSCRIPTION]
        if "/" not in subscription and attrs.get(dl.PS_SUBSCRIPTION_PROJECT):
            subscription = f"projects/{attrs[dl.PS_SUBSCRIPTION_PROJECT]}/subscriptions/{subscription}"
        count = int(attrs.get(dl.PS_DELIVERY_COUNT) or 0)
        provider, key = _best_effort_identity(message)
        result = Classification(
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
    else:
        provider, key = _best_effort_identity(message)
        result = Classification(
            reason=Reason.UNCLASSIFIED.value,
            message="message on the dead-letter topic carries no reason",
            detail={}, provider=provider, key=key, source_topic=None, source_subscription=None,
            delivery_count=None, original_message_id=message.message_id,
            original_publish_time=message.publish_time, rejected_by="unknown", replay_of=replay_of,
        )
    fp = fingerprint_of(result.provider, result.reason, result.detail)
    return dataclasses.replace(result, fingerprint=fp)


def unclassifiable(message: PubSubMessage, error: Exception) -> Classification:
    """A dead letter triage itself could not read: stored as it is, with the error, never retried forever."""
    attrs = message.attributes
    result = Classification(
        reason=Reason.UNCLASSIFIED.value, message=f"triage failed on this dead letter: {error!r}"[:1000],
        detail={"error": type(error).__name__}, provider=attrs.get(dl.PROVIDER) or attrs.get("provider"),
        key=attrs.get(dl.KEY) or None, source_topic=attrs.get(dl.SOURCE_TOPIC) or None,
        source_subscription=attrs.get(dl.PS_SUBSCRIPTION) or None, delivery_count=None,
        original_message_id=attrs.get(dl.ORIGINAL_MESSAGE_ID) or message.message_id,
        original_publish_time=message.publish_time, rejected_by=attrs.get(dl.REJECTED_BY) or "unknown",
        replay_of=attrs.get(dl.REPLAY_OF))
    return dataclasses.replace(result, fingerprint=fingerprint_of(result.provider, result.reason, result.detail))
