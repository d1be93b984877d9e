"""``GET /v1/usage``: billing's usage report over the api (docs/billing.md "Usage over the API").

The same computation as ``dcm-status billing report`` (shared/state/usage/report.py: the transition sets, their
billable intervals, the rows), which is its client when given ``--api URL``. What is here: the request's
parameters checked (``UsageRequest.parse``, pure), the rows paged by a cursor (``page``, pure), and the
usage each instance keeps for a while (``Kept``), so that a dashboard left open, or paged through, does not
read every transition again (docs/cost.md "Usage and trends").

- ``from``, ``to``: UTC days (``YYYY-MM-DD``), the window ``[from, to)``, counted up to now; ``to`` defaults to
  tomorrow (today included); at most ``MAX_DAYS`` days.
- ``by``: ``tenant`` | ``provider`` | ``type`` | ``resource`` (the row's column: tenant, provider,
  resourceType, resource); rows per UTC day.
- ``rates``: the name of a rate card the deployment configured (DCM_RATE_CARDS), never a file.
- ``format=csv`` or ``Accept: text/csv``: every row as CSV (RFC 4180, a header row); JSON is paged
  (``pageSize``, ``pageToken``).
"""

from __future__ import annotations

import enum
import re
import threading
import time
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, Callable, Mapping, Sequence

from dcm_status_contracts import tokens
from dcm_status_contracts.errors import InvalidRequest

from shared.api.params import Params
from shared.state.usage.intervals import day_start
from shared.state.usage.rates import RateCard
from shared.state.usage.report import ResourceUsage

MAX_DAYS = 92  # a quarter: a longer window is refused (400), each call reads every selected transition
DEFAULT_PAGE = 500
MAX_PAGE = 5000
KEEP_SECONDS = 300.0  # an instance keeps a window's computed usage this long (docs/cost.md)
KEPT_WINDOWS = 8  # ... for this many windows at most (the oldest goes first)
DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
PARAMETERS = ("from", "to", "by", "rates", "format", "pageSize", "pageToken")
CSV_TYPE = "text/csv"


class By(enum.Enum):
    """What a row groups by, and the column it is in."""

    TENANT = "tenant"
    PROVIDER = "provider"
    TYPE = "type"
    RESOURCE = "resource"

    @property
    def column(self) -> str:
        return "resourceType" if self is By.TYPE else self.value


class Format(enum.Enum):
    JSON = "json"
    CSV = "csv"


def _day(p: Params, name: str, default: date | None) -> date:
    text = p.text(name, 10)
    if text is None:
        if default is None:
            raise InvalidRequest(f"{name}: required, a UTC day (YYYY-MM-DD)", name)
        return default
    try:
        if not DAY.fullmatch(text):
            raise ValueError(text)
        return date.fromisoformat(text)
    except ValueError:
        raise InvalidRequest(f"{name}: expected a UTC day (YYYY-MM-DD), got {text[:40]!r}", name) from None


@dataclass(frozen=True)
class UsageRequest:
    start: date
    end: date  # exclusive
    by: By
    rates: str | None
    format: Format
    page_size: int
    page_token: str | None

    @classmethod
    def parse(cls, p: Params, accept: str, today: date, cards: Mapping[str, RateCard]) -> "UsageRequest":
        """The request's parameters, checked (InvalidRequest, a 400 with the parameter at fault)."""
        start = _day(p, "from", None)
        end = _day(p, "to", today + timedelta(days=1))
        if end <= start:
            raise InvalidRequest(f"to: must be after from (the window is [from, to), to excluded), got "
                                 f"from={start} to={end}", "to")
        if (end - start).days > MAX_DAYS:
            raise InvalidRequest(f"to: at most {MAX_DAYS} days from from (asked {(end - start).days}); ask "
                                 "several windows", "to")
        if start > today:
            raise InvalidRequest(f"from: {start} is in the future (today is {today}): there is no usage yet", "from")
        by_text = p.choice("by", tuple(b.value for b in By), By.TYPE.value)
        rates = p.text("rates", 40)
        if rates is not None and rates not in cards:
            known = ", ".join(sorted(cards)) or "none is configured (DCM_RATE_CARDS)"
            raise InvalidRequest(f"rates: no rate card {rates[:40]!r} on this deployment; known: {known}", "rates")
        fmt_text = p.choice("format", tuple(f.value for f in Format),
                            Format.CSV.value if _wants_csv(accept) else Format.JSON.value)
        fmt = Format(fmt_text)
        size = p.integer("pageSize", DEFAULT_PAGE, 1, MAX_PAGE)
        token = p.text("pageToken", 512)
        if fmt is Format.CSV and token is not None:  # (a pageSize is ignored: every row)
            raise InvalidRequest("pageToken: CSV answers every row at once; page the JSON", "pageToken")
        return cls(start, end, By(by_text), rates, fmt, size, token)

    @property
    def window(self) -> tuple[datetime, datetime]:
        return day_start(self.start), day_start(self.end)


