"""The change feed, paged (``GET /v1/changes``) and live (``GET /v1/changes/stream``).

Paged: settled entries only, in commit order (shared/contracts/change_feed.py says
why that makes the cursor safe). Live: one Firestore listener per instance on the
newest ledger entries wakes every open stream as soon as a change commits; the
stream sends it at once, then sends the settled feed from its resume point, so a
change the listener missed (or that committed while the stream reconnected)
still arrives. A change can therefore reach a stream twice (live, then settled,
when the stream resumed before it settled): clients deduplicate by ``id``. The
event id of every server-sent event is a settled cursor, the resume point
``EventSource`` sends back as ``Last-Event-ID``.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Iterator, Mapping

import orjson
from dcm_status_contracts import change_feed, timeutil
from dcm_status_contracts.change_feed import Cursor
from dcm_status_contracts.errors import TooManyRequests
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.runtime import firestore as fs
from shared.runtime.logs import get_logger
from shared.state.documents import CHANGE, COMMITTED_AT, LEDGER, SHARD_SPACE
from shared.state.resources import shard_groups

log = get_logger("api.feed")

MAX_PAGE = 1000
LIVE_WINDOW = 50  # the newest ledger entries the listener watches (a commit enters it, so it is seen)
LIVE_BUFFER = 2000  # live changes an instance keeps for its streams
HEARTBEAT_SECONDS = 15.0  # an SSE comment line keeps proxies from closing an idle stream
RESYNC_SECONDS = 30.0  # an idle stream reads the settled feed this often anyway
RETRY_MS = 1000  # how soon EventSource reconnects when a stream ends
RELISTEN_SECONDS = 5.0  # a listener that died (Firestore unreachable) is started again, at most this often


@dataclass(frozen=True)
class FeedFilter:
    provider: str | None = None
    resource_type: str | None = None
    status: str | None = None

    def equalities(self) -> list[tuple[str, str]]:
        pairs = (("provider", self.provider), ("resourceType", self.resource_type), ("status", self.status))
        return [(f, v) for f, v in pairs if v]

    def matches(self, item: Mapping[str, Any]) -> bool:
        return ((not self.provider or item["provider"] == self.provider)
                and (not self.resource_type or item["resourceType"] == self.resource_type)
                and (not self.status or item["newStatus"] == self.status))


class ChangeFeed:
    def __init__(self, db: firestore.Client, retention_days: int,
                 settle: float = change_feed.DEFAULT_SETTLE_SECONDS,
                 clock: Callable[[], datetime] = timeutil.now, options: Mapping[str, Any] | None = None):
        self.db, self.retention_days, self.settle, self.clock = db, retention_days, settle, clock
        self.options = dict(options or {})

    def page(self, after: Cursor | None = None, where: FeedFilter = FeedFilter(), limit: int = 100,
             last: int | None = None) -> dict[str, Any]:
        """Settled changes after ``after`` (from the oldest retained without it; the ``last`` newest
        instead), oldest first, and the cursor to continue from."""
        read_at = self.clock()
        horizon = change_feed.horizon(read_at, self.settle)
        if after is not None:
            change_feed.check_retained(after, read_at, self.retention_days)
        ledger = self.db.collection(LEDGER)
        [query] = shard_groups(ledger, SHARD_SPACE)  # the feed's shards fit one query: one merge, by Firestore
        for field, value in where.equalities():
            query = query.where(filter=FieldFilter(field, "==", value))
        query = query.where(filter=FieldFilter(COMMITTED_AT, "<=", horizon))
        if last:
            query = (query.order_by(COMMITTED_AT, direction=firestore.Query.DESCENDING)
                     .order_by("__name__", direction=firestore.Query.DESCENDING).limit(last))
            snaps = list(reversed(list(query.stream(**self.options))))
        else:
            query = query.order_by(COMMITTED_AT).order_by("__name__")
            if after is not None:
                query = query.start_after({COMMITTED_AT: after.committed_at,
                                           "__name__": ledger.document(after.entry_id)})
            snaps = list(query.limit(limit).stream(**self.options))
        items = [_item(s) for s in snaps]
        if not last and len(items) == limit:
            next_cursor = items[-1]["cursor"]
        else:
            # Everything stamped up to the horizon was served; never move a cursor backwards.
            next_cursor = max(Cursor.after(horizon), after or Cursor.after(horizon)).encode()
        return {"changes": items, "nextCursor": next_cursor, "settleSeconds": self.settle,
                "retentionDays": self.retention_days}


def _item(snap: Any) -> dict[str, Any]:
    data = snap.to_dict()
    return change_feed.item(snap.id, data[COMMITTED_AT], data[CHANGE])


class Live:
    """The instance's listener on the newest ledger entries, and what it heard."""

    def __init__(self, db: firestore.Client):
        self.db = db
        self.changed = threading.Condition()
        self.seq = 0
        self.buffer: collections.deque[tuple[int, dict[str, Any]]] = collections.deque(maxlen=LIVE_BUFFER)
        self._watch: Any = None
        self._started = 0.0
        self._baseline = False
        self._streams = 0
        self.last_activity = 0.0

    def opened(self) -> None:
        with self.changed:
            self._streams += 1
        self.start()

    def closed(self) -> None:
        """The last stream gone, stop listening: a listener costs a read per change it hears."""
        with self.changed:
            self._streams -= 1
            if self._streams == 0 and self._watch is not None:
                self._watch.unsubscribe()
                self._watch = None

    def start(self) -> None:
        """Listen, unless listening already; a listener that died is replaced (what it missed meanwhile
        reaches the streams from the settled feed)."""
        with self.changed:
            if self._watch is not None and (self._watch.is_active
                                            or time.monotonic() - self._started < RELISTEN_SECONDS):
                return
            if self._watch is not None:
                log.warning("change listener stopped; listening again")
                self._watch.unsubscribe()
            [every_shard] = shard_groups(self.db.collection(LEDGER), SHARD_SPACE)
            query = (every_shard.order_by(COMMITTED_AT, direction=firestore.Query.DESCENDING).limit(LIVE_WINDOW))
            self._baseline = False
            self._started = time.monotonic()
            self._watch = query.on_snapshot(self._heard)

    def _heard(self, snaps: Any, changes: Any, read_time: Any) -> None:
        with self.changed:
            if self._baseline:  # the first snapshot is what was there before: not news
                for c in changes:
                    if c.type.name == "ADDED" and (c.document.to_dict() or {}).get(CHANGE):
                        try:
                            item = _item(c.document)
                        except (KeyError, TypeError, ValueError):  # the settled feed says it, or fails loudly
                            log.exception("unreadable change entry heard", extra={"entryId": c.document.id})
                            continue
                        self.seq += 1
                        self.buffer.append((self.seq, item))
            self._baseline = True
            self.last_activity = time.monotonic()
            self.changed.notify_all()

    def since(self, seq: int) -> list[tuple[int, dict[str, Any]]]:
        with self.changed:
            return [(s, item) for s, item in self.buffer if s > seq]

    def wait(self, seq: int, timeout: float) -> None:
        with self.changed:
            if self.seq == seq:
                self.changed.wait(timeout)


