"""Which resource an event is about: provider, resource type and id.

Accepted forms, newest first:

- the current upstream form (dcm-project/enhancements, service-provider status
  reporting): ``type = dcm.status.{resourceType}``, the instance id in
  ``data.id``; ``subject`` is the messaging subject ``dcm.{serviceType}``, never
  a resource. The provider is the one whose ingress topic the event arrived on
  (``source`` is recorded, and checked against the provider by ingest). An id in
  ``subject`` (an earlier draft) is still read when ``data.id`` is absent and
  the subject is not a service type.
- the proposal's January forms: ``type = dcm.providers.{provider}.{resourceType}[.instances].{id}.status``.

An optional ``resourcetype`` extension attribute must agree with the type.

Over NATS the messaging subject names the type too (``dcm.{type}``, one token after ``dcm.``, the
control-plane's status filter ``dcm.*``): the ingress carries the subject the provider published on as
the message attribute ``nats-subject`` (``TRANSPORT_SUBJECT``). When the CloudEvent's type names no
resource type of ours (the upstream e2e suite's test publisher sends ``dcm.status.updated``), the type
is the subject's (``subject_type``; ingest decides when, ``status_report.check``). Trusting it gains a
provider nothing: the provider is still the one whose topic the event is on, and any provider may
already name any type with ``dcm.status.{type}`` (docs/security.md, "The NATS subject").
"""

from __future__ import annotations

import re
from typing import Any, Collection, Mapping

from .errors import Reason, Rejected
from .limits import FIRESTORE_MAX_DOCUMENT_ID_BYTES, document_id_fits
from .model import ResourceKey

_LEGACY_PREFIX = "dcm.providers."
_LEGACY_SUFFIX = ".status"
_UPSTREAM_PREFIX = "dcm.status."
PLATFORM_SOURCE = "dcm/platform/"  # updates the platform synthesises (reconciliation, freshness): never a provider's
SOURCE_PROVIDER = re.compile(r"^/?dcm/providers/([^/]+)(?:/.*)?$")
SERVICE_TYPE_SUBJECT = re.compile(r"^dcm\.[A-Za-z0-9_-]+$")  # a messaging subject such as dcm.vm, not an id
TRANSPORT_SUBJECT = "nats-subject"  # the NATS subject a provider published on, as the ingress forwards it
# One rule for a provider name, here, in the CLI and in Terraform (terraform/variables.tf, checked by
# tests/deploy): it names a topic, a subscription and a service account ({prefix}-pub-{provider}, at most
# 30 characters, which terraform/iam.tf checks with the prefix).
PROVIDER_NAME_PATTERN = r"^[a-z][a-z0-9-]{0,20}[a-z0-9]$"
PROVIDER_NAME = re.compile(PROVIDER_NAME_PATTERN)
PROVIDER_RULE = "2-22 characters: a lowercase letter, then lowercase letters, digits or hyphens, not ending in '-'"
# Names the platform's own NATS users hold (infra/nats_accounts.py: the ingress's user, the control-plane's).
# A provider's NATS user is its name, and nats-server refuses a configuration that names one user twice
# (`Duplicate user "platform" detected`) and exits: every provider would be cut off. Refused as provider names
# here, by the CLI, by topology loading and by Terraform (terraform/variables.tf, terraform/pubsub.tf).
RESERVED_PROVIDER_NAMES = ("platform", "control-plane")


def provider_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a provider's name (one sentence), or None when it can."""
    if not PROVIDER_NAME.match(name):
        return f"invalid provider name {name!r} ({PROVIDER_RULE})"
    if name in RESERVED_PROVIDER_NAMES:
        return (f"provider name {name!r} is reserved: the platform's own NATS users are named "
                f"{', '.join(RESERVED_PROVIDER_NAMES)} (docs/nats.md)")
    return None
MAX_ID_LENGTH = 512


def _invalid(message: str, **detail: Any) -> Rejected:
    return Rejected(Reason.INVALID_IDENTITY, message, detail)


def provider_named_by(source: str) -> str | None:
    """The provider a ``dcm/providers/{provider}`` source names, or None for any other source."""
    match = SOURCE_PROVIDER.match(source)
    return match.group(1) if match else None


def subject_type(subject: str | None) -> str | None:
    """The resource type a messaging subject names (``dcm.container`` -> ``container``; one token after
    ``dcm.`` only, as the control-plane's ``dcm.*`` filter reads it), or None (``dcm.agents.health``)."""
    return subject[len("dcm."):] if subject and SERVICE_TYPE_SUBJECT.match(subject) else None


