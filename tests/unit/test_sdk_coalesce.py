"""The provider kit's debounce and rate limit, on a fake clock (sdk/dcm_status_sdk/coalesce.py)."""

from __future__ import annotations

import pytest
from dcm_status_sdk.coalesce import Coalescer, Offer, TokenBucket

WINDOW = 1.0


def coalescer(rate: float | None = None, burst: int = 100, window: float = WINDOW) -> Coalescer[str]:
    return Coalescer(window, TokenBucket(rate, burst), merge=lambda old, new: f"{old}+{new}" if "*" in old else new)


def taken(c: Coalescer[str], now: float) -> tuple[list[Offer[str]], float | None]:
    """What take() gives, each publish ending at once."""
    out, wake = c.take(now)
    for offer in out:
        c.done(offer.key)
    return out, wake


def sent(c: Coalescer[str], now: float) -> list[tuple[str, str]]:
    return [(o.key, o.item) for o in taken(c, now)[0]]


def test_a_quiet_resource_goes_out_at_once():
    c = coalescer()
    c.offer(Offer("vm/a", "RUNNING"), 0.0)
    assert sent(c, 0.0) == [("vm/a", "RUNNING")]
    assert taken(c, 0.0) == ([], None)  # nothing waits: the pump sleeps until the next report


def test_flapping_inside_the_window_sends_only_the_last_state_at_the_window_end():
    c = coalescer()
    c.offer(Offer("vm/a", "RUNNING"), 0.0)
    assert sent(c, 0.0) == [("vm/a", "RUNNING")]
    for i in range(100):  # running -> error -> running, 100 times within 50 ms
        c.offer(Offer("vm/a", "FAILED", terminal=True), 0.01 + i * 0.0005)
        c.offer(Offer("vm/a", "RUNNING"), 0.0102 + i * 0.0005)
    out, wake = taken(c, 0.06)
    assert out == [] and wake == pytest.approx(WINDOW)
    assert sent(c, WINDOW) == [("vm/a", "RUNNING")]
    assert c.replaced == 199


def test_a_resource_reported_all_the_time_is_sent_once_per_window_and_never_later():
    c = coalescer()
    sends, t, first_held = [], 0.0, None
    while t < 5.0:
        c.offer(Offer("vm/a", f"s{t:.2f}"), t)
        first_held = t if first_held is None else first_held
        for _ in taken(c, t)[0]:
            assert t - first_held <= WINDOW + 1e-9  # no report waited longer than the window it opened
            sends.append(t)
            first_held = None
        t = round(t + 0.01, 2)
    assert len(sends) == 5  # 0.0, 1.0, 2.0, 3.0, 4.0
    assert all(b - a >= WINDOW - 1e-9 for a, b in zip(sends, sends[1:]))


def test_a_terminal_state_that_ends_the_burst_is_sent_within_the_window():
    c = coalescer()
    c.offer(Offer("vm/a", "RUNNING"), 0.0)
    taken(c, 0.0)
    c.offer(Offer("vm/a", "STOPPING"), 0.3)
    c.offer(Offer("vm/a", "DELETED", terminal=True), 0.4)
    assert sent(c, 0.99) == []
    assert sent(c, 1.0) == [("vm/a", "DELETED")]


def test_debounce_is_per_resource():
    c = coalescer()
    c.offer(Offer("vm/a", "RUNNING"), 0.0)
    taken(c, 0.0)
    c.offer(Offer("vm/a", "STOPPED"), 0.1)  # a's window is open
    c.offer(Offer("vm/b", "RUNNING"), 0.1)  # b is quiet
    assert sent(c, 0.1) == [("vm/b", "RUNNING")]


def test_no_window_sends_every_report():
    c = coalescer(window=0.0)
    for i in range(3):
        c.offer(Offer("vm/a", f"s{i}"), 0.0)
        assert sent(c, 0.0) == [("vm/a", f"s{i}")]


def test_beyond_the_rate_reports_wait_and_coalesce_per_resource_never_dropped():
    c = coalescer(rate=10, burst=5, window=0.0)
    for i in range(20):
        c.offer(Offer(f"vm/{i}", "RUNNING"), 0.0)
    first, wake = taken(c, 0.0)
    assert len(first) == 5 and wake == pytest.approx(0.1)
    c.offer(Offer("vm/7", "STOPPED"), 0.05)  # waiting in the queue: replaced in place, keeps its turn
    later = []
    t = 0.1
    while len(c):
        later += sent(c, t)
        t = round(t + 0.1, 1)
    assert len(later) == 15 and t == pytest.approx(1.6, abs=0.11)  # one per 0.1 s
    assert ("vm/7", "STOPPED") in later and ("vm/7", "RUNNING") not in later
    assert [k for k, _ in later][:3] == ["vm/5", "vm/6", "vm/7"]


