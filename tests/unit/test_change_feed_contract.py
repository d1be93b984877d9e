"""The change feed's contract: opaque cursors, the settle horizon, retention, the item shape."""

from __future__ import annotations

from datetime import timedelta

import pytest
from dcm_status_contracts import change_feed, timeutil
from dcm_status_contracts.change_feed import END, Cursor
from dcm_status_contracts.errors import Gone, InvalidRequest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_change_event_contract import build

T = timeutil.parse("2026-03-01T10:00:00.123456Z")


@given(st.datetimes(min_value=T.replace(tzinfo=None) - timedelta(days=3650), timezones=st.just(T.tzinfo)),
       st.text(alphabet="0123456789abcdef", min_size=64, max_size=64))
def test_a_cursor_round_trips_to_the_microsecond(at, entry_id):
    assert Cursor.decode(Cursor(at, entry_id).encode()) == Cursor(at, entry_id)


def test_a_cursor_after_a_time_is_past_every_entry_stamped_then():
    assert Cursor.after(T) > Cursor(T, "f" * 64) > Cursor(T, "0" * 64)
    assert END > "f" * 64  # Firestore orders document ids by their bytes, as Python orders str


@pytest.mark.parametrize("text", ["", "%%%", "bm9wZQ", "W10", "WyJ4IiwieSJd", "x" * 600,
                                  Cursor(T, "a").encode()[:-3]])
def test_anything_but_a_cursor_this_feed_gave_is_a_bad_request(text):
    with pytest.raises(InvalidRequest) as err:
        Cursor.decode(text, "Last-Event-ID")
    assert err.value.parameter == "Last-Event-ID" and err.value.status == 400


def test_the_horizon_is_settle_seconds_before_the_read():
    assert change_feed.horizon(T, 2.0) == T - timedelta(seconds=2)


def test_a_cursor_older_than_the_retention_is_gone():
    change_feed.check_retained(Cursor(T - timedelta(days=7) + timedelta(seconds=1), "a"), T, 7)
    with pytest.raises(Gone) as err:
        change_feed.check_retained(Cursor(T - timedelta(days=7, seconds=1), "a"), T, 7)
    assert err.value.status == 410 and "/v1/resources" in err.value.detail


@pytest.mark.parametrize("kind", ["created", "changed", "late"])
def test_an_item_is_the_deltacloud_shape_of_the_stored_change_event(kind):
    event = build(kind)
    item = change_feed.item("e" * 64, T, event.to_record())
    assert item["id"] == event.event_id and Cursor.decode(item["cursor"]) == Cursor(T, "e" * 64)
    assert item["committedAt"] == "2026-03-01T10:00:00.123456Z" and item["late"] is (kind == "late")
    assert all(set(c) == {"attribute", "old", "new"} for c in item["changes"])
    assert item["resource"]["status"] == item["newStatus"] and item["key"] == "aws/vm/i-0abc123"
