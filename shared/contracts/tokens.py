"""Opaque tokens the API hands out (change-feed cursors, page tokens): ``base64url(JSON)``,
unpadded. Only a value the API gave decodes to something it accepts. No I/O."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson


def to_token(value: Any) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).decode().rstrip("=")


def from_token(text: str) -> Any:
    """The value ``to_token`` made, or ValueError."""
    try:
        return orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, orjson.JSONDecodeError) as exc:
        raise ValueError(f"not a token: {exc}") from exc
