"""The status report: a provider's CloudEvent on its ingress topic, both directions.

``build_event`` is the provider's side (``pubsub_binding.to_message`` makes it the message a reporter
publishes); ``check`` is ingest's (``pubsub_binding.from_message`` reads the event off the message, in
either content mode): every check ingest makes, which the provider kit makes too before it publishes.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from typing import Any, Collection, Mapping

import orjson
from cloudevents.http import CloudEvent

from . import limits, timeutil
from . import outputs as output_maps
from .errors import Reason, Rejected
from .identity import PLATFORM_SOURCE, TRANSPORT_SUBJECT, names_a_type, provider_named_by, resolve, subject_type
from .model import PubSubMessage, ResourceKey
from .pubsub_binding import JSON_CONTENT_TYPE, ProviderEvent, from_message
from .schemas import StatusSchema, registry

def check_provider(key: ResourceKey, topic: str | None, topic_provider: str | None, source: str,
                    other_names: Collection[str]) -> None:
    """The provider is the one whose ingress topic the event arrived on; the event may not claim another."""
    if topic_provider is None:
        raise Rejected(Reason.PROVIDER_MISMATCH,
                       f"event for provider {key.provider!r} did not arrive on a provider ingress topic",
                       {"eventProvider": key.provider, "topic": topic})
    if topic_provider != key.provider:
        raise Rejected(Reason.PROVIDER_MISMATCH,
                       f"event claims provider {key.provider!r} but arrived on {topic_provider!r}'s topic",
                       {"eventProvider": key.provider, "topicProvider": topic_provider, "topic": topic})
    if source.lstrip("/").startswith(PLATFORM_SOURCE):
        raise Rejected(Reason.PROVIDER_MISMATCH, f"source {source!r} is the platform's own: a provider may not use it",
                       {"eventProvider": key.provider, "topicProvider": topic_provider, "topic": topic,
                        "attribute": "source"})
    named = provider_named_by(source)
    if named and named != key.provider and named not in other_names:
        raise Rejected(Reason.PROVIDER_MISMATCH,
                       f"source {source!r} names provider {named!r} but the event arrived on {topic_provider!r}'s "
                       f"topic (a provider's other names are declared in its topology profile)",
                       {"eventProvider": named, "topicProvider": topic_provider, "topic": topic,
                        "attribute": "source"})


def schema_for(key: ResourceKey, event: ProviderEvent) -> tuple[StatusSchema, bool]:
    reg = registry()
    if key.resource_type not in reg.current:
        raise Rejected(Reason.UNKNOWN_RESOURCE_TYPE,
                       f"unknown resource type {key.resource_type!r}; known: {', '.join(reg.resource_types)}",
                       {"resourceType": key.resource_type, "known": list(reg.resource_types)})
    uri = event.attributes.get("dataschema")
    if not uri:
        return reg.current[key.resource_type], True
    schema = reg.status_schema(uri)
    if schema is None:
        raise Rejected(Reason.UNKNOWN_SCHEMA, f"dataschema {uri!r} is not a registered schema",
                       {"schema": uri, "resourceType": key.resource_type})
    if schema.resource_type != key.resource_type:
        raise Rejected(Reason.UNKNOWN_SCHEMA,
                       f"dataschema {uri!r} is for {schema.resource_type!r}, the event is a {key.resource_type!r}",
                       {"schema": uri, "resourceType": key.resource_type})
    return schema, False


def validate_data(schema: StatusSchema, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise Rejected(Reason.SCHEMA_INVALID, "/data: status data must be a JSON object",
                       {"schema": schema.uri, "path": "/data", "rule": "type",
                        "value": type(data).__name__ if data is not None else None})
    first = schema.compiled.first_violation(data, prefix="/data")
    if first is not None:  # the first violation only: the dead-letter function lists them all, off this path
        value = None if output_maps.is_output_pointer(first.path[len("/data"):]) else first.value  # may be a credential
        raise Rejected(Reason.SCHEMA_INVALID, f"{first.path}: {first.message}",
                       {"schema": schema.uri, "path": first.path, "rule": first.rule, "value": value})
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


def transport_type(attrs: Mapping[str, Any], message_attributes: Mapping[str, str]) -> str | None:
    """The resource type the NATS subject names (``nats-subject``, set by the NATS ingress), when the
    CloudEvent's own type names none of ours and the subject names one; else None (the type decides, and
    an event whose type names no resource type keeps its reason). Never overrides a type that names one."""
    known = registry().current
    if not isinstance(attrs.get("type"), str) or names_a_type(attrs["type"], known):
        return None
    named = subject_type(message_attributes.get(TRANSPORT_SUBJECT))
    return named if named in known else None


@dataclass(frozen=True)
class CheckedReport:
    """A provider's message that passed every check ingest makes, and what those checks found."""

    event: ProviderEvent
    key: ResourceKey
    schema: StatusSchema
    schema_defaulted: bool  # no dataschema: the type's current schema was used
    data: dict[str, Any]
    transition: str | None  # data.lastTransitionTime, canonical


