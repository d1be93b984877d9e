"""How the functions talk to Firestore: one retry/timeout policy, one failure mapping.

Fail fast on an unreachable Firestore (reads and commits): the function raises
``Transient`` and Pub/Sub redelivers, instead of a function instance hanging.
A write Firestore refuses (``InvalidArgument``: a limit nobody checked before)
can never succeed: ``Rejected(unstorable)``, dead-lettered at once, not retried
into ``delivery_exhausted``.

While Firestore is known to be down, fail at once: after three calls in a row fail
for a transient cause (no answer between them), the instance's circuit breaker
stays open for a second, then lets one probe through at a time. Without it every
push of an outage holds a request thread for the whole retry deadline, the
server's queue grows, and Pub/Sub's attempts are spent waiting in it instead of
a second apart.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from typing import Callable, Iterator

from dcm_status_contracts.errors import Reason, Rejected, Transient
from dcm_status_contracts.limits import FIRESTORE_MAX_DOCUMENT_ID_BYTES, RESERVED_NAME
from google.api_core import exceptions as gexc
from google.api_core import retry as gretry

RETRY_DEADLINE = 2.0  # seconds a function retries Firestore within one delivery: Pub/Sub redelivers the rest
RETRY = gretry.Retry(initial=0.1, maximum=0.5, multiplier=2.0, timeout=RETRY_DEADLINE)
TIMEOUT = 5.0
READ_TIMEOUT = 30.0  # a read or query of the operator tools: a hung Firestore is an error, not a hang


def is_document_id(value: str) -> bool:
    """Whether ``value`` can name a document of a collection (Firestore: 1 to 1,500 bytes, no ``/``,
    not ``.`` or ``..``, not ``__.*__``): user input goes into a document path only when it is."""
    try:
        size = len(value.encode())  # a lone surrogate (JSON allows one) is no UTF-8: no document id either
    except (AttributeError, UnicodeEncodeError):
        return False
    return (0 < size <= FIRESTORE_MAX_DOCUMENT_ID_BYTES and "/" not in value and value not in (".", "..")
            and not RESERVED_NAME.match(value))


def read_options() -> dict:
    """retry and timeout for an operator's read: retried while Firestore is unavailable, for READ_TIMEOUT
    seconds in all (the library's default retries for a minute and more)."""
    return {"retry": gretry.Retry(initial=0.2, maximum=2.0, multiplier=2.0, timeout=READ_TIMEOUT),
            "timeout": READ_TIMEOUT}
TRANSIENT_ERRORS = (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.InternalServerError,
                    gexc.Aborted, gexc.TooManyRequests, gexc.RetryError, gexc.Unknown,
                    gexc.ResourceExhausted, gexc.GatewayTimeout, TimeoutError, ConnectionError)
PERMANENT_ERRORS = (gexc.InvalidArgument,)
# InvalidArgument, but about the transaction, not the data: it outlived its locks under contention (the
# emulator: "Transaction is invalid or closed."; Firestore: "...transaction has expired or is no longer
# valid"). Running it again may succeed: transient.
CLOSED_TRANSACTION = ("transaction is invalid or closed", "transaction has expired", "no longer valid")


def closed_transaction(exc: BaseException) -> bool:
    return isinstance(exc, gexc.InvalidArgument) and any(m in str(exc).lower() for m in CLOSED_TRANSACTION)


class Breaker:
    """Closed (every call goes through) until ``threshold`` calls have failed in a row, with no answer from
    Firestore between them; then open (none goes through, for ``cool_off`` seconds), then half-open (one probe
    at a time; its success closes the breaker, its failure opens it again).

    One failure among answers is a slow call, not an outage: on a busy instance one call of the many in
    flight can miss its deadline while the others are answered. Opened by it, the breaker failed the other
    deliveries in flight at once (30 within 0.2 s, in a burst on a loaded 2-core machine: one update stored
    23 s late, docs/local-stack.md), and each failure spends one of a message's delivery attempts. An outage
    fails every call in flight, so it still opens the breaker within the retry deadline of its first calls.
    """

    def __init__(self, cool_off: float = 1.0, threshold: int = 3, clock: Callable[[], float] = time.monotonic):
        self.cool_off = cool_off
        self.threshold = threshold
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0  # in a row: since Firestore last answered
        self._open_until: float | None = None
        self._probing = False

    def admit(self) -> bool:
        with self._lock:
            if self._open_until is None:
                return True
            if self._clock() < self._open_until or self._probing:
                return False
            self._probing = True
            return True

    def failed(self) -> None:
        with self._lock:
            self._failures += 1
            self._probing = False
            if self._failures >= self.threshold:  # and a failed probe: still no answer since
                self._open_until = self._clock() + self.cool_off

    def answered(self) -> None:
        with self._lock:
            self._failures = 0
            self._open_until = None
            self._probing = False

    @property
    def open(self) -> bool:
        return self._open_until is not None


BREAKER = Breaker()  # one per function instance, like its Firestore client's channel


_GUARDED: contextvars.ContextVar[bool] = contextvars.ContextVar("firestore_guarded", default=False)


@contextlib.contextmanager
def guard(what: str, breaker: Breaker = BREAKER) -> Iterator[None]:
    """A Firestore outage in the block becomes ``Transient``; a refusal becomes ``Rejected(unstorable)``.

    A guard inside another is part of the outer one's call: admitted with it (were it asked, the breaker
    would refuse it while the outer one is the half-open probe, and that probe would never end), judged by it.
    """
    if _GUARDED.get():
        yield
        return
    if not breaker.admit():
        raise Transient(f"{what} not tried: Firestore failed less than {breaker.cool_off:.0f} s ago")
    token = _GUARDED.set(True)
    try:
        yield
    except gexc.Aborted as exc:  # contention ("Transaction lock timeout."): Firestore answered, it is not down
        breaker.answered()
        raise Transient(f"{what} failed under contention: {exc!r}") from exc
    except TRANSIENT_ERRORS as exc:
        breaker.failed()
        raise Transient(f"{what} failed: {exc!r}") from exc
    except PERMANENT_ERRORS as exc:
        breaker.answered()
        if closed_transaction(exc):
            raise Transient(f"{what} failed: the transaction was closed before its commit ({exc!r})") from exc
        raise Rejected(Reason.UNSTORABLE, f"{what} refused by Firestore: {exc.message}"[:1000],
                       {"error": type(exc).__name__}) from exc
    except Transient:
        breaker.failed()  # a transient failure the block named itself: never leave a probe hanging
        raise
    except BaseException:
        breaker.answered()  # not Firestore's failure: never leave a probe hanging
        raise
    else:
        breaker.answered()
    finally:
        _GUARDED.reset(token)