def _wants_csv(accept: str) -> bool:
    """``Accept: text/csv`` (with no JSON preferred before it)."""
    types = [part.split(";")[0].strip().lower() for part in accept.split(",")]
    return CSV_TYPE in types and ("application/json" not in types or types.index(CSV_TYPE) <
                                  types.index("application/json"))


def _sort_key(row: Mapping[str, Any], column: str) -> tuple[str, str]:
    value = row.get(column)
    return (row["day"], "" if value is None else str(value))


def page(rows: Sequence[Mapping[str, Any]], by: By, size: int, token: str | None
         ) -> tuple[list[Mapping[str, Any]], str | None]:
    """One page of ``rows`` (sorted by day, then the group's value, as ``aggregate`` sorts them) after the row
    ``token`` names, and the next page's token (None on the last). The token names a row by its day and
    value, not by its position: a page read after the usage was computed again starts where it should."""
    after: tuple[str, str] | None = None
    if token is not None:
        try:
            got = tokens.from_token(token)
        except ValueError:
            got = None
        if (not isinstance(got, list) or len(got) != 4 or got[0] != "usage" or got[1] != by.value
                or not all(isinstance(v, str) for v in got)):
            raise InvalidRequest("pageToken: not a page token of this list (by changed?)", "pageToken")
        after = (got[2], got[3])
    start = 0
    if after is not None:
        start = next((i for i, r in enumerate(rows) if _sort_key(r, by.column) > after), len(rows))
    chunk = list(rows[start:start + size])
    more = start + size < len(rows)
    next_token = tokens.to_token(["usage", by.value, *_sort_key(chunk[-1], by.column)]) if more and chunk else None
    return chunk, next_token


@dataclass(frozen=True)
class Computed:
    usages: tuple[ResourceUsage, ...]
    counted_until: datetime
    at: float  # monotonic


class Kept:
    """The usage of a window, computed at most once per ``KEEP_SECONDS`` per instance (one computation at a
    time per window: concurrent callers wait for it), for ``KEPT_WINDOWS`` windows at most. ``compute(start,
    end)`` returns the resources' usage and the time it was counted until."""

    def __init__(self, compute: Callable[[datetime, datetime], tuple[list[ResourceUsage], datetime]],
                 keep_seconds: float = KEEP_SECONDS, windows: int = KEPT_WINDOWS,
                 monotonic: Callable[[], float] = time.monotonic):
        self.compute = compute
        self.keep_seconds = keep_seconds
        self.windows = windows
        self._monotonic = monotonic
        self._kept: dict[tuple[datetime, datetime], Computed] = {}
        self._locks: dict[tuple[datetime, datetime], threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, start: datetime, end: datetime) -> Computed:
        key = (start, end)
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            kept = self._kept.get(key)
            if kept is not None and self._monotonic() - kept.at < self.keep_seconds:
                return kept
            usages, until = self.compute(start, end)
            got = Computed(tuple(usages), until, self._monotonic())
            with self._guard:
                self._kept[key] = got
                for old in sorted(self._kept, key=lambda k: self._kept[k].at)[:-self.windows]:
                    self._kept.pop(old, None)
                    self._locks.pop(old, None)
            return got
