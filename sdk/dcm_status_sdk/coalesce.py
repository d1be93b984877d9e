"""Debounce and rate limit: which reports go out now, which wait, which are replaced.

Pure logic (the caller passes the time), so the timing rules are tested on a fake clock.

Debounce (the proposal's Flooding/Flapping mitigation), per resource: a report of a quiet
resource (nothing sent for it in the last ``window`` seconds) goes out at once; a report
inside the window waits until the window ends, and a later report of the same resource
replaces it, so only the last state of a burst is sent (running -> error -> running inside the
window sends nothing more than running). No report waits longer than the window it opened, a
transition to a terminal state (DELETED, FAILED) included.

Rate limit, per provider: a token bucket (``rate`` per second, ``burst`` at once). A report
that finds no token waits in the queue, where later reports of its resource replace it:
beyond the rate, updates coalesce per resource instead of being dropped. A terminal state
takes its token even when the bucket is empty (a debt the next reports repay), so no rate
limit delays it beyond the debounce window either.

In flight: a resource whose report is being published is not taken again until ``done`` says
the publish ended (its next report waits, parked, and coalesces there). So one resource has at
most one publish at a time, and the order of its reports is the order they reach the topic,
whichever batch each goes in.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Offer(Generic[T]):
    key: str  # the resource
    item: T  # what to send
    terminal: bool = False
    immediate: bool = False  # skips the debounce window (a resync snapshot)
    not_before: float | None = None  # a retry: held until then (back-off), unless a newer report replaces it


@dataclass
class TokenBucket:
    rate: float | None  # tokens per second; None: no limit
    burst: float
    tokens: float = field(init=False)
    stamp: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.rate is not None and self.rate <= 0:
            raise ValueError(f"rate must be > 0 per second, or None for no limit; got {self.rate}")
        if self.burst < 1:
            raise ValueError(f"burst must be >= 1; got {self.burst}")
        self.tokens = self.burst

    def _refill(self, now: float) -> None:
        if self.rate is None:
            return
        if self.stamp is not None:
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def take(self, now: float, force: bool = False) -> bool:
        self._refill(now)
        if self.rate is None:
            return True
        if self.tokens >= 1 or force:
            self.tokens -= 1
            return True
        return False

    def next_token_at(self, now: float) -> float:
        if self.rate is None or self.tokens >= 1:
            return now
        return now + (1 - self.tokens) / self.rate


class Coalescer(Generic[T]):
    """Not thread-safe: the reporter holds its lock around every call."""

    def __init__(self, window: float, bucket: TokenBucket, merge: Callable[[T, T], T] | None = None):
        """``merge(old, new)``: what replaces ``old`` when ``new`` comes (default: ``new``)."""
        if window < 0:
            raise ValueError(f"debounce window must be >= 0 seconds; got {window}")
        self.window = window
        self.bucket = bucket
        self._held: dict[str, tuple[float, Offer[T]]] = {}  # inside a window: due time, offer
        self._due: list[tuple[float, int, str]] = []  # heap of (due, tiebreak, key) over _held
        self._queue: OrderedDict[str, Offer[T]] = OrderedDict()  # out of its window, waiting for a token
        self._urgent: OrderedDict[str, Offer[T]] = OrderedDict()  # terminal states: no token wait
        self._sent: dict[str, float] = {}  # resource -> when its last report left
        self._busy: set[str] = set()  # resources with a publish in flight
        self._alone: set[str] = set()  # of those, the ones with no later report waiting
        self._parked: dict[str, Offer[T]] = {}  # out of its window, its resource busy: waits for done()
        self._ticket = itertools.count()
        self.replaced = 0  # reports replaced by a later one of their resource (never sent)
        self._merge = merge or (lambda old, new: new)

    def __len__(self) -> int:
        return len(self._held) + len(self._queue) + len(self._urgent) + len(self._parked)

    def holds(self, key: str) -> bool:
        return key in self._held or key in self._queue or key in self._urgent or key in self._parked

    def resources(self) -> int:
        """Resources with a report waiting or in flight, each counted once."""
        return len(self) + len(self._alone)

    def covers(self, key: str) -> bool:
        """``key`` already counts in ``resources()``: a new report of it takes no more room."""
        return key in self._busy or self.holds(key)

    def _replacing(self, old: Offer[T], new: Offer[T]) -> Offer[T]:
        self.replaced += 1
        return replace(new, item=self._merge(old.item, new.item))

    def offer(self, offer: Offer[T], now: float) -> None:
        """Take a report. A retry (``not_before``) of a resource with a newer report is dropped: the
        newer one is sent instead (merged with it, so a resync marker is not lost)."""
        key = offer.key
        self._alone.discard(key)  # whatever happens below, the key waits in one of the queues
        held = self._held.get(key)
        queued = self._queue.get(key) or self._urgent.get(key) or self._parked.get(key)
        newer = held[1] if held is not None else queued
        if offer.not_before is not None and newer is not None:
            kept = replace(newer, item=self._merge(offer.item, newer.item))
            if held is not None:
                self._held[key] = (held[0], kept)
            else:
                self._enqueue(kept)
            return
        if held is not None:
            offer = self._replacing(held[1], offer)
            if offer.immediate:
                del self._held[key]
                self._enqueue(offer)
            else:
                self._held[key] = (held[0], offer)  # never later than the window its first report opened
            return
        if queued is not None:
            self._enqueue(self._replacing(queued, offer))
            return
        last = self._sent.get(key)
        due = offer.not_before if offer.not_before is not None else \
            None if offer.immediate or last is None or now - last >= self.window else last + self.window
        if due is None or due <= now:
            self._enqueue(offer)
        else:
            heapq.heappush(self._due, (due, next(self._ticket), key))
            self._held[key] = (due, offer)

    def _enqueue(self, offer: Offer[T]) -> None:
        """Into its queue (parked while its resource is busy); a report replacing one in the same queue
        keeps that one's place (a resource reported all the time is not sent to the back each time)."""
        if offer.key in self._busy:
            self._parked[offer.key] = offer
            return
        mine, other = (self._urgent, self._queue) if offer.terminal else (self._queue, self._urgent)
        other.pop(offer.key, None)
        mine[offer.key] = offer

    def done(self, key: str) -> None:
        """The publish of ``key``'s report ended (either way): its next report may go."""
        self._busy.discard(key)
        self._alone.discard(key)
        parked = self._parked.pop(key, None)
        if parked is not None:
            self._enqueue(parked)

    def drop_all(self) -> int:
        """Give up every waiting report (those in flight end with ``done``); returns how many."""
        dropped = len(self)
        self._held.clear()
        self._due.clear()
        self._queue.clear()
        self._urgent.clear()
        self._parked.clear()
        return dropped

    def release_all(self) -> None:
        """Every held report is due now (flush: nothing waits for its window)."""
        for key, (_, offer) in sorted(self._held.items(), key=lambda kv: kv[1][0]):
            self._enqueue(offer)
        self._held.clear()
        self._due.clear()

    def take(self, now: float, limit: int | None = None) -> tuple[list[Offer[T]], float | None]:
        """The reports to send now (at most ``limit``, terminal states first), and when to look again
        (None: nothing waits)."""
        while self._due and self._due[0][0] <= now:
            due, _, key = heapq.heappop(self._due)
            held = self._held.get(key)
            if held is not None and held[0] == due:
                del self._held[key]
                self._enqueue(held[1])
        room = len(self) if limit is None else limit
        out: list[Offer[T]] = []
        while self._urgent and len(out) < room:
            self.bucket.take(now, force=True)
            out.append(self._urgent.popitem(last=False)[1])
        while self._queue and len(out) < room and self.bucket.take(now):
            out.append(self._queue.popitem(last=False)[1])
        for offer in out:
            self._sent[offer.key] = now
            self._busy.add(offer.key)
            self._alone.add(offer.key)
        if len(self._sent) > 4 * (len(self) + 1024):
            self._sent = {k: t for k, t in self._sent.items() if now - t < self.window}  # no longer holding back
        wake = [self._due[0][0]] if self._due else []
        if self._urgent:
            wake.append(now)
        if self._queue:
            wake.append(self.bucket.next_token_at(now))
        return out, min(wake) if wake else None
