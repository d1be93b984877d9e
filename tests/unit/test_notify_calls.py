"""The first lane's busy check: a receiver is called once at a time until it has shown it answers
fast; a hanging, slow or failing one never gets a second push slot."""

from shared.callbacks.egress import HookResponse
from shared.notify.deliver import Calls

def test_a_new_receiver_is_called_once_at_a_time():
    calls = Calls(limit=4)
    assert calls.admit("a") and not calls.admit("a")
    assert calls.admit("b")  # another receiver is not held up


def test_a_fast_receiver_may_be_called_up_to_the_limit_at_once():
    calls = Calls(limit=4)
    calls.admit("a")
    calls.done("a", HookResponse(204, None, "127.0.0.1", 0.02))
    assert [calls.admit("a") for _ in range(5)] == [True, True, True, True, False]


def test_a_slow_failing_or_unanswered_call_brings_it_back_to_one():
    for last in (HookResponse(204, None, "127.0.0.1", 2.5), HookResponse(500, "HTTP 500", "127.0.0.1", 0.01), None):
        calls = Calls(limit=4)
        calls.admit("a")
        calls.done("a", HookResponse(204, None, "127.0.0.1", 0.02))
        calls.admit("a")
        calls.done("a", last)
        assert calls.admit("a") and not calls.admit("a")