class StreamSlots:
    """The live streams an instance holds open, capped per instance and per caller: each holds a
    thread and a connection, and a few hundred saturate an instance. Over a cap, TooManyRequests
    (429 with Retry-After; the dashboard then polls ``/v1/changes`` and retries with back-off)."""

    def __init__(self, total: int, per_caller: int):
        self.total, self.per_caller = total, per_caller
        self._lock = threading.Lock()
        self._held: collections.Counter[str] = collections.Counter()

    def open(self) -> int:
        with self._lock:
            return sum(self._held.values())

    def take(self, caller: str) -> "Slot":
        with self._lock:
            if sum(self._held.values()) >= self.total:
                raise TooManyRequests(f"this instance serves {self.total} live streams already (DCM_MAX_STREAMS); "
                                      "retry later, or poll /v1/changes?after=CURSOR meanwhile", "stream")
            if self._held[caller] >= self.per_caller:
                raise TooManyRequests(f"{caller} holds {self.per_caller} live streams on this instance already "
                                      "(DCM_MAX_STREAMS_PER_CALLER); close one, or poll /v1/changes?after=CURSOR",
                                      "stream")
            self._held[caller] += 1
        return Slot(self, caller)

    def give(self, caller: str) -> None:
        with self._lock:
            self._held[caller] -= 1
            if self._held[caller] <= 0:
                del self._held[caller]