def check(message: PubSubMessage, topic_provider: str | None, max_bytes: int = limits.MAX_EVENT_BYTES,
          other_names: Collection[str] = (), event: ProviderEvent | None = None) -> CheckedReport:
    """Every check ingest makes, in the order of trust: size, envelope, identity, provider isolation
    (before we look further at anything a provider claims), resource type, schema, data. The first
    failure raises Rejected with its reason (and ``key`` once it is known). The provider SDK runs the
    same function before it publishes, so a provider fails fast with the reason ingest would give.

    ``topic_provider``: the provider whose ingress topic the message is on; ``other_names``: the other
    names a ``dcm/providers/{name}`` source may give that provider (its topology profile); ``event``:
    the message already decoded.
    """
    event = event or from_message(message, max_bytes)
    attrs = event.attributes
    key = resolve(attrs, event.data if isinstance(event.data, dict) else {}, topic_provider,
                  transport_type(attrs, message.attributes))
    try:
        check_provider(key, message.topic, topic_provider, attrs["source"], other_names)
        schema, defaulted = schema_for(key, event)
        data = validate_data(schema, event.data)
        transition = _transition_time(data, schema)
    except Rejected as exc:
        exc.key = str(key)
        raise
    return CheckedReport(event, key, schema, defaulted, data, transition)


# ---- the provider's side ----------------------------------------------------------------
class ReportForm(enum.StrEnum):
    """The two identity forms a provider may send (``dcm_status_contracts.identity`` reads both)."""

    CURRENT = "current"  # dcm-project upstream: type dcm.status.{type}, source dcm/providers/{p}, data.id
    JANUARY = "january"  # the proposal: type dcm.providers.{p}.{type}[.instances].{id}.status


def status_type(provider: str, resource_type: str, resource_id: str) -> str:
    """The proposal's CloudEvent type for one resource's status."""
    infix = "instances." if resource_type in ("vm", "container") else ""
    return f"dcm.providers.{provider}.{resource_type}.{infix}{resource_id}.status"


def build_event(provider: str, resource_type: str, resource_id: str, status: str, message: str = "",
                *, event_id: str | None = None, time: str | None = None, reason: str | None = None,
                last_transition_time: str | None = None, metadata: Mapping[str, Any] | None = None,
                resource_specific: Mapping[str, Any] | None = None, source: str | None = None,
                dataschema: str | None = "current", form: ReportForm | str = ReportForm.JANUARY,
                extensions: Mapping[str, Any] | None = None, output_spec: Mapping[str, Any] | None = None,
                outputs: Mapping[str, Any] | None = None) -> CloudEvent:
    """A status report as a CloudEvent (``dataschema="current"``: the type's newest schema).

    ``form`` CURRENT is what dcm-project providers send today (``subject`` is the messaging subject
    ``dcm.{type}``); JANUARY is the proposal's. ``extensions``: further context attributes
    (``sequence``, a resync marker). ``output_spec`` / ``outputs``: what the resource offers others
    (shared/contracts/outputs.py); None leaves the stored map as it is, ``{}`` clears it.
    """
    data: dict[str, Any] = {"status": status, "message": message}
    form = ReportForm(form)
    if form is ReportForm.CURRENT:
        data = {"id": resource_id, **data}
    if reason:
        data["reason"] = reason
    if last_transition_time:
        data["lastTransitionTime"] = last_transition_time
    if metadata:
        data["metadata"] = dict(metadata)
    if resource_specific:
        data["resourceSpecific"] = dict(resource_specific)
    data |= output_maps.carried({"output_spec": output_spec, "outputs": outputs})
    attributes: dict[str, Any] = {"id": event_id or str(uuid.uuid4())}
    if form is ReportForm.CURRENT:
        attributes |= {"source": source or f"dcm/providers/{provider}", "type": f"dcm.status.{resource_type}",
                       "subject": f"dcm.{resource_type}"}
    else:
        attributes |= {"source": source or f"{provider}-provider",
                       "type": status_type(provider, resource_type, resource_id)}
    attributes |= {"time": time or timeutil.now_str(), "datacontenttype": JSON_CONTENT_TYPE}
    if dataschema == "current":
        current = registry().current.get(resource_type)
        if current:
            attributes["dataschema"] = current.uri
    elif dataschema:
        attributes["dataschema"] = dataschema
    attributes |= dict(extensions or {})
    return CloudEvent(attributes, data)