def names_a_type(ce_type: str, known: Collection[str]) -> bool:
    """Does the CloudEvent type itself name one of the ``known`` resource types (either form)?"""
    if ce_type.startswith(_LEGACY_PREFIX) and ce_type.endswith(_LEGACY_SUFFIX):
        return True  # the January form always names one (an unknown one is refused as such)
    return ce_type.startswith(_UPSTREAM_PREFIX) and ce_type[len(_UPSTREAM_PREFIX):] in known


def _upstream_id(attributes: Mapping[str, Any], data: Mapping[str, Any]) -> str:
    if "id" in data:
        if not isinstance(data["id"], str):
            raise Rejected(Reason.SCHEMA_INVALID, f"/data/id: {data['id']!r} is not of type 'string'",
                           {"path": "/data/id", "rule": "type", "value": data["id"]})
        return data["id"]
    subject = attributes.get("subject")
    if subject and not SERVICE_TYPE_SUBJECT.match(subject):
        return subject
    raise _invalid("with type dcm.status.{resourceType}, the resource id goes in data.id",
                   attribute="data.id", value=None, subject=subject)


def _upstream_provider(attributes: Mapping[str, Any], topic_provider: str | None) -> str:
    provider = topic_provider or provider_named_by(attributes["source"]) or ""
    if not provider:
        raise _invalid("with type dcm.status.{resourceType}, the provider is the ingress topic's "
                       "(or source dcm/providers/{provider})", attribute="source", value=attributes["source"])
    return provider


def resolve(attributes: Mapping[str, Any], data: Mapping[str, Any], topic_provider: str | None = None,
            transport_type: str | None = None) -> ResourceKey:
    """The ResourceKey an event reports on, or Rejected (invalid_identity; schema_invalid for a non-string id).

    ``topic_provider``: the provider whose ingress topic the event arrived on, if any. ``transport_type``:
    the resource type the messaging subject names, given when the CloudEvent's type names none of ours
    (``names_a_type``): the event is then read in the upstream form with that type, whatever its type says.
    """
    ce_type = attributes["type"]
    if transport_type:
        resource_type = transport_type
        provider = _upstream_provider(attributes, topic_provider)
        resource_id = _upstream_id(attributes, data)
    elif ce_type.startswith(_LEGACY_PREFIX) and ce_type.endswith(_LEGACY_SUFFIX):
        parts = ce_type[len(_LEGACY_PREFIX): -len(_LEGACY_SUFFIX)].split(".")
        if len(parts) < 3:
            raise _invalid(
                "type must be dcm.providers.{provider}.{resourceType}[.instances].{id}.status",
                attribute="type", value=ce_type)
        provider, resource_type, rest = parts[0], parts[1], parts[2:]
        if rest[0] == "instances" and len(rest) > 1:
            rest = rest[1:]
        resource_id = ".".join(rest)
    elif ce_type.startswith(_UPSTREAM_PREFIX):
        resource_type = ce_type[len(_UPSTREAM_PREFIX):]
        provider = _upstream_provider(attributes, topic_provider)
        resource_id = _upstream_id(attributes, data)
    else:
        raise _invalid(
            "type must be dcm.status.{resourceType} or "
            "dcm.providers.{provider}.{resourceType}[.instances].{id}.status", attribute="type", value=ce_type)

    if not PROVIDER_NAME.match(provider):
        raise _invalid("provider name must be lowercase letters, digits and '-'", attribute="provider",
                       value=provider)
    if not resource_type:
        raise _invalid("resource type is empty", attribute="type", value=ce_type)
    if not resource_id or len(resource_id) > MAX_ID_LENGTH:
        raise _invalid(f"resource id must have 1 to {MAX_ID_LENGTH} characters", attribute="id",
                       value=resource_id[:80])
    key = ResourceKey(provider, resource_type, resource_id)
    if not document_id_fits(key.doc_id):
        raise _invalid(f"resource id is too long to store: its document id ({len(key.doc_id.encode())} bytes, "
                       f"percent-encoded) exceeds Firestore's {FIRESTORE_MAX_DOCUMENT_ID_BYTES} bytes",
                       attribute="id", value=resource_id[:80], limit=FIRESTORE_MAX_DOCUMENT_ID_BYTES)
    declared = attributes.get("resourcetype")
    if declared and declared != resource_type:
        raise _invalid("resourcetype attribute disagrees with the type", attribute="resourcetype",
                       value=declared, expected=resource_type)
    return key
