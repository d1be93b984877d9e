"""RFC 3339 timestamps: parse leniently (any fraction length), store canonically.

Stored form is ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` in UTC, so stored strings sort
in time order and compare exactly.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$"
)


def parse(value: str) -> datetime:
    """Parse an RFC 3339 timestamp into an aware UTC datetime (µs precision)."""
    m = _RFC3339.match(value)
    if not m:
        raise ValueError(f"not an RFC 3339 timestamp: {value!r}")
    year, month, day, hour, minute, second, frac, tz = m.groups()
    micro = int((frac or "0")[:6].ljust(6, "0"))
    if tz in ("Z", "z"):
        offset = timezone.utc
    else:
        sign = 1 if tz[0] == "+" else -1
        offset = timezone(sign * timedelta(hours=int(tz[1:3]), minutes=int(tz[4:6])))
    try:
        dt = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micro, offset)
        return dt.astimezone(timezone.utc)
    except OverflowError as exc:  # 0001-01-01T00:00:00+01:00 is year 0 in UTC
        raise ValueError(f"timestamp out of range once in UTC: {value!r}") from exc


def format(dt: datetime) -> str:  # noqa: A001 - mirrors datetime.isoformat naming
    """Canonical UTC form with microseconds and a Z suffix; the year always has 4 digits (strftime's
    ``%Y`` drops the zeros of a year below 1000, which would break the sort order)."""
    if dt.tzinfo is not timezone.utc:
        dt = dt.astimezone(timezone.utc)
    return (f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}."
            f"{dt.microsecond:06d}Z")


def canonical(value: str) -> str:
    """``value`` in the canonical form. A UTC timestamp (``Z``), the common case, is checked and
    rewritten as text, without a round trip through datetime and back."""
    m = _RFC3339.match(value)
    if m is None or m.group(8) not in ("Z", "z"):
        return format(parse(value))
    year, month, day, hour, minute, second, frac = m.group(1, 2, 3, 4, 5, 6, 7)
    datetime(int(year), int(month), int(day), int(hour), int(minute), int(second))  # a real date: else ValueError
    micro = (frac or "")[:6].ljust(6, "0")
    return f"{year}-{month}-{day}T{hour}:{minute}:{second}.{micro}Z"


def now() -> datetime:
    return datetime.now(timezone.utc)


def now_str() -> str:
    return format(now())


def duration_seconds(value: str | int) -> int:
    """A duration as the topology writes it (``'3600s'``, or a number of seconds) -> seconds."""
    text = str(value).strip()
    return int(text[:-1]) if text.endswith("s") else int(text)
