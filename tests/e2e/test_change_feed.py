"""The change feed on the real stack: a cursor follower against concurrent writers.

Upsert commits many changes at once (16 threads, no ordering on the emulator) while
a follower reads ``GET /v1/changes`` from its cursor as fast as it can. A cursor on
the server's write stamp alone skips changes here: a write stamped earlier becomes
visible after one stamped later (shared/contracts/change_feed.py; measured on the
emulator: 6 to 32 of 1,200 concurrent writes skipped by a follower with no settle
time). The follower's sequence must be exactly what was committed, in commit order.

The feed is sharded (shared/state/documents.py): the 60 resources spread over the shards, each change in
its resource's shard, and a cursor taken anywhere in the sequence resumes exactly after it.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import requests

from shared.state.documents import COMMITTED_AT, LEDGER, SHARD, shard_of
from tests.e2e.conftest import wait_until

STATUSES = ("PROVISIONING", "RUNNING", "STOPPING", "STOPPED", "RUNNING")


def committed_changes(e2e, uid: str) -> list[str]:
    """This test's changes as committed: ledger entries with a change, in (stamp, id) order."""
    snaps = e2e.db.collection(LEDGER).order_by(COMMITTED_AT).order_by("__name__").stream()
    mine = [s for s in snaps if uid in s.get("key")]
    assert all(s.get(SHARD) == shard_of(s.get("key")) for s in mine), "each change in its resource's shard"
    return [s.get("change")["id"] for s in mine]


def test_a_cursor_follower_sees_every_change_once_in_commit_order_while_writers_race(e2e, uid):
    api = e2e.api_url + "v1/changes"
    start = requests.get(api, params={"last": 1}, timeout=30).json()["nextCursor"]
    followed: list[dict] = []
    stop = threading.Event()

    refused: list[str] = []  # answers a client would not retry: the test fails on them

    def follow() -> None:
        cursor = start
        while not stop.is_set():
            answer = requests.get(api, params={"after": cursor, "limit": 50}, timeout=30)
            if answer.status_code in (429, 503):  # busy or Firestore slow (a loaded machine): a client retries
                time.sleep(0.5)
                continue
            if answer.status_code != 200:
                refused.append(f"{answer.status_code} {answer.text[:300]}")
                return
            page = answer.json()
            followed.extend(page["changes"])
            cursor = page["nextCursor"]
            if not page["changes"]:
                time.sleep(0.05)

    follower = threading.Thread(target=follow)
    follower.start()
    resources, writers = 60, 6
    try:
        def write(w: int) -> None:
            reporters = {p: e2e.reporter(p) for p in ("aws", "azure")}
            for step, status in enumerate(STATUSES):
                futures = [reporters["aws" if r % 2 else "azure"].publish_now(
                    "vm", f"feed-{uid}-{r}", status, f"step {step}", time=f"2026-05-01T10:0{step}:00Z")
                    for r in range(w, resources, writers)]
                for f in futures:
                    f.result(timeout=30)

        with ThreadPoolExecutor(writers) as pool:
            list(pool.map(write, range(writers)))
        expected = resources * len(STATUSES)
        committed = wait_until(lambda: (c := committed_changes(e2e, uid)) and len(c) == expected and c,
                               timeout=120, what=f"{expected} committed changes")
        wait_until(lambda: refused or sum(uid in c["key"] for c in followed) >= expected, timeout=30,
                   what="the follower to catch up")
        assert not refused, f"the feed refused the follower: {refused}"
        time.sleep(1)  # anything after this would be a duplicate
    finally:
        stop.set()
        follower.join(timeout=30)
    mine = [c["id"] for c in followed if uid in c["key"]]
    assert len(mine) == len(set(mine)), "the follower saw a change twice"
    assert sorted(mine) == sorted(committed), f"missed {len(set(committed) - set(mine))} committed changes"
    assert mine == committed, "the follower saw the changes out of commit order"
    assert [c["committedAt"] for c in followed] == sorted(c["committedAt"] for c in followed)
    ours = [c for c in followed if uid in c["key"]]
    assert len({shard_of(c["key"]) for c in ours}) >= 10, "the writers' changes crossed many shards"
    by_resource: dict[str, list[str]] = {}
    for c in ours:
        by_resource.setdefault(c["key"], []).append(c["newStatus"])
    assert all(statuses == list(STATUSES) for statuses in by_resource.values()), "per-resource commit order"
    k = len(ours) // 3  # a cursor handed out mid-way resumes exactly after its change, across the shards
    resumed, cursor = [], ours[k]["cursor"]
    while True:
        page = requests.get(api, params={"after": cursor, "limit": 100}, timeout=30).json()
        resumed += [c["id"] for c in page["changes"] if uid in c["key"]]
        cursor = page["nextCursor"]
        if len(page["changes"]) < 100:
            break
    assert resumed == mine[k + 1:]


def test_the_live_stream_sends_a_change_at_once_and_resumes_from_its_last_event_id(e2e, uid):
    url = e2e.api_url + "v1/changes/stream"
    events: list[tuple[str, str, str]] = []  # (event, id, data)
    opened = threading.Event()

    refused: list[str] = []

    def listen(headers: dict[str, str], done) -> None:
        deadline = time.monotonic() + 45
        while True:  # a 503 (Firestore slow on a loaded machine) or 429 is retried, as a client does
            response = requests.get(url, headers=headers, stream=True, timeout=60)
            if response.status_code not in (429, 503) or time.monotonic() > deadline:
                break
            response.close()
            time.sleep(0.5)
        if response.status_code != 200:
            refused.append(f"{response.status_code} {response.text[:300]}")
            return
        with response:
            event = event_id = ""
            for line in response.iter_lines(decode_unicode=True):
                if line.startswith(("event: ", "id: ", "data: ")):
                    field, _, value = line.partition(": ")
                    if field == "event":
                        event = value
                        opened.set() if value == "ready" else None
                    elif field == "id":
                        event_id = value
                    else:
                        events.append((event, event_id, value))
                        if done([d for e, _, d in events if e == "change" and uid in d]):
                            return

    aws = e2e.reporter("aws")
    first = threading.Thread(target=listen, args=({}, bool))
    first.start()
    assert opened.wait(30)
    aws.publish_now("vm", f"live-{uid}", "RUNNING", "up").result(timeout=30)
    first.join(timeout=30)
    [(_, resume, _)] = [e for e in events if e[0] == "change" and uid in e[2]]
    # Disconnected: two more changes happen; the stream resumed from the last event id sends both.
    aws.publish_now("vm", f"live-{uid}", "STOPPED", "down", time="2099-01-01T00:00:00Z").result(timeout=30)
    e2e.wait_for_status(f"aws/vm/live-{uid}", "STOPPED")
    aws.publish_now("vm", f"live-{uid}-2", "RUNNING", "up").result(timeout=30)
    e2e.wait_for_status(f"aws/vm/live-{uid}-2", "RUNNING")
    events.clear()
    def both(got: list[str]) -> bool:
        return any('"newStatus":"STOPPED"' in d for d in got) and any(f"live-{uid}-2" in d for d in got)

    second = threading.Thread(target=listen, args=({"Last-Event-ID": resume}, both))
    second.start()
    second.join(timeout=60)
    assert not refused, f"the stream was refused: {refused}"
    assert both([d for e, _, d in events if e == "change" and uid in d])
