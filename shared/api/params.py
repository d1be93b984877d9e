"""The query parameters of one api request, checked: each known, given once, of its type and range
(the ``/v1`` routes' and, extended, the DCM routes': shared/api/dcm.py)."""

from __future__ import annotations

from typing import Any

from dcm_status_contracts.errors import InvalidRequest

MAX_TEXT = 256


class Params:
    """The query parameters of one request, checked: each known, given once, of its type and range."""

    def __init__(self, args: Any, allowed: tuple[str, ...]):
        self.args = args
        unknown = sorted(set(args) - set(allowed))
        if unknown:
            raise InvalidRequest(f"unknown parameter {unknown[0]!r}; this endpoint takes: "
                                 f"{', '.join(allowed) or 'none'}", unknown[0])
        for name in args:
            if len(args.getlist(name)) > 1:
                raise InvalidRequest(f"{name}: given more than once", name)

    def text(self, name: str, max_len: int = MAX_TEXT) -> str | None:
        value = self.args.get(name)
        if value is None:
            return None
        if not value or len(value) > max_len:
            raise InvalidRequest(f"{name}: expected 1 to {max_len} characters", name)
        return value

    def integer(self, name: str, default: int | None, low: int, high: int) -> int | None:
        value = self.args.get(name)
        if value is None:
            return default
        if not value.isascii() or not value.isdigit() or not low <= int(value) <= high:
            raise InvalidRequest(f"{name}: expected an integer from {low} to {high}, got {value[:40]!r}", name)
        return int(value)

    def boolean(self, name: str) -> bool:
        value = self.args.get(name)
        if value is None:
            return False
        if value.lower() not in ("true", "false", "1", "0"):
            raise InvalidRequest(f"{name}: expected true or false, got {value[:40]!r}", name)
        return value.lower() in ("true", "1")

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        value = self.args.get(name, default)
        if value not in choices:
            raise InvalidRequest(f"{name}: expected one of {', '.join(choices)}, got {value[:40]!r}", name)
        return value
