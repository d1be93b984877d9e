"""The sharded change feed on the Firestore emulator, and each of its failure modes.

``committedAt`` is sharded (shared/state/documents.py): each entry carries its resource's shard, and the
feed reads every shard at once, merged in commit order, so its cursor is one position (committedAt,
entry id), as before. Named here: entries spread over shards and pages, a cursor of the format
handed out before the sharding, a change of the writers' shard count, a writer committing late within
a shard, and what is refused. Resources have 60 shards: read in two queries of 30, merged.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from dcm_status_contracts import tokens
from dcm_status_contracts.change_feed import Cursor
from dcm_status_contracts.errors import InvalidRequest
from google.cloud.firestore import DELETE_FIELD

from shared.api.feed import ChangeFeed
from shared.state.documents import COMMITTED_AT, LEDGER, MAX_IN, RESOURCE_SHARDS, SHARD, SHARDS, shard_of
from shared.state.resources import backfill_shards, merged
from shared.upsert.store import StateStore
from tests.functional.test_api import seed

STATUSES = ("PROVISIONING", "RUNNING", "STOPPED")


def follow(feed: ChangeFeed, after: Cursor | None = None, limit: int = 7) -> list[dict]:
    """Every settled change from ``after`` on, page by page, as a client follows the cursor."""
    served = []
    while True:
        page = feed.page(after, limit=limit)
        served += page["changes"]
        after = Cursor.decode(page["nextCursor"])
        if len(page["changes"]) < limit:
            return served


def per_resource(changes: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for c in changes:
        out.setdefault(c["key"], []).append(c["newStatus"])
    return out


def write(db, rids, step: int, shards: int = SHARDS) -> None:
    for rid in rids:
        seed(db, "aws", "vm", rid, STATUSES[step], f"2026-03-01T10:0{step}:00Z", f"{rid}-{step}", shards=shards)


def test_changes_spread_over_the_shards_are_served_once_in_commit_order_page_after_page(firestore):
    rids = [f"sh-{i}" for i in range(24)]
    for step in range(len(STATUSES)):
        write(firestore, rids, step)
    entries = [s.to_dict() for s in firestore.collection(LEDGER).stream()]
    assert all(e[SHARD] == shard_of(e["key"]) for e in entries if e.get(COMMITTED_AT))
    assert len({e[SHARD] for e in entries}) >= 10, "the resources spread over many shards"
    served = follow(ChangeFeed(firestore, 7, settle=0))
    assert len(served) == len({c["id"] for c in served}) == len(rids) * len(STATUSES)
    assert [c["committedAt"] for c in served] == sorted(c["committedAt"] for c in served), "commit order"
    assert all(statuses == list(STATUSES) for statuses in per_resource(served).values())


def test_a_cursor_of_the_format_handed_out_before_the_sharding_resumes_exactly(firestore):
    """The cursor is still (committedAt, entry id): a client's saved cursor stays valid across the deploy."""
    write(firestore, [f"old-{i}" for i in range(6)], 0)
    served = follow(ChangeFeed(firestore, 7, settle=0))
    middle = served[2]
    saved = tokens.to_token([middle["committedAt"], Cursor.decode(middle["cursor"]).entry_id])  # as before
    assert saved == middle["cursor"]
    assert follow(ChangeFeed(firestore, 7, settle=0), Cursor.decode(saved)) == served[3:]


@pytest.mark.parametrize("token", [[1, "x"], ["2026-03-01T10:00:00Z", "id", 3], {"shard": 1}, "no"])
def test_a_cursor_of_any_other_format_is_a_clear_400(token):
    with pytest.raises(InvalidRequest, match="not a cursor of this feed"):
        Cursor.decode(tokens.to_token(token))


def test_a_change_of_the_writers_shard_count_loses_and_repeats_nothing(firestore):
    """Readers read every shard a writer may use (SHARD_SPACE): a resource moving shard when the count
    changes keeps its order, since the feed orders by commit time over all of them."""
    rids = [f"move-{i}" for i in range(8)]
    write(firestore, rids, 0, shards=4)
    feed = ChangeFeed(firestore, 7, settle=0)
    first = follow(feed)
    cursor = Cursor.decode(feed.page(Cursor.decode(first[-1]["cursor"]))["nextCursor"])
    write(firestore, rids, 1, shards=SHARDS)
    write(firestore, rids, 2, shards=3)
    rest = follow(feed, cursor)
    served = first + rest
    assert len(served) == len({c["id"] for c in served}) == len(rids) * len(STATUSES)
    assert all(statuses == list(STATUSES) for statuses in per_resource(served).values())
    moved = {shard_of(f"aws/vm/{r}", 4) != shard_of(f"aws/vm/{r}", SHARDS) for r in rids}
    assert True in moved, "some resource changed shard"
    with pytest.raises(ValueError, match="shards must be 1..30"):
        StateStore(firestore, shards=SHARDS + 1)


