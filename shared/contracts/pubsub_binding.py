"""The CloudEvents Pub/Sub protocol binding: a CloudEvent to a Pub/Sub message and back, in both content modes.

- structured: the message data is the JSON CloudEvent (``data`` or ``data_base64``), ``content-type`` is
  ``application/cloudevents+json``;
- binary: the context attributes are ``ce-*`` message attributes, ``content-type`` is the datacontenttype,
  the message data is the event's data.

``to_structured`` / ``to_binary`` are a reporter's side (``to_message`` picks by mode); ``from_structured`` /
``from_binary`` ingest's (``from_message`` picks by the message's own attributes, ``mode_of``). What comes
back is a ``ProviderEvent`` whose envelope is checked against ``schemas/envelope/cloudevent-v1.json``, every
missing or invalid attribute reported at once; what cannot be one raises Rejected with the reason.
"""

from __future__ import annotations

import base64
import binascii
import enum
from dataclasses import dataclass
from typing import Any, Mapping

import orjson
from cloudevents import conversion
from cloudevents.http import CloudEvent

from . import limits, timeutil
from .errors import Reason, Rejected
from .model import PubSubMessage
from .schemas import ENVELOPE_URI, registry

CE_PREFIX = "ce-"  # a context attribute's name, in binary mode
CONTENT_TYPE_KEY = "content-type"  # the attribute naming the message data's media type
STRUCTURED_CONTENT_TYPE = "application/cloudevents+json"  # its value in structured mode
JSON_CONTENT_TYPE = "application/json"  # its value in binary mode, when the event names none
LEGACY_DATASCHEMA = "dataSchema"
_JSON_TYPES = ("application/json", "text/json")


class BindingMode(enum.StrEnum):
    """The CloudEvents Pub/Sub binding modes."""

    STRUCTURED = "structured"  # message data is the JSON CloudEvent
    BINARY = "binary"  # ce-* attributes, message data is the event data


@dataclass(frozen=True)
class ProviderEvent:
    """A provider's CloudEvent as it came off its message, the envelope checked."""

    attributes: Mapping[str, Any]  # context attributes and extensions, 'dataschema' normalised
    data: Any
    mode: BindingMode
    legacy_dataschema: bool = False


# ---- to a message: a reporter's side ------------------------------------------------------
def to_structured(event: CloudEvent) -> tuple[bytes, dict[str, str]]:
    """The message (data, attributes) carrying ``event`` as one JSON document."""
    return conversion.to_json(event), {CONTENT_TYPE_KEY: STRUCTURED_CONTENT_TYPE}


def to_binary(event: CloudEvent) -> tuple[bytes, dict[str, str]]:
    """The message (data, attributes) carrying ``event``'s context as ``ce-*`` attributes, its data as the body."""
    headers, body = conversion.to_binary(event)
    attributes = {k.lower(): v for k, v in headers.items()}
    attributes[CONTENT_TYPE_KEY] = attributes.pop(CONTENT_TYPE_KEY, JSON_CONTENT_TYPE)
    return body, attributes


def to_message(event: CloudEvent, mode: BindingMode | str = BindingMode.STRUCTURED) -> tuple[bytes, dict[str, str]]:
    """The message (data, attributes) for ``event`` in the given binding mode."""
    if mode == BindingMode.STRUCTURED:
        return to_structured(event)
    if mode == BindingMode.BINARY:
        return to_binary(event)
    raise ValueError(f"mode must be structured or binary, not {mode!r}")


# ---- from a message: ingest's side ----------------------------------------------------------
def mode_of(attributes: Mapping[str, str]) -> BindingMode:
    """The mode of a message, as the Pub/Sub binding chooses it.

    Attribute names are compared case-insensitively (the Go SDK writes ``Content-Type``,
    the binding ``content-type``). A ``content-type`` of a CloudEvents format
    (``application/cloudevents...``) means structured, even with ``ce-*`` attributes
    beside it; otherwise ``ce-*`` attributes mean binary. With neither, the body is the
    event (the Go SDK's structured writes set no attribute at all).
    """
    lowered = {k.lower(): v for k, v in attributes.items()}
    if lowered.get(CONTENT_TYPE_KEY, "").strip().lower().startswith("application/cloudevents"):
        return BindingMode.STRUCTURED
    if any(k.startswith(CE_PREFIX) for k in lowered):
        return BindingMode.BINARY
    return BindingMode.STRUCTURED


def binding_attributes(attributes: Mapping[str, str]) -> dict[str, str]:
    """The attributes of the binding (``ce-*``, ``content-type``), lower-cased; no other."""
    return {k.lower(): v for k, v in attributes.items()
            if k.lower().startswith(CE_PREFIX) or k.lower() == CONTENT_TYPE_KEY}


