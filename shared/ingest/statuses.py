"""Map a provider's status string onto its resource type's generic enum.

Case and separators are forgiven ("Running", "in-use"); aliases come from the
schema (vm: ERROR -> FAILED). Anything else becomes UNKNOWN, with the raw value
kept and flagged: the proposal's conservative default, never a dropped event.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shared.contracts.schemas import StatusSchema

UNKNOWN = "UNKNOWN"
_SEPARATORS = re.compile(r"[\s\-]+")


@dataclass(frozen=True)
class NormalizedStatus:
    status: str
    raw: str
    recognized: bool


def normalize(schema: StatusSchema, raw: str) -> NormalizedStatus:
    token = _SEPARATORS.sub("_", raw.strip()).upper()
    if token in schema.statuses:
        return NormalizedStatus(token, raw, True)
    alias = schema.aliases.get(token) or schema.aliases.get(token.replace("_", ""))
    if alias:
        return NormalizedStatus(alias, raw, True)
    return NormalizedStatus(UNKNOWN, raw, False)
