"""Validate a provider's message and normalise it into a StatusUpdate.

The message is decoded once (``dcm_status_contracts.pubsub_binding.from_message``); its topic's provider
is the ``Arrival`` the entry point asked for once and passed on; the checks are the status report contract's
(``dcm_status_contracts.status_report.check``, which the provider SDK runs too) or, for a Cloud Native
Events event, its contract's: the first failure raises Rejected with its reason.
Then the status is mapped onto its type's enum and the times are settled.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Mapping

from dcm_status_contracts import cloud_native_event, timeutil
from dcm_status_contracts import deadletter as dl
from dcm_status_contracts.errors import Reason, Rejected
from dcm_status_contracts.ingress import Arrival
from dcm_status_contracts.model import PubSubMessage, ResourceKey
from dcm_status_contracts.outputs import OUTPUT_FIELDS, carried
from dcm_status_contracts.resync import ResyncMark
from dcm_status_contracts.schemas import StatusSchema, registry
from dcm_status_contracts.pubsub_binding import ProviderEvent, from_message
from dcm_status_contracts.status_report import check
from dcm_status_contracts.status_update import StatusUpdate

from shared.ingest.statuses import normalize_status
from shared.runtime.logs import get_logger
from shared.runtime.settings import Settings

KNOWN_DATA_FIELDS = frozenset({"id", "status", "message", "reason", "lastTransitionTime", "metadata",
                               "resourceSpecific", *OUTPUT_FIELDS})
SEQUENCE_DIGITS = 20  # an integer sequence, zero-padded: compares as a string the way it does as a number
log = get_logger("normalize")
registry()  # compile every schema now, at import (the cold start), not on the first event


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


def _not_ahead(value: str, latest: str, received_at: str) -> str:
    """``value`` (canonical), or the receive time when it is later than ``latest`` (the receive time plus
    the tolerated clock skew, canonical): canonical timestamps compare as strings the way they do as times."""
    return received_at if value > latest else value


def normalize(message: PubSubMessage, settings: Settings, arrival: Arrival | None = None) -> list[StatusUpdate]:
    """Every StatusUpdate this message reports (one for a DCM status event, one per resource for a Cloud
    Native Events event), or Rejected saying why not. The message is decoded once; ``arrival`` is what its
    topic proves (asked here when not given)."""
    event = from_message(message, settings.max_event_bytes)
    arrival = arrival or settings.origins.arrival(message.topic)
    if cloud_native_event.is_cloud_native(event):
        return _cloud_native_updates(message, settings, event, arrival)
    return [_report_update(message, settings, event, arrival)]


def normalize_message(message: PubSubMessage, settings: Settings) -> StatusUpdate:
    """The StatusUpdate a DCM status event reports, or Rejected saying why not."""
    event = from_message(message, settings.max_event_bytes)
    return _report_update(message, settings, event, settings.origins.arrival(message.topic))


def _other_names(settings: Settings, arrival: Arrival) -> tuple[str, ...]:
    """The other names the provider the topic proves may give itself in a source (its topology profile)."""
    return settings.profile(arrival.provider).names if arrival.provider else ()


def _cloud_native_updates(message: PubSubMessage, settings: Settings, event: ProviderEvent,
                          arrival: Arrival) -> list[StatusUpdate]:
    """One update per resource a Cloud Native Events event reports on."""
    return [_update(message, settings, c.key, c.schema, c.data, None, event.attributes, True,
                    part=c.resource.address, metrics_only=c.resource.metrics_only)
            for c in cloud_native_event.check(event, message.topic, arrival.provider, _other_names(settings, arrival))]


def _report_update(message: PubSubMessage, settings: Settings, event: ProviderEvent,
                   arrival: Arrival) -> StatusUpdate:
    """The update a DCM status event reports, its resync marker (if any) checked against its type."""
    checked = check(message, arrival.provider, settings.max_event_bytes, _other_names(settings, arrival), event)
    key, schema, attrs = checked.key, checked.schema, checked.event.attributes
    if checked.schema_defaulted:
        log.info("event has no dataschema; using the current schema", extra={
            "labels": {"provider": key.provider, "resourceType": key.resource_type},
            "schema": schema.uri, "eventId": attrs["id"]})
    try:
        mark = ResyncMark.of(attrs)
    except Rejected as exc:
        exc.key = str(key)
        raise
    if mark is not None and key.resource_type not in mark.scope:
        raise Rejected(Reason.NOT_A_CLOUDEVENT, f"resync marker: a {key.resource_type} is outside the batch's scope "
                       f"({', '.join(mark.scope)})", {"missing": [], "invalid": ["resyncscope"]}, key=str(key))
    return _update(message, settings, key, schema, checked.data, checked.transition, attrs, checked.schema_defaulted,
                   resync=mark.to_dict() if mark else None)


@dataclass(frozen=True)
class _Times:
    """An update's times, settled: none ahead of the receive time by more than the tolerated clock skew."""

    received_at: str
    published_at: str | None
    reported: str  # what the event says (its time, else its transition, publish or receive time)
    observed_at: str  # reported, or the receive time when reported is ahead of the clock
    transition: str | None


def _settle_times(message: PubSubMessage, settings: Settings, key: ResourceKey, attrs: Mapping[str, Any],
                  transition: str | None) -> _Times:
    received = timeutil.now()
    received_at = timeutil.format(received)
    publish_time = timeutil.canonical(message.publish_time) if message.publish_time else None
    reported = attrs.get("time") or transition or publish_time or received_at
    latest = timeutil.format(received + timedelta(seconds=settings.max_clock_skew_seconds))
    observed_at = _not_ahead(reported, latest, received_at)
    if transition:
        transition = _not_ahead(transition, latest, received_at)
    if observed_at != reported:
        log.warning("event time ahead of the clock, clamped to the receive time", extra={
            "labels": {"provider": key.provider, "resourceType": key.resource_type, "clockSkew": "clamped"},
            "key": str(key), "eventId": attrs["id"], "reportedTime": reported, "receivedAt": received_at})
    return _Times(received_at, publish_time, reported, observed_at, transition)


def _update(message: PubSubMessage, settings: Settings, key: ResourceKey, schema: StatusSchema,
            data: Mapping[str, Any], transition: str | None, attrs: Mapping[str, Any], defaulted: bool,
            part: str | None = None, metrics_only: bool = False,
            resync: Mapping[str, Any] | None = None) -> StatusUpdate:
    """The update: the status on its type's enum, the times settled."""
    profile = settings.profile(key.provider)
    vocabulary = registry().vocabularies.get(profile.vocabulary) if profile.vocabulary else None
    status = normalize_status(registry().current[key.resource_type], data["status"], vocabulary)
    if not status.recognized:
        log.warning("status outside the enum, stored as UNKNOWN", extra={
            "labels": {"provider": key.provider, "resourceType": key.resource_type},
            "rawStatus": status.raw, "key": str(key)})
    times = _settle_times(message, settings, key, attrs, transition)
    received_at, publish_time, reported = times.received_at, times.published_at, times.reported
    observed_at, transition = times.observed_at, times.transition
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
        part=part,
        metrics_only=metrics_only,
        resync=resync,
        **carried(data),
    )
