"""Issue 40's pure parts: the deployment's rate cards (DCM_RATE_CARDS), /v1/usage's cursor over its rows, the
trends' buckets."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from dcm_status_contracts.errors import ConfigError, InvalidRequest

from shared.api.usage import By, Kept, page
from shared.runtime import settings
from shared.state import trends

RATES = Path(__file__).resolve().parents[2] / "examples" / "rates.yaml"
CARD = {"currency": "EUR", "resourceTypes": {"vm": 0.05}}


def cards(value: str):
    return settings.from_env({"DCM_PROJECT": "p", "DCM_RATE_CARDS": value}).rate_cards


def test_rate_cards_come_from_terraforms_json_or_the_local_stacks_files():
    assert cards(json.dumps({"list": CARD}))["list"].rate("aws", "vm") == 0.05
    assert cards(f"example={RATES}")["example"].currency
    assert cards("") == {}


@pytest.mark.parametrize("value", [
    json.dumps({"../x": CARD}), json.dumps({"List": CARD}), json.dumps({"a": {"currency": "EUR", "oops": 1}}),
    "{not json", "example", f"example={RATES},example={RATES}", "example=/nonexistent/rates.yaml",
])
def test_a_rate_card_the_api_cannot_price_by_stops_it(value):
    with pytest.raises(ConfigError):
        cards(value)


ROWS = [{"day": d, "tenant": t, "seconds": 1} for d in ("2026-03-01", "2026-03-02") for t in (None, "a", "b")]


def test_the_usage_cursor_names_a_row_not_a_position():
    seen, token = [], None
    while True:
        chunk, token = page(ROWS, By.TENANT, 2, token)
        seen += chunk
        if token is None:
            break
    assert seen == ROWS
    _, token = page(ROWS, By.TENANT, 2, None)
    # the rows computed again with one more before the cursor: the next page still starts after the named row
    again = [ROWS[0], {"day": "2026-03-01", "tenant": "0", "seconds": 1}, *ROWS[1:]]
    assert page(again, By.TENANT, 2, token)[0] == ROWS[2:4]
    with pytest.raises(InvalidRequest):
        page(ROWS, By.PROVIDER, 2, token)  # another by's token


def test_a_window_is_computed_once_while_kept():
    calls, clock = [], [0.0]
    kept = Kept(lambda s, e: (calls.append((s, e)) or [], e), keep_seconds=300, windows=2,
                monotonic=lambda: clock[0])
    a, b, c = (datetime(2026, 3, m, tzinfo=timezone.utc) for m in (1, 2, 3))
    kept.get(a, b), kept.get(a, b)
    assert calls == [(a, b)]
    clock[0] = 301
    kept.get(a, b)
    assert calls == [(a, b), (a, b)]
    kept.get(b, c), kept.get(a, c)  # a third window: the oldest goes
    kept.get(a, b)
    assert len(calls) == 5


def test_trend_buckets_sum_minutes_and_show_quiet_ones_as_zero():
    since = datetime(2026, 3, 1, 10, 0, tzinfo=timezone.utc)
    minute = lambda i, **p: {"minute": (since + timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M:%S.000000Z"),  # noqa
                             "countedUntil": (since + timedelta(minutes=i + 1)).strftime("%Y-%m-%dT%H:%M:%S.000000Z"),
                             "providers": p}
    got = trends.bucket([minute(0, aws={"applied": 2}), minute(3, aws={"deadlettered": 1}, gcp={"stale": 4})],
                        since, since + timedelta(minutes=4), 120)
    assert [(b["applied"], b["deadlettered"], b["stale"], b["received"]) for b in got["buckets"]] == [
        (2, 0, 0, 2), (0, 1, 4, 5)]
    assert got["providers"] == ["aws", "gcp"] and got["before"] is None