class Slot:
    """One stream's place; given back once, when the response is closed (even if never read)."""

    def __init__(self, slots: StreamSlots, caller: str):
        self.slots, self.caller = slots, caller
        self._given = False
        self._body: Iterator[bytes] | None = None

    def around(self, body: Iterator[bytes]) -> "Slot":
        self._body = body
        return self

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._body or ())

    def close(self) -> None:  # the WSGI server calls it when the response ends, read or not
        try:
            if self._body is not None and hasattr(self._body, "close"):
                self._body.close()
        finally:
            if not self._given:
                self._given = True
                self.slots.give(self.caller)


def sse(event: str | None = None, data: Any = None, event_id: str | None = None, comment: str | None = None,
        retry_ms: int | None = None) -> bytes:
    """One server-sent event (text/event-stream framing)."""
    lines = []
    if comment is not None:
        lines.append(f": {comment}")
    if retry_ms is not None:
        lines.append(f"retry: {retry_ms}")
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if event is not None:
        lines.append(f"event: {event}")
    if data is not None:
        lines.append("data: " + orjson.dumps(data).decode())
    return ("\n".join(lines) + "\n\n").encode()


def stream(feed: ChangeFeed, live: Live, after: Cursor | None, where: FeedFilter, duration: float,
           clock: Callable[[], float] = time.monotonic) -> Iterator[bytes]:
    """The live feed as server-sent events, for ``duration`` seconds (EventSource then reconnects)."""
    live.opened()
    try:
        yield from _stream(feed, live, after, where, duration, clock)
    except fs.TRANSIENT_ERRORS as exc:  # Firestore went away mid-stream: end it; EventSource resumes
        log.warning("change stream ended: Firestore did not answer", extra={"error": repr(exc)[:300]})
    except Exception:
        log.exception("change stream failed; the client resumes from its last event id")
    finally:
        live.closed()


def _stream(feed: ChangeFeed, live: Live, after: Cursor | None, where: FeedFilter, duration: float,
            clock: Callable[[], float]) -> Iterator[bytes]:
    settled = after or Cursor.after(change_feed.horizon(feed.clock(), feed.settle))
    sent: dict[str, datetime] = {}  # ids sent and not yet behind the settled cursor
    seq = live.seq
    ends = clock() + duration
    yield sse(comment="dcm-status change feed", retry_ms=RETRY_MS)

    def catch_up() -> Iterator[bytes]:
        nonlocal settled
        while True:
            page = feed.page(settled, where, limit=MAX_PAGE)
            settled = Cursor.decode(page["nextCursor"])
            for item in page["changes"]:
                if item["id"] not in sent:
                    yield sse("change", item, event_id=item["cursor"])
            for change_id, committed_at in list(sent.items()):
                if committed_at <= settled.committed_at:
                    del sent[change_id]
            if len(page["changes"]) < MAX_PAGE:
                return

    yield from catch_up()
    yield sse("ready", {"cursor": settled.encode()}, event_id=settled.encode())
    last_read = last_beat = clock()
    dirty = True  # changes not yet read from the settled feed: those committed just before the stream opened
    while clock() < ends:
        live.start()
        wait = min(HEARTBEAT_SECONDS, feed.settle) if dirty else HEARTBEAT_SECONDS
        live.wait(seq, timeout=max(0.0, min(wait, ends - clock())))  # a stream ends on time: its place is freed
        for seq, item in live.since(seq):
            dirty = True
            if where.matches(item) and item["id"] not in sent:
                sent[item["id"]] = timeutil.parse(item["committedAt"])
                yield sse("change", {**item, "cursor": settled.encode()}, event_id=settled.encode())
        now = clock()
        if (dirty and now - last_read >= feed.settle) or now - last_read >= RESYNC_SECONDS:
            yield from catch_up()
            dirty, last_read = False, now
        if now - last_beat >= HEARTBEAT_SECONDS:
            yield sse(comment="keepalive")
            last_beat = now