def from_message(message: PubSubMessage, max_bytes: int) -> ProviderEvent:
    """The event ``message`` carries, in the mode its attributes say; Rejected when it is over ``max_bytes``
    or carries no CloudEvent."""
    if message.size > max_bytes:
        raise Rejected(Reason.OVERSIZE, f"event is {message.size} bytes, the limit is {max_bytes} bytes",
                       {"size": message.size, "limit": max_bytes})
    if mode_of(message.attributes) is BindingMode.BINARY:
        return from_binary(message)
    return from_structured(message)


def from_binary(message: PubSubMessage) -> ProviderEvent:
    """The event whose context is ``message``'s ``ce-*`` attributes and whose data is its body."""
    lowered = {k.lower(): v for k, v in message.attributes.items()}
    attributes: dict[str, Any] = {k[len(CE_PREFIX):]: v for k, v in lowered.items() if k.startswith(CE_PREFIX)}
    if CONTENT_TYPE_KEY in lowered:
        attributes["datacontenttype"] = lowered[CONTENT_TYPE_KEY]
    return _event(attributes, None, message.data, BindingMode.BINARY)


def from_structured(message: PubSubMessage) -> ProviderEvent:
    """The event that ``message``'s data is, as one JSON document (its data inline or ``data_base64``)."""
    doc = _parse_json(message.data, "message data", "")
    if not isinstance(doc, dict):
        raise Rejected(Reason.NOT_A_CLOUDEVENT, "message data is JSON but not a CloudEvent object",
                       {"missing": ["specversion", "id", "source", "type"], "invalid": []})
    attributes = {k: v for k, v in doc.items() if k not in ("data", "data_base64")}
    raw_data = _base64_data(doc["data_base64"]) if "data_base64" in doc else None
    return _event(attributes, doc.get("data"), raw_data, BindingMode.STRUCTURED)


def _base64_data(value: Any) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise Rejected(Reason.MALFORMED_JSON, f"data_base64 is not base64: {exc}", {"where": "data_base64"}) from exc


def _event(attributes: dict[str, Any], data: Any, raw_data: bytes | None, mode: BindingMode) -> ProviderEvent:
    """The event, its envelope checked and normalised (``dataSchema``, ``time``), its raw data parsed as JSON."""
    _check_envelope(attributes)
    legacy = LEGACY_DATASCHEMA in attributes
    if legacy:
        attributes.setdefault("dataschema", attributes.pop(LEGACY_DATASCHEMA))
    if "time" in attributes:
        try:
            attributes["time"] = timeutil.canonical(attributes["time"])
        except ValueError as exc:
            raise Rejected(Reason.NOT_A_CLOUDEVENT, f"time: {exc}", {"missing": [], "invalid": ["time"]}) from exc
    if raw_data is not None:
        if not _is_json_content_type(attributes.get("datacontenttype")):
            raise Rejected(Reason.MALFORMED_JSON,
                           f"datacontenttype {attributes['datacontenttype']!r} is not JSON; status data must be JSON",
                           {"where": "datacontenttype"})
        data = _parse_json(raw_data, "event data", "/data") if raw_data else None
    return ProviderEvent(attributes, data, mode, legacy)


def _parse_json(raw: bytes, where: str, pointer: str) -> Any:
    """Parsed JSON, no deeper than ``MAX_EVENT_DEPTH``: checked here, before anything recursive looks at it."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise Rejected(Reason.MALFORMED_JSON, f"{where} is not valid JSON: {exc}",
                       {"where": where, "error": str(exc)}) from exc
    breach = limits.too_deep(value, limits.MAX_EVENT_DEPTH, pointer)
    if breach:
        raise Rejected(Reason.SCHEMA_INVALID, f"{breach.path}: {breach.message}",
                       {"path": breach.path, "rule": breach.rule, "limit": limits.MAX_EVENT_DEPTH})
    return value


def _is_json_content_type(value: str | None) -> bool:
    if not value:
        return True
    media = value.split(";", 1)[0].strip().lower()
    return media in _JSON_TYPES or media.endswith("+json")


def _check_envelope(attributes: Mapping[str, Any]) -> None:
    envelope = registry().get(ENVELOPE_URI)
    if envelope.is_valid(attributes):
        return
    violations = envelope.violations(attributes)
    missing = sorted({v.path.lstrip("/") for v in violations if v.rule == "required"})
    invalid = sorted({(v.path.lstrip("/") or str(v.value)) for v in violations if v.rule != "required"})
    parts = []
    if missing:
        parts.append("missing " + ", ".join(missing))
    if invalid:
        parts.append("invalid " + ", ".join(invalid))
    version = attributes.get("specversion")
    if "specversion" in invalid and isinstance(version, str) and version.lower().lstrip("v") == "1.0":
        # the Cloud Native Events spec's own CloudEvents example writes "v1.0"
        parts.append(f"specversion is {version!r}: CloudEvents 1.0 writes \"1.0\" (no 'v')")
    raise Rejected(Reason.NOT_A_CLOUDEVENT, "not a CloudEvents 1.0 event: " + "; ".join(parts),
                   {"missing": missing, "invalid": invalid, "violations": [v.to_dict() for v in violations[:10]]})