def test_a_terminal_state_is_not_held_by_an_empty_bucket():
    c = coalescer(rate=1, burst=1, window=0.0)
    c.offer(Offer("vm/a", "RUNNING"), 0.0)
    c.offer(Offer("vm/b", "RUNNING"), 0.0)
    c.offer(Offer("vm/c", "DELETED", terminal=True), 0.0)
    c.offer(Offer("vm/d", "FAILED", terminal=True), 0.0)
    assert sent(c, 0.0) == [("vm/c", "DELETED"), ("vm/d", "FAILED")]  # the bucket goes one token into debt
    assert sent(c, 1.0) == []  # ...which the others repay
    assert sent(c, 2.0) == [("vm/a", "RUNNING")] and sent(c, 3.0) == [("vm/b", "RUNNING")]


def test_an_immediate_report_skips_the_window():
    c = coalescer()
    c.offer(Offer("vm/a", "RUNNING"), 0.0)
    taken(c, 0.0)
    c.offer(Offer("vm/a", "STOPPING"), 0.1)
    c.offer(Offer("vm/a", "STOPPED", immediate=True), 0.2)  # a resync snapshot
    assert sent(c, 0.2) == [("vm/a", "STOPPED")]


def test_a_retry_waits_its_back_off_and_gives_way_to_a_newer_report():
    c = coalescer()
    c.offer(Offer("vm/a", "RUNNING"), 0.0)
    c.take(0.0)  # in flight ... and failed:
    c.done("vm/a")
    c.offer(Offer("vm/a", "RUNNING", not_before=0.5), 0.1)
    assert sent(c, 0.4) == [] and sent(c, 0.5) == [("vm/a", "RUNNING")]
    c.offer(Offer("vm/b", "*resync"), 1.0)
    c.take(1.0)  # b in flight; meanwhile a newer report of b comes, then b's publish fails
    c.offer(Offer("vm/b", "STOPPED"), 1.1)
    c.done("vm/b")
    c.offer(Offer("vm/b", "*resync", not_before=1.2), 1.1)
    assert sent(c, 2.0) == [("vm/b", "*resync+STOPPED")]  # the newer state, with the failed one's marker


def test_a_resource_with_a_publish_in_flight_waits_for_it_and_coalesces_meanwhile():
    c = coalescer(window=0.0)
    c.offer(Offer("vm/a", "RUNNING"), 0.0)
    assert [o.item for o in c.take(0.0)[0]] == ["RUNNING"]  # in flight
    c.offer(Offer("vm/a", "STOPPING"), 0.1)
    c.offer(Offer("vm/a", "STOPPED"), 0.2)
    c.offer(Offer("vm/b", "RUNNING"), 0.2)
    assert sent(c, 0.3) == [("vm/b", "RUNNING")]  # a waits: one publish per resource at a time
    c.done("vm/a")
    assert sent(c, 0.4) == [("vm/a", "STOPPED")] and len(c) == 0


def test_a_resource_counts_once_whether_its_report_waits_or_is_in_flight():
    c = coalescer()
    c.offer(Offer("vm/a", "RUNNING"), 0.0)
    c.offer(Offer("vm/b", "RUNNING"), 0.0)
    assert c.resources() == 2
    c.take(0.0)  # both in flight: their publish may fail and bring them back
    assert len(c) == 0 and c.resources() == 2 and c.covers("vm/a")
    c.offer(Offer("vm/a", "STOPPED"), 0.1)  # a later report of a busy resource takes no more room
    assert c.resources() == 2
    c.done("vm/b")
    assert c.resources() == 1 and not c.covers("vm/b")
    c.done("vm/a")  # a's later report is now queued
    assert c.resources() == 1 and sent(c, 2.0) == [("vm/a", "STOPPED")] and c.resources() == 0


def test_flush_releases_every_held_report():
    c = coalescer()
    for k in ("a", "b"):
        c.offer(Offer(f"vm/{k}", "RUNNING"), 0.0)
    taken(c, 0.0)
    c.offer(Offer("vm/a", "STOPPED"), 0.1)
    c.offer(Offer("vm/b", "STOPPED"), 0.2)
    c.release_all()
    assert sent(c, 0.3) == [("vm/a", "STOPPED"), ("vm/b", "STOPPED")]


@pytest.mark.parametrize("window,rate,burst,message", [
    (-1, None, 1, "debounce window must be >= 0"),
    (1, 0, 1, "rate must be > 0"),
    (1, 5, 0, "burst must be >= 1"),
])
def test_impossible_settings_are_refused(window, rate, burst, message):
    with pytest.raises(ValueError, match=message):
        coalescer(rate=rate, burst=burst, window=window)
