"""Attribute-level differences as JSON pointers, as the Deltacloud tracker sends them:
``[{"attribute": "/status", "old": "PENDING", "new": "RUNNING"}]``."""

from __future__ import annotations

from typing import Any, Mapping

_MISSING = object()


def escape(part: Any) -> str:
    """One JSON pointer reference token (RFC 6901): '~' as '~0', '/' as '~1'."""
    return str(part).replace("~", "~0").replace("/", "~1")


def changes(old: Mapping[str, Any] | None, new: Mapping[str, Any], prefix: str = "") -> list[dict[str, Any]]:
    """Every leaf that differs between two JSON objects (added, removed or changed)."""
    old = old or {}
    found: list[dict[str, Any]] = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, _MISSING), new.get(key, _MISSING)
        pointer = f"{prefix}/{escape(key)}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            found.extend(changes(a, b, pointer))
        elif a != b:
            found.append({"attribute": pointer,
                          "old": None if a is _MISSING else a,
                          "new": None if b is _MISSING else b})
    return found
