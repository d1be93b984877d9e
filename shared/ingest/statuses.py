"""Map a provider's status string onto its resource type's generic enum.

In order: the provider's own vocabulary, when its profile declares one
(KubeVirt's "Scheduling" -> PROVISIONING); the generic enum of the type's
*current* schema, case and separators forgiven ("Running", "in-use"); that
schema's aliases, which include every status of the type's earlier versions
(cluster v1 CREATING -> PROGRESSING). So one resource type is stored in one
vocabulary whatever version a provider speaks. Anything else becomes UNKNOWN,
with the raw value kept and flagged: the proposal's conservative default,
never a dropped event.
"""

from __future__ import annotations

from dataclasses import dataclass

from dcm_status_contracts.model import CommonStatus
from dcm_status_contracts.schemas import StatusSchema, Vocabulary, status_token


@dataclass(frozen=True)
class NormalizedStatus:
    status: str
    raw: str
    recognized: bool


def normalize_status(schema: StatusSchema, raw: str, vocabulary: Vocabulary | None = None) -> NormalizedStatus:
    translated = vocabulary.translate(schema.resource_type, raw) if vocabulary else None
    if translated:
        return NormalizedStatus(translated, raw, True)
    token = status_token(raw)
    if token in schema.statuses:
        return NormalizedStatus(token, raw, True)
    alias = schema.aliases.get(token) or schema.aliases.get(token.replace("_", ""))
    if alias:
        return NormalizedStatus(alias, raw, True)
    return NormalizedStatus(CommonStatus.UNKNOWN.value, raw, False)
