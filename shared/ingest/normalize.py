"""Validate a provider's message and normalise it into a StatusUpdate.

The order of checks is the order of trust: size, envelope, identity, provider
isolation (before we look further at anything a provider claims), resource
type, schema, data. The first failure raises Rejected with its reason.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Mapping

import orjson

from shared.contracts import dead_letter as dl
from shared.contracts import limits, timeutil
from shared.contracts.errors import Reason, Rejected
from shared.contracts.identity import provider_named_by, resolve
from shared.contracts.model import PubSubMessage, ResourceKey
from shared.contracts.schemas import StatusSchema, registry
from shared.contracts.status_report import ProviderEvent, decode
from shared.contracts.status_update import StatusUpdate
from shared.ingest.statuses import normalize as normalize_status
from shared.runtime.logs import get_logger
from shared.runtime.settings import Settings

KNOWN_DATA_FIELDS = frozenset({"id", "status", "message", "reason", "lastTransitionTime", "metadata",
                               "resourceSpecific"})
SEQUENCE_DIGITS = 20  # an integer sequence, zero-padded: compares as a string the way it does as a number
log = get_logger("normalize")
registry()  # compile every schema now, at import (the cold start), not on the first event


def _check_provider(key: ResourceKey, message: PubSubMessage, source: str, settings: Settings) -> None:
    """The provider is the one whose ingress topic the event arrived on; the event may not claim another."""
    topic_provider = settings.provider_of_topic(message.topic) if message.topic else None
    if topic_provider is None:
        raise Rejected(Reason.PROVIDER_MISMATCH,
                       f"event for provider {key.provider!r} did not arrive on a provider ingress topic",
                       {"eventProvider": key.provider, "topic": message.topic})
    if topic_provider != key.provider:
        raise Rejected(Reason.PROVIDER_MISMATCH,
                       f"event claims provider {key.provider!r} but arrived on {topic_provider!r}'s topic",
                       {"eventProvider": key.provider, "topicProvider": topic_provider, "topic": message.topic})
    named = provider_named_by(source)
    if named and named != key.provider and named not in settings.profile(key.provider).names:
        raise Rejected(Reason.PROVIDER_MISMATCH,
                       f"source {source!r} names provider {named!r} but the event arrived on {topic_provider!r}'s "
                       f"topic (a provider's other names are declared in its topology profile)",
                       {"eventProvider": named, "topicProvider": topic_provider, "topic": message.topic,
                        "attribute": "source"})


def _schema_for(key: ResourceKey, event: ProviderEvent) -> tuple[StatusSchema, bool]:
    reg = registry()
    if key.resource_type not in reg.current:
        raise Rejected(Reason.UNKNOWN_RESOURCE_TYPE,
                       f"unknown resource type {key.resource_type!r}; known: {', '.join(reg.resource_types)}",
                       {"resourceType": key.resource_type, "known": list(reg.resource_types)})
    uri = event.attributes.get("dataschema")
    if not uri:
        schema = reg.current[key.resource_type]
        log.info("event has no dataschema; using the current schema", extra={
            "labels": {"provider": key.provider, "resourceType": key.resource_type},
            "schema": schema.uri, "eventId": event.attributes["id"]})
        return schema, True
    schema = reg.status_schema(uri)
    if schema is None:
        raise Rejected(Reason.UNKNOWN_SCHEMA, f"dataschema {uri!r} is not a registered schema",
                       {"schema": uri, "resourceType": key.resource_type})
    if schema.resource_type != key.resource_type:
        raise Rejected(Reason.UNKNOWN_SCHEMA,
                       f"dataschema {uri!r} is for {schema.resource_type!r}, the event is a {key.resource_type!r}",
                       {"schema": uri, "resourceType": key.resource_type})
    return schema, False


def _validate(schema: StatusSchema, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise Rejected(Reason.SCHEMA_INVALID, "/data: status data must be a JSON object",
                       {"schema": schema.uri, "path": "/data", "rule": "type",
                        "value": type(data).__name__ if data is not None else None})
    first = schema.compiled.first_violation(data, prefix="/data")
    if first is not None:  # the first violation only: the dead-letter function lists them all, off this path
        raise Rejected(Reason.SCHEMA_INVALID, f"{first.path}: {first.message}",
                       {"schema": schema.uri, "path": first.path, "rule": first.rule, "value": first.value})
    breach = limits.storable(data, "/data")
    if breach:  # valid JSON Schema, but Firestore could not hold it
        raise Rejected(Reason.SCHEMA_INVALID, f"{breach.path}: {breach.message}",
                       {"schema": schema.uri, "path": breach.path, "rule": breach.rule})
    size = len(orjson.dumps(data))
    if not limits.document_fits(size):
        raise Rejected(Reason.OVERSIZE, f"status data is {size} bytes: with what is stored around it, it exceeds "
                       f"a Firestore document's {limits.FIRESTORE_MAX_DOCUMENT_BYTES} bytes",
                       {"size": size, "limit": limits.FIRESTORE_MAX_DOCUMENT_BYTES - limits.DOCUMENT_HEADROOM_BYTES})
    return data


def _transition_time(data: dict[str, Any], schema: StatusSchema) -> str | None:
    value = data.get("lastTransitionTime")
    if value is None:
        return None
    try:
        return timeutil.canonical(value)
    except ValueError as exc:
        raise Rejected(Reason.SCHEMA_INVALID, f"/data/lastTransitionTime: {exc}",
                       {"schema": schema.uri, "path": "/data/lastTransitionTime", "rule": "format",
                        "value": value}) from exc


def _sequence(attrs: Mapping[str, Any]) -> str | None:
    """The CloudEvents ``sequence`` extension, as a string that compares lexicographically (the spec's rule).

    An integer (a JSON number, or the 1.0.2 ``sequencetype: Integer``) is zero-padded so that it does too.
    """
    value = attrs.get("sequence")
    if value is None or value == "":
        return None
    integer = isinstance(value, int) and not isinstance(value, bool)
    if integer or (str(attrs.get("sequencetype", "")).lower() == "integer" and str(value).isdigit()):
        return f"{int(value):0{SEQUENCE_DIGITS}d}" if int(value) >= 0 else str(value)
    return str(value)


def _not_ahead(value: str, received: datetime, tolerance: timedelta) -> str:
    """``value``, or the receive time when ``value`` is further in the future than the tolerance."""
    return timeutil.format(received) if timeutil.parse(value) > received + tolerance else value


def normalize_message(message: PubSubMessage, settings: Settings) -> StatusUpdate:
    """The StatusUpdate this message reports, or Rejected saying why not."""
    event = decode(message, settings.max_event_bytes)
    attrs = event.attributes
    topic_provider = settings.provider_of_topic(message.topic) if message.topic else None
    key = resolve(attrs, event.data if isinstance(event.data, dict) else {}, topic_provider)
    try:
        _check_provider(key, message, attrs["source"], settings)
        schema, defaulted = _schema_for(key, event)
        data = _validate(schema, event.data)
        transition = _transition_time(data, schema)
    except Rejected as exc:
        exc.key = str(key)
        raise
    profile = settings.profile(key.provider)
    vocabulary = registry().vocabularies.get(profile.vocabulary) if profile.vocabulary else None
    status = normalize_status(registry().current[key.resource_type], data["status"], vocabulary)
    if not status.recognized:
        log.warning("status outside the enum, stored as UNKNOWN", extra={
            "labels": {"provider": key.provider, "resourceType": key.resource_type},
            "rawStatus": status.raw, "key": str(key)})
    received = timeutil.now()
    received_at = timeutil.format(received)
    publish_time = timeutil.canonical(message.publish_time) if message.publish_time else None
    reported = attrs.get("time") or transition or publish_time or received_at
    tolerance = timedelta(seconds=settings.max_clock_skew_seconds)
    observed_at = _not_ahead(reported, received, tolerance)
    if transition:
        transition = _not_ahead(transition, received, tolerance)
    if observed_at != reported:
        log.warning("event time ahead of the clock, clamped to the receive time", extra={
            "labels": {"provider": key.provider, "resourceType": key.resource_type, "clockSkew": "clamped"},
            "key": str(key), "eventId": attrs["id"], "reportedTime": reported, "receivedAt": received_at})
    return StatusUpdate(
        key=key,
        status=status.status,
        raw_status=status.raw,
        status_recognized=status.recognized,
        message=data.get("message") or "",
        reason=data.get("reason"),
        last_transition_time=transition or observed_at,
        observed_at=observed_at,
        metadata=data.get("metadata") or {},
        resource_specific=data.get("resourceSpecific") or {},
        event_id=attrs["id"],
        event_source=attrs["source"],
        event_type=attrs["type"],
        event_subject=attrs.get("subject"),
        dataschema=schema.uri,
        schema_defaulted=defaulted,
        ingress_message_id=message.message_id,
        ingress_topic=message.topic,
        received_at=received_at,
        replay_of=message.attributes.get(dl.REPLAY_OF),
        transition_reported=transition is not None,
        sequence=_sequence(attrs),
        published_at=publish_time,
        reported_time=reported if observed_at != reported else None,
        extra={k: v for k, v in data.items() if k not in KNOWN_DATA_FIELDS},
    )
