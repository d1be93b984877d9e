"""``GET /v1/trends``: the sweep's per-minute counts (shared/state/trends.py), bucketed.

- ``since``: RFC 3339, or a duration ago (``6h``, ``90m``, ``2d``); default 6 hours ago; at most ``MAX_DAYS``
  days ago, and before now.
- ``step``: seconds per bucket, a multiple of 60 from 60 to 86,400; default 60; at most ``MAX_BUCKETS``
  buckets (a 400 says how to ask).
- ``provider``: one provider's counts only.

A call reads one document per minute of the window (6 hours: 360 reads): the dashboard asks for the minutes
it does not hold yet (``since`` = its newest complete minute), docs/cost.md "Usage and trends".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from dcm_status_contracts import timeutil
from dcm_status_contracts.errors import InvalidRequest

from shared.api.params import Params
from shared.state.trends import MINUTE, floor_minute

DEFAULT_SINCE = timedelta(hours=6)
MAX_DAYS = 31
MAX_BUCKETS = 1440
AGO = re.compile(r"(\d{1,6})([smhd])")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _since(text: str | None, now: datetime) -> datetime:
    if text is None:
        return now - DEFAULT_SINCE
    ago = AGO.fullmatch(text)
    try:
        at = now - timedelta(seconds=int(ago[1]) * UNITS[ago[2]]) if ago else timeutil.parse(text)
    except (ValueError, OverflowError):
        raise InvalidRequest(f"since: expected RFC 3339 or a duration ago (6h, 90m, 2d), got {text[:40]!r}",
                             "since") from None
    return at


@dataclass(frozen=True)
class TrendsRequest:
    since: datetime  # a minute's start
    until: datetime  # the end of the current minute
    step: int
    provider: str | None

    @classmethod
    def parse(cls, p: Params, now: datetime, retention_days: int = MAX_DAYS) -> "TrendsRequest":
        since = floor_minute(_since(p.text("since", 64), now))
        if since > now:
            raise InvalidRequest("since: in the future", "since")
        if since < now - timedelta(days=MAX_DAYS):
            raise InvalidRequest(f"since: at most {MAX_DAYS} days ago", "since")
        step = p.integer("step", 60, 60, 86400)
        if step % 60:
            raise InvalidRequest(f"step: a multiple of 60 seconds (the trends are per minute), got {step}", "step")
        until = floor_minute(now) + MINUTE
        buckets = -(-int((until - since).total_seconds()) // step)
        if buckets > MAX_BUCKETS:
            raise InvalidRequest(f"step: {buckets} buckets of {step} s since {timeutil.format(since)}; at most "
                                 f"{MAX_BUCKETS}: a larger step or a later since", "step")
        return cls(since, until, step, p.text("provider", 64))
