"""The Firestore circuit breaker: fail fast while Firestore is known down (calls failing in a row, no answer
between them), probe one call at a time."""

from __future__ import annotations

import pytest
from dcm_status_contracts.errors import Rejected, Transient
from google.api_core import exceptions as gexc

from shared.runtime.firestore import Breaker, guard


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _fail(breaker: Breaker) -> None:
    with pytest.raises(Transient, match="failed"):
        with guard("read", breaker):
            raise gexc.ServiceUnavailable("down")


def _answer(breaker: Breaker) -> None:
    with guard("read", breaker):
        pass


def _trip(breaker: Breaker) -> None:
    """An outage as the breaker sees it: its threshold of calls failing in a row."""
    for _ in range(breaker.threshold):
        assert not breaker.open
        _fail(breaker)
    assert breaker.open


def test_calls_failing_in_a_row_open_it_and_calls_then_fail_fast_without_touching_firestore():
    clock = Clock()
    breaker = Breaker(cool_off=1.0, clock=clock)
    assert breaker.threshold == 3
    _trip(breaker)
    touched = []
    with pytest.raises(Transient, match="not tried"):
        with guard("read", breaker):
            touched.append(1)
    assert touched == [] and breaker.open


def test_a_failure_among_answers_is_a_slow_call_not_an_outage():
    """A loaded instance: one call of the many in flight misses its deadline while the others are answered.
    The breaker opened on it failed the other deliveries in flight at once (30 in one burst) and spent their
    delivery attempts."""
    breaker = Breaker(cool_off=1.0, clock=Clock())
    for _ in range(5):
        _fail(breaker)
        _fail(breaker)
        _answer(breaker)
        assert not breaker.open and breaker.admit()
    _fail(breaker)
    _fail(breaker)
    _fail(breaker)  # the third in a row since the last answer
    assert breaker.open and not breaker.admit()


def test_after_the_cool_off_one_probe_goes_through_and_its_success_closes_it():
    clock = Clock()
    breaker = Breaker(cool_off=1.0, clock=clock)
    _trip(breaker)
    clock.now += 1.5
    assert breaker.admit()          # the probe
    assert not breaker.admit()      # a second caller while the probe runs fails fast
    breaker.answered()
    assert not breaker.open and breaker.admit() and breaker.admit()


def test_a_failed_probe_opens_it_again():
    clock = Clock()
    breaker = Breaker(cool_off=1.0, clock=clock)
    _trip(breaker)
    clock.now += 1.5
    _fail(breaker)
    assert not breaker.admit()
    clock.now += 1.5
    assert breaker.admit()


def test_a_refusal_or_a_bug_is_an_answer_and_never_leaves_a_probe_hanging():
    clock = Clock()
    breaker = Breaker(cool_off=1.0, clock=clock)
    _trip(breaker)
    clock.now += 1.5
    with pytest.raises(Rejected):
        with guard("write", breaker):
            raise gexc.InvalidArgument("too deep")
    assert not breaker.open
    _trip(breaker)
    clock.now += 1.5
    with pytest.raises(KeyError):
        with guard("write", breaker):
            raise KeyError("bug")
    assert not breaker.open and breaker.admit()


def test_an_inner_guards_verdict_stands_and_counts_once():
    breaker = Breaker(cool_off=1.0, threshold=2, clock=Clock())
    for opened in (False, True):
        with pytest.raises(Transient):
            with guard("outer", breaker):
                with guard("inner", breaker):
                    raise gexc.DeadlineExceeded("slow")
        assert breaker.open is opened


def test_a_probe_with_a_guard_inside_goes_through_and_closes_it():
    """The half-open probe's own inner guard was refused ("not tried": the probe was running), the probe
    never ended, and the breaker stayed open for good: every callback registration of the api a 503."""
    clock = Clock()
    breaker = Breaker(cool_off=1.0, clock=clock)
    _trip(breaker)
    clock.now += 1.5
    with guard("registering a callback", breaker):
        with guard("counting callbacks", breaker):
            pass
    assert not breaker.open and breaker.admit()


def test_a_transient_failure_the_probe_names_itself_never_leaves_it_hanging():
    clock = Clock()
    breaker = Breaker(cool_off=1.0, clock=clock)
    _trip(breaker)
    clock.now += 1.5
    with pytest.raises(Transient, match="contention"):
        with guard("write", breaker):
            raise Transient("contention")
    clock.now += 1.5
    assert breaker.admit()  # a new probe, after the cool-off


def test_a_transaction_closed_under_contention_is_transient_not_a_refusal_of_the_data():
    """The emulator closes a transaction that waited too long on a contended document ("Transaction is invalid
    or closed.", InvalidArgument): run again it may succeed, so it is Transient (an api's 503), never
    Rejected(unstorable) nor a 500; any other InvalidArgument is still the data's refusal."""
    breaker = Breaker()
    with pytest.raises(Transient, match="closed before its commit"):
        with guard("registering a callback", breaker):
            raise gexc.InvalidArgument("Transaction is invalid or closed.")
    assert not breaker.open  # Firestore answered: no outage
    with pytest.raises(Rejected):
        with guard("storing a document", breaker):
            raise gexc.InvalidArgument("Property name is too long")


def test_contention_is_transient_and_an_answer_not_an_outage():
    """Aborted ("Transaction lock timeout."): another writer holds the document. Firestore answered; the
    delivery is redelivered, and the breaker does not count it towards an outage (it closes on it)."""
    breaker = Breaker(cool_off=1.0, clock=Clock())
    for _ in range(breaker.threshold - 1):
        _fail(breaker)
    for _ in range(breaker.threshold):
        with pytest.raises(Transient, match="contention"):
            with guard("update", breaker):
                raise gexc.Aborted("Transaction lock timeout.")
    _fail(breaker)
    assert not breaker.open and breaker.admit()
