"""Which resource an event is about: provider, resource type and id.

Accepted forms (the proposal's subject hierarchy, then the later upstream form):

- ``type = dcm.providers.{provider}.{resourceType}.instances.{id}.status``
- ``type = dcm.providers.{provider}.{resourceType}.{id}.status``
- ``type = dcm.status.{resourceType}``, ``source = dcm/providers/{provider}``,
  resource id in ``subject`` (preferred) or ``data.id``.

An optional ``resourcetype`` extension attribute must agree with the type.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from shared.contracts.errors import Reason, Rejected
from shared.contracts.model import ResourceKey

_LEGACY_PREFIX = "dcm.providers."
_LEGACY_SUFFIX = ".status"
_UPSTREAM_PREFIX = "dcm.status."
_UPSTREAM_SOURCE = re.compile(r"^/?dcm/providers/([^/]+)(?:/.*)?$")
PROVIDER_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
MAX_ID_LENGTH = 512


def _invalid(message: str, **detail: Any) -> Rejected:
    return Rejected(Reason.INVALID_IDENTITY, message, detail)


def resolve(attributes: Mapping[str, Any], data: Mapping[str, Any]) -> ResourceKey:
    """The ResourceKey an event reports on, or Rejected(invalid_identity)."""
    ce_type = attributes["type"]
    if ce_type.startswith(_LEGACY_PREFIX) and ce_type.endswith(_LEGACY_SUFFIX):
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
        match = _UPSTREAM_SOURCE.match(attributes["source"])
        if not match:
            raise _invalid("with type dcm.status.{resourceType}, source must be dcm/providers/{provider}",
                           attribute="source", value=attributes["source"])
        provider = match.group(1)
        resource_id = attributes.get("subject") or data.get("id") or ""
        if not resource_id:
            raise _invalid("with type dcm.status.{resourceType}, the resource id goes in subject or data.id",
                           attribute="subject", value=None)
    else:
        raise _invalid(
            "type must be dcm.providers.{provider}.{resourceType}[.instances].{id}.status "
            "or dcm.status.{resourceType}", attribute="type", value=ce_type)

    if not PROVIDER_NAME.match(provider):
        raise _invalid("provider name must be lowercase letters, digits and '-'", attribute="provider",
                       value=provider)
    if not resource_type:
        raise _invalid("resource type is empty", attribute="type", value=ce_type)
    if not resource_id or len(resource_id) > MAX_ID_LENGTH:
        raise _invalid(f"resource id must have 1 to {MAX_ID_LENGTH} characters", attribute="id",
                       value=resource_id[:80])
    declared = attributes.get("resourcetype")
    if declared and declared != resource_type:
        raise _invalid("resourcetype attribute disagrees with the type", attribute="resourcetype",
                       value=declared, expected=resource_type)
    return ResourceKey(provider, resource_type, resource_id)
