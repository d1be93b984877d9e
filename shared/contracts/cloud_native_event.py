"""Cloud Native Events (O-RAN style) on a provider's ingress topic, both directions.

A CNE producer (the PTP operator's cloud-event-proxy, a Redfish event relay) sends a
CloudEvent whose data is ``{"version": "1.0", "values": [value, ...]}``, each value
``{"resource": address, "dataType": "notification"|"metric", "valueType": ..., "value": ...}``
(docs/cloud-native-events.md). ``resources`` is ingest's side: one ``CneResource`` per address,
every value checked (a precise JSON pointer in the rejection). ``build_event`` is a provider's.

- A ``notification`` ``enumeration`` value is the status of the resource at its address;
  a ``redfish-event`` notification keeps the Redfish payload intact, its status the worst
  ``MessageSeverity`` (or ``Severity``) of its ``Events``. Several notifications for one
  address in one event: the last one is the state.
- A ``metric`` value (a number, or a number as a string, as sdk-go writes it) is kept in the
  resource's ``metrics`` under its ``valueType``. An address with metrics only updates those
  metrics and leaves its status as it is (``metrics_only``).
- The resource type comes from ``ADDRESS_TYPES``, data: the first rule whose value type or
  address segment matches. An address no rule declares is ``unknown_resource_type``.
- The resource id is the address without its leading ``/``: ``cluster/node/n1/sync/sync-status/sync-state``.

Spellings accepted, each seen in a real producer or the spec: ``resource`` or ``ResourceAddress``;
``dataType``, ``data_type`` or (the spec's CloudEvents example) ``type``; ``valueType`` or
``value_type``; data ``version`` 1.0, v1.0 or v1.
"""

from __future__ import annotations

import enum
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping, Sequence

from cloudevents.http import CloudEvent

from . import timeutil
from .errors import Reason, Rejected
from .limits import document_id_fits
from .model import CommonStatus, ResourceKey
from .schemas import StatusSchema, registry
from .pubsub_binding import ProviderEvent
from .status_report import check_provider, validate_data

VERSIONS = frozenset({"1.0", "v1.0", "v1"})
MAX_VALUES = 100  # one event fans out to at most this many resources
MAX_ADDRESS = 400
SPELLINGS = {"resource": ("resource", "ResourceAddress"), "dataType": ("dataType", "data_type", "type"),
             "valueType": ("valueType", "value_type")}
REDFISH = "redfish-event"
SEVERITY_ORDER = {"OK": 0, "WARNING": 1, "CRITICAL": 2}


class DataType(enum.StrEnum):
    NOTIFICATION = "notification"
    METRIC = "metric"


@dataclass(frozen=True)
class AddressRule:
    resource_type: str
    value_type: str | None = None  # the value's valueType, or...
    segment: re.Pattern[str] | None = None  # ...a segment of its address


ADDRESS_TYPES: tuple[AddressRule, ...] = (
    AddressRule("hardware", value_type=REDFISH),
    AddressRule("hardware", segment=re.compile(r"^(redfish|hw|hardware)$", re.IGNORECASE)),
    AddressRule("sync", segment=re.compile(r"^(sync|ptp|gnss|os-clock|clock|sync-status|ptp-status)$", re.IGNORECASE)),
)


@dataclass
class CneResource:
    """What one event says about the resource at one address."""

    address: str
    resource_type: str
    status: str | None = None  # the raw status (None: metrics only)
    value_type: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    redfish: dict[str, Any] | None = None
    index: int = 0  # the last value about it

    @property
    def resource_id(self) -> str:
        return self.address.lstrip("/")

    @property
    def metrics_only(self) -> bool:
        return self.status is None

    def data(self) -> dict[str, Any]:
        """The status data this is stored as (checked against the type's schema like any report's)."""
        specific: dict[str, Any] = {}
        if self.value_type:
            specific["valueType"] = self.value_type
        if self.metrics:
            specific["metrics"] = dict(self.metrics)
        if self.redfish is not None:
            specific["redfish"] = self.redfish
        return {"status": self.status or CommonStatus.UNKNOWN.value, "message": self.message(),
                "resourceSpecific": specific}

    def message(self) -> str:
        if self.status is None:
            return "metrics: " + ", ".join(f"{k} {v:g}" for k, v in self.metrics.items())
        return f"{self.value_type or 'notification'} {self.status}"


