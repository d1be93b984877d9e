"""How the functions talk to Firestore: one retry/timeout policy, one failure mapping.

Fail fast on an unreachable Firestore (reads and commits): the function raises
``Transient`` and Pub/Sub redelivers, instead of a function instance hanging.
A write Firestore refuses (``InvalidArgument``: a limit nobody checked before)
can never succeed: ``Rejected(unstorable)``, dead-lettered at once, not retried
into ``delivery_exhausted``.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry

from shared.contracts.errors import Reason, Rejected, Transient

RETRY = gretry.Retry(initial=0.1, maximum=1.0, multiplier=2.0, timeout=8.0)
TIMEOUT = 5.0
TRANSIENT_ERRORS = (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.InternalServerError,
                    gexc.Aborted, gexc.TooManyRequests, gexc.RetryError, gexc.Unknown,
                    gexc.ResourceExhausted, gexc.GatewayTimeout, TimeoutError, ConnectionError)
PERMANENT_ERRORS = (gexc.InvalidArgument,)


@contextlib.contextmanager
def guard(what: str) -> Iterator[None]:
    """A Firestore outage in the block becomes ``Transient``; a refusal becomes ``Rejected(unstorable)``."""
    try:
        yield
    except TRANSIENT_ERRORS as exc:
        raise Transient(f"{what} failed: {exc!r}") from exc
    except PERMANENT_ERRORS as exc:
        raise Rejected(Reason.UNSTORABLE, f"{what} refused by Firestore: {exc.message}"[:1000],
                       {"error": type(exc).__name__}) from exc