def test_a_writer_committing_late_within_a_shard_is_served_not_skipped(firestore):
    """Two resources of one shard: B's write is stamped before A's but becomes visible after a follower
    read A's stamp. The settle horizon kept the cursor behind A, so B comes, then A, in commit order."""
    first, second = pair_in_one_shard()
    write(firestore, [first], 0)
    [a] = [s for s in firestore.collection(LEDGER).stream() if s.get(COMMITTED_AT)]
    stamp = a.get(COMMITTED_AT)
    read_at = stamp + timedelta(seconds=1)
    page = ChangeFeed(firestore, 7, settle=2, clock=lambda: read_at).page()
    assert page["changes"] == []  # A is not settled yet: the cursor stays before it
    write(firestore, [second], 0)  # the late writer, same shard...
    late = next(s for s in firestore.collection(LEDGER).stream() if s.id != a.id and s.get(COMMITTED_AT))
    late.reference.update({COMMITTED_AT: stamp - timedelta(milliseconds=500)})  # ...stamped before A
    assert late.get(SHARD) == a.get(SHARD)
    later = ChangeFeed(firestore, 7, settle=2, clock=lambda: read_at + timedelta(seconds=5))
    served = follow(later, Cursor.decode(page["nextCursor"]))
    assert [c["key"] for c in served] == [f"aws/vm/{second}", f"aws/vm/{first}"]


def pair_in_one_shard() -> tuple[str, str]:
    seen: dict[int, str] = {}
    for i in range(1000):
        rid = f"late-{i}"
        shard = shard_of(f"aws/vm/{rid}")
        if shard in seen:
            return seen[shard], rid
        seen[shard] = rid
    raise AssertionError("no two resources in one shard")


def test_the_recent_list_pages_over_both_groups_of_resource_shards_once_newest_first(api, firestore):
    """Resources have more shards than one "in" takes: two queries per page, merged in updatedAt order."""
    rids = [f"rec-{i}" for i in range(20)]
    write(firestore, rids, 0)
    groups = {shard_of(f"aws/vm/{r}", RESOURCE_SHARDS, RESOURCE_SHARDS) >= MAX_IN for r in rids}
    assert groups == {False, True}, "the resources fill both groups"
    seen, token = [], None
    while True:
        body = api.get("/v1/resources?sort=-updatedAt&pageSize=3" + (f"&pageToken={token}" if token else "")).json
        seen += body["resources"]
        token = body.get("nextPageToken")
        if not token:
            break
    assert sorted(r["key"] for r in seen) == sorted(f"aws/vm/{r}" for r in rids)
    order = [(r["updatedAt"], r["key"]) for r in seen]
    assert order == sorted(order, reverse=True)


def test_merged_orders_mixed_values_as_firestore_does():
    class Snap:
        def __init__(self, value, doc_id):
            self.value, self.id = value, doc_id

        def get(self, field):
            return self.value

    class Query:
        def __init__(self, snaps):
            self.snaps = snaps

        def limit(self, n):
            return Query(self.snaps[:n])

        def stream(self, **options):
            return iter(self.snaps)

    a = Query([Snap(None, "a"), Snap("2026-01-01", "c"), Snap("2026-01-03", "e")])
    b = Query([Snap(None, "b"), Snap("2026-01-02", "d")])
    assert [s.id for s in merged([a, b], "staleAt", False, 4)] == ["a", "b", "c", "d"]
    descending = [Query(list(reversed(a.snaps))), Query(list(reversed(b.snaps)))]
    assert [s.id for s in merged(descending, "staleAt", True, 10)] == ["e", "d", "c", "b", "a"]


def test_the_backfill_gives_the_documents_written_before_the_sharding_their_shard(api, firestore):
    """A document without ``shard`` is in no sharded index: the deploy's backfill puts it back in them."""
    write(firestore, ["pre-1", "pre-2"], 0)
    write(firestore, ["pre-1"], 1)
    for snap in [*firestore.collection("resources").stream(), *firestore.collection(LEDGER).stream()]:
        snap.reference.update({SHARD: DELETE_FIELD})  # as an earlier version wrote them
    assert follow(ChangeFeed(firestore, 7, settle=0)) == []
    assert api.get("/v1/resources?sort=-updatedAt").json["resources"] == []
    assert backfill_shards(firestore, page=2) == {"resources": 2, LEDGER: 3}
    assert [c["newStatus"] for c in follow(ChangeFeed(firestore, 7, settle=0))] == [
        "PROVISIONING", "PROVISIONING", "RUNNING"]
    assert len(api.get("/v1/resources?sort=-updatedAt").json["resources"]) == 2
    assert backfill_shards(firestore) == {"resources": 0, LEDGER: 0}
    assert all(s.get(SHARD) == shard_of(s.get("key"), RESOURCE_SHARDS, RESOURCE_SHARDS)
               for s in firestore.collection("resources").stream())


def test_the_backfill_command_says_a_mistake_in_one_line(capsys):
    from infra.backfill_shards import main

    assert main(["--project", "p", "--page", "0"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