def is_cloud_native(event: ProviderEvent) -> bool:
    """A CNE event: data with ``values`` and ``version``, and a type that is not one of DCM's."""
    ce_type = str(event.attributes.get("type", ""))
    data = event.data
    return isinstance(data, dict) and "values" in data and "version" in data and \
        not ce_type.startswith(("dcm.status.", "dcm.providers."))


def _invalid(path: str, message: str, rule: str, value: Any = None) -> Rejected:
    return Rejected(Reason.SCHEMA_INVALID, f"{path}: {message}", {"path": path, "rule": rule, "value": value})


def _field(value: Mapping[str, Any], name: str, path: str) -> Any:
    for spelling in SPELLINGS[name]:
        if spelling in value:
            return value[spelling]
    raise _invalid(f"{path}/{name}", f"'{name}' is a required property", "required")


def _resource_type(address: str, value_type: str) -> str | None:
    segments = [s for s in address.split("/") if s]
    for rule in ADDRESS_TYPES:
        if rule.value_type and rule.value_type == value_type:
            return rule.resource_type
        if rule.segment and any(rule.segment.match(s) for s in segments):
            return rule.resource_type
    return None


def _number(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _invalid(path, f"{value!r} is not a number (a metric is a number, or one as a string)", "type", value)
    try:
        number = float(value)
    except ValueError as exc:
        raise _invalid(path, f"{value!r} is not a number", "type", value) from exc
    if number != number or number in (float("inf"), float("-inf")):
        raise _invalid(path, f"{value!r} is not a finite number", "type", value)
    return number


def _severity(payload: Mapping[str, Any]) -> str:
    """The worst MessageSeverity (or Severity, Redfish before v1.3) of a Redfish event; UNKNOWN if none says."""
    found = [str(e.get("MessageSeverity") or e.get("Severity") or "").upper()
             for e in payload.get("Events") or [] if isinstance(e, Mapping)]
    known = [s for s in found if s in SEVERITY_ORDER]
    return max(known, key=SEVERITY_ORDER.__getitem__) if known else CommonStatus.UNKNOWN.value


def _take(found: dict[str, CneResource], i: int, value: Any) -> None:
    """Value ``i`` of the event, checked, into the resource at its address (``found``)."""
    path = f"/data/values/{i}"
    if not isinstance(value, dict):
        raise _invalid(path, "a value must be an object", "type", type(value).__name__)
    address = _field(value, "resource", path)
    if not isinstance(address, str) or not address.startswith("/") or not address.strip("/") \
            or len(address) > MAX_ADDRESS:
        raise _invalid(f"{path}/resource", f"{str(address)[:80]!r} is not a resource address "
                       f"(/{{cluster}}/{{site}}/{{node}}/{{resource}}, at most {MAX_ADDRESS} characters)",
                       "format", str(address)[:80])
    kind = _field(value, "dataType", path)
    if kind not in (DataType.NOTIFICATION, DataType.METRIC):
        raise _invalid(f"{path}/dataType", f"{kind!r} is not one of ['notification', 'metric']", "enum", kind)
    value_type = _field(value, "valueType", path)
    if not isinstance(value_type, str) or not value_type:
        raise _invalid(f"{path}/valueType", f"{value_type!r} is not a value type", "type", value_type)
    if "value" not in value:
        raise _invalid(f"{path}/value", "'value' is a required property", "required")
    raw = value["value"]
    rtype = _resource_type(address, value_type)
    if rtype is None:
        raise Rejected(Reason.UNKNOWN_RESOURCE_TYPE,
                       f"{path}/resource: no resource type is declared for the address {address!r}",
                       {"path": f"{path}/resource", "address": address, "valueType": value_type})
    resource = found.setdefault(address, CneResource(address, rtype, index=i))
    resource.index = i
    if kind == DataType.METRIC:
        resource.metrics[value_type] = _number(raw, f"{path}/value")
    elif value_type == REDFISH:
        if not isinstance(raw, dict):
            raise _invalid(f"{path}/value", "a redfish-event value is the Redfish event object", "type",
                           type(raw).__name__)
        resource.redfish, resource.status, resource.value_type = raw, _severity(raw), value_type
        resource.resource_type = "hardware"
    else:
        if not isinstance(raw, str) or not raw:
            raise _invalid(f"{path}/value", f"{raw!r} is not an enumeration value (a non-empty string)", "type",
                           raw)
        resource.status, resource.value_type = raw, value_type


def resources(event: ProviderEvent) -> list[CneResource]:
    """The resources a CNE event reports on, in the order of their first value; Rejected with a JSON
    pointer for the first value that breaks the format."""
    data = event.data
    version = data.get("version")
    if not isinstance(version, str) or version not in VERSIONS:
        raise _invalid("/data/version", f"{version!r} is not a Cloud Native Events version ({', '.join(sorted(VERSIONS))})",
                       "enum", version)
    values = data.get("values")
    if not isinstance(values, list) or not values:
        raise _invalid("/data/values", "must be a non-empty array", "type" if not isinstance(values, list) else "minItems")
    if len(values) > MAX_VALUES:
        raise _invalid("/data/values", f"{len(values)} values, at most {MAX_VALUES} per event", "maxItems", len(values))
    found: dict[str, CneResource] = {}
    for i, value in enumerate(values):
        _take(found, i, value)
    return list(found.values())


@dataclass(frozen=True)
class CheckedResource:
    """One resource of a CNE event that passed every check ingest makes."""

    key: ResourceKey
    schema: StatusSchema
    data: dict[str, Any]  # its status data, checked against its type's schema
    resource: CneResource


def check(event: ProviderEvent, topic: str | None, topic_provider: str | None,
          other_names: Collection[str] = ()) -> list[CheckedResource]:
    """Every check ingest makes on a CNE event (the provider SDK makes them too, before publishing):
    the values, the provider's topic, each resource's id and status data. Rejected on the first failure."""
    checked = []
    for resource in resources(event):
        key = ResourceKey(topic_provider or "-", resource.resource_type, resource.resource_id)
        try:
            check_provider(key, topic, topic_provider, event.attributes["source"], other_names)
            if not document_id_fits(key.doc_id):
                raise Rejected(Reason.INVALID_IDENTITY, f"/data/values/{resource.index}/resource: the address is "
                               "too long to store as a document id", {"path": f"/data/values/{resource.index}/resource"})
            schema = registry().current[resource.resource_type]
            checked.append(CheckedResource(key, schema, validate_data(schema, resource.data()), resource))
        except Rejected as exc:
            exc.key = str(key)
            raise
    return checked


# ---- the provider's side ----------------------------------------------------------------
@dataclass(frozen=True)
class Value:
    resource: str  # the address, /{cluster}/{site}/{node}/{resource}
    data_type: DataType | str
    value_type: str
    value: Any

    def to_dict(self) -> dict[str, Any]:
        return {"resource": self.resource, "dataType": str(self.data_type), "valueType": self.value_type,
                "value": self.value}


def build_event(values: Sequence[Value], *, source: str, event_type: str, time: str | None = None,
                event_id: str | None = None, extensions: Mapping[str, Any] | None = None) -> CloudEvent:
    """A CNE CloudEvent (data version 1.0), e.g. a PTP lock-state change:

        build_event([Value("/cluster/node/n1/sync/ptp-status/lock-state", "notification", "enumeration", "LOCKED"),
                     Value("/cluster/node/n1/sync/ptp-status/lock-state", "metric", "decimal64.3", -5)],
                    source="/cluster/node/n1/sync/ptp-status/lock-state",
                    event_type="event.sync.ptp-status.ptp-state-change")
    """
    attributes = {"id": event_id or str(uuid.uuid4()), "source": source, "type": event_type,
                  "time": time or timeutil.now_str(), "datacontenttype": "application/json",
                  **dict(extensions or {})}
    return CloudEvent(attributes, {"version": "1.0", "values": [v.to_dict() for v in values]})
