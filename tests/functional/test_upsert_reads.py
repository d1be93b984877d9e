"""What upsert reads and writes per update, on the Firestore emulator (issue 32): the resource document first,
the ledger entry only when the update may have been processed before; a re-report of unchanged state is one
write (the document, with a ring of its latest re-reports), and every copy of an update is still found out."""

from __future__ import annotations

import orjson
import pytest
from dcm_status_contracts import status_update
from google.cloud.firestore_v1.client import Client
from google.cloud.firestore_v1.document import DocumentReference
from google.cloud.firestore_v1.query import Query

from shared.api import queries
from shared.state.documents import DOCUMENT_RE_REPORTS, RE_REPORT_RING, RE_REPORTED, Outcome
from shared.upsert.handler import Upsert
from shared.upsert.store import StateStore
from tests.functional.test_hot_resource import make_hot
from tests.functional.test_upsert import CountingBatches, normalized, resource

CHANGED = "projects/p/topics/dcm-status-changed"


class Reads:
    """Every document read through the Firestore client: ``get`` of one, ``get_all`` of several, queries."""

    def __init__(self, monkeypatch):
        self.paths: list[str] = []
        self.queries = 0
        get, get_all, stream = DocumentReference.get, Client.get_all, Query.stream

        def counted_get(ref, *a, **k):
            self.paths.append(ref.path)
            return get(ref, *a, **k)

        def counted_get_all(client, refs, *a, **k):
            refs = list(refs)
            self.paths.extend(r.path for r in refs)
            return get_all(client, refs, *a, **k)

        def counted_stream(query, *a, **k):
            self.queries += 1
            return stream(query, *a, **k)

        monkeypatch.setattr(DocumentReference, "get", counted_get)
        monkeypatch.setattr(Client, "get_all", counted_get_all)
        monkeypatch.setattr(Query, "stream", counted_stream)

    def clear(self) -> None:
        self.paths.clear()
        self.queries = 0

    def collections(self) -> list[str]:
        return sorted(p.split("/")[0] for p in self.paths)


@pytest.fixture
def reads(monkeypatch) -> Reads:
    return Reads(monkeypatch)


@pytest.fixture
def counting(firestore) -> CountingBatches:
    return CountingBatches(firestore)


@pytest.fixture
def upsert(counting, publisher) -> Upsert:
    return Upsert(StateStore(counting), publisher, CHANGED)


@pytest.fixture
def cool(monkeypatch) -> None:
    """The document's write tokens refill at once: many quick updates of one resource never make it hot (a hot
    resource's re-reports are ledger entries, not in the ring: test_a_hot_resource_s_re_report_...)."""
    monkeypatch.setattr("shared.state.documents.HOT_RATE", 1000.0)


def update(status: str, time: str, event_id: str, ingress_id: str | None = None, message: str = "up",
           transition: bool = False, rid: str = "i-1") -> status_update.StatusUpdate:
    return status_update.from_bytes(normalized(status, time, event_id, ingress_id, message=message,
                                           transition=transition, rid=rid))


def at(minute: int, second: int = 0) -> str:
    return f"2026-01-01T10:{minute:02d}:{second:02d}Z"


def ledger(db) -> dict[str, str]:
    return {d["eventId"]: d["outcome"] for d in (s.to_dict() for s in db.collection("events").stream())}


def duplicates(db) -> int:
    return len(list(db.collection("duplicates").stream()))


def written(counting: CountingBatches) -> list[str]:
    return sorted(p.split("/")[0] if p.count("/") == 1 else p.split("/")[2] for p in counting.paths)


def test_a_new_change_reads_its_resource_only(upsert, firestore, counting, reads):
    assert upsert.apply(update("RUNNING", at(0), "e1")).outcome is Outcome.APPLIED
    assert reads.collections() == ["resources"]  # the document does not exist yet: still one read
    reads.clear()
    counting.paths.clear()
    assert upsert.apply(update("STOPPED", at(1), "e2")).outcome is Outcome.APPLIED
    assert reads.collections() == ["resources"] and reads.queries == 0
    # the ledger entry (it is the history entry), the document, the change's transition of usage (issue 40)
    assert written(counting) == ["events", "resources", "transitions"]


def test_a_re_report_is_one_read_and_one_write_and_no_ledger_entry(upsert, firestore, counting, reads, publisher):
    upsert.apply(update("RUNNING", at(0), "e1"))
    reads.clear()
    counting.paths.clear()
    again = upsert.apply(update("RUNNING", at(1), "e2"))
    assert again.outcome is Outcome.UNCHANGED and again.change is None
    assert reads.collections() == ["resources"] and counting.paths == ["resources/aws~vm~i-1"]
    doc = resource(firestore)
    assert (doc["eventId"], doc["reReports"], doc[DOCUMENT_RE_REPORTS], doc["updates"]) == ("e2", 1, 1, 1)
    assert [e["in"] for e in doc[RE_REPORTED]] == ["in-e2"]
    assert ledger(firestore) == {"e1": "applied"} and len(publisher.on("dcm-status-changed")) == 1


def test_a_redelivered_re_report_is_a_duplicate_found_in_the_ring_without_a_ledger_read(
        upsert, firestore, counting, reads):
    upsert.apply(update("RUNNING", at(0), "e1"))
    upsert.apply(update("RUNNING", at(1), "e2"))
    reads.clear()
    counting.paths.clear()
    copy = upsert.apply(update("RUNNING", at(1), "e2"))  # the same ingress message, delivered again
    assert copy.outcome is Outcome.DUPLICATE and copy.change is None
    assert reads.collections() == ["resources"] and counting.paths == []
    assert resource(firestore)["reReports"] == 1 and duplicates(firestore) == 0


def test_a_re_report_published_twice_is_counted_as_a_duplicate_publication(upsert, firestore):
    upsert.apply(update("RUNNING", at(0), "e1"))
    upsert.apply(update("RUNNING", at(1), "e2"))
    copy = upsert.apply(update("RUNNING", at(1), "e2", ingress_id="in-e2-republished"))
    assert copy.outcome is Outcome.DUPLICATE
    [dup] = [d.to_dict() for d in firestore.collection("duplicates").stream()]
    assert dup["eventId"] == "e2" and dup["dedupId"] == update("RUNNING", at(1), "e2").dedup_id
    assert resource(firestore)["reReports"] == 1


def test_a_copy_of_a_re_report_after_newer_reports_is_still_a_duplicate_within_the_ring(upsert, firestore, cool):
    upsert.apply(update("RUNNING", at(0), "e1"))
    upsert.apply(update("RUNNING", at(1), "r1"))
    for i in range(2, RE_REPORT_RING + 1):  # the ring's other places: newer re-reports
        assert upsert.apply(update("RUNNING", at(i), f"r{i}")).outcome is Outcome.UNCHANGED
    assert upsert.apply(update("STOPPED", at(30), "e2", message="down")).outcome is Outcome.APPLIED  # no re-report
    late_copy = upsert.apply(update("RUNNING", at(1), "r1", ingress_id="in-r1-again"))
    assert late_copy.outcome is Outcome.DUPLICATE
    assert duplicates(firestore) == 1 and set(ledger(firestore).values()) == {"applied"}
    assert resource(firestore)["status"] == "STOPPED"


def test_a_copy_of_a_re_report_beyond_the_ring_is_kept_as_stale(upsert, firestore, publisher, cool):
    """The bound: a copy that comes after more than RE_REPORT_RING newer re-reports of its resource has no trace
    left (no ledger entry, out of the ring): older than the stored state, it is kept as stale (history, a late
    change event), the state untouched."""
    upsert.apply(update("RUNNING", at(0), "e1"))
    upsert.apply(update("RUNNING", at(1), "r1"))
    for i in range(2, RE_REPORT_RING + 2):
        upsert.apply(update("RUNNING", at(i), f"r{i}"))
    assert len(resource(firestore)[RE_REPORTED]) == RE_REPORT_RING
    late_copy = upsert.apply(update("RUNNING", at(1), "r1"))
    assert late_copy.outcome is Outcome.STALE
    assert ledger(firestore)["r1"] == "stale" and resource(firestore)["eventId"] == f"r{RE_REPORT_RING + 1}"
    assert orjson.loads(publisher.on("dcm-status-changed")[-1].data)["data"]["late"] is True


def test_a_duplicate_of_an_applied_event_reads_its_ledger_entry_and_announces_a_pending_change(
        upsert, firestore, publisher, reads):
    publisher.fail = True
    with pytest.raises(Exception):
        upsert.apply(update("RUNNING", at(0), "e1"))  # committed, its change not published: redelivered
    publisher.fail = False
    reads.clear()
    redelivered = upsert.apply(update("RUNNING", at(0), "e1"))
    assert redelivered.outcome is Outcome.DUPLICATE and redelivered.change is not None
    assert reads.collections() == ["events", "resources"]  # the document says "this very event": the ledger
    [announced] = publisher.on("dcm-status-changed")
    assert orjson.loads(announced.data)["data"]["newStatus"] == "RUNNING"
    # once announced, a later copy announces nothing
    assert upsert.apply(update("RUNNING", at(0), "e1")).change is None
    assert len(publisher.on("dcm-status-changed")) == 1 and resource(firestore)["updates"] == 1


def test_a_duplicate_of_an_applied_event_after_newer_ones_is_found_in_the_ledger(upsert, firestore, publisher):
    upsert.apply(update("RUNNING", at(0), "e1"))
    upsert.apply(update("STOPPED", at(1), "e2", message="down"))
    copy = upsert.apply(update("RUNNING", at(0), "e1", ingress_id="in-e1-again"))
    assert copy.outcome is Outcome.DUPLICATE  # not stale: older than the state, and its ledger entry says so
    # its change, which the first delivery may not have sent, is sent again (same id), then marked announced
    first, _, again = publisher.on("dcm-status-changed")
    assert orjson.loads(first.data)["id"] == orjson.loads(again.data)["id"]
    assert upsert.apply(update("RUNNING", at(0), "e1", ingress_id="in-e1-third")).change is None
    assert len(publisher.on("dcm-status-changed")) == 3 and duplicates(firestore) == 2
    assert resource(firestore)["status"] == "STOPPED" and set(ledger(firestore).values()) == {"applied"}


def test_a_stale_update_reads_the_ledger_and_is_kept_once(upsert, firestore, publisher, reads):
    upsert.apply(update("STOPPED", at(1), "e2", message="down"))
    reads.clear()
    stale = upsert.apply(update("RUNNING", at(0), "e1"))
    assert stale.outcome is Outcome.STALE
    assert "events" in reads.collections()  # older than the state: it may have been processed before
    assert upsert.apply(update("RUNNING", at(0), "e1")).outcome is Outcome.DUPLICATE
    history = [e.to_dict() for e in firestore.collection("events").stream() if "recordedAt" in e.to_dict()]
    assert sorted(h["outcome"] for h in history) == ["applied", "stale"]  # history entries: the ledger's


def test_a_conflict_on_the_ledger_entry_reads_both_and_decides_again(firestore, publisher):
    """Another delivery of the same event commits between this one's read and its commit: this one's ledger
    create fails (AlreadyExists); the next attempt reads the ledger entry too and finds a duplicate."""
    other = StateStore(firestore)

    class Racing(StateStore):
        raced = False

        def _commit(self, writes, resource_written_at):
            if not self.raced:
                Racing.raced = True
                assert other.apply(the_update).outcome is Outcome.APPLIED  # the other delivery wins
            return super()._commit(writes, resource_written_at)

    the_update = update("RUNNING", at(0), "e1")
    result = Racing(firestore).apply(the_update)
    assert result.outcome is Outcome.DUPLICATE and Racing.raced
    assert resource(firestore)["updates"] == 1 and ledger(firestore) == {"e1": "applied"}
    assert result.change is not None  # the winner's change, not yet marked announced: published again, same id


def test_a_ledger_entry_the_document_no_longer_shows_is_a_create_conflict_then_a_duplicate(upsert, firestore):
    """The document gone (its provider's resource purged), the event redelivered: it looks newer than
    nothing, its ledger create fails, and the next attempt finds it processed: not applied again."""
    upsert.apply(update("RUNNING", at(0), "e1"))
    firestore.collection("resources").document("aws~vm~i-1").delete()
    assert upsert.apply(update("RUNNING", at(0), "e1")).outcome is Outcome.DUPLICATE
    assert resource(firestore) is None


def test_a_hot_resource_s_re_report_rides_on_its_ledger_entry_and_its_copy_is_a_duplicate(
        firestore, counting, publisher, reads, monkeypatch):
    monkeypatch.setattr("shared.state.documents.HOT_RATE", 1 / 60)  # stays hot however slow this machine is
    upsert = Upsert(StateStore(counting), publisher, CHANGED)
    last = make_hot(upsert, "hot-1")
    assert firestore.document("resources/aws~vm~hot-1").get().to_dict()["hot"] is True
    counting.paths.clear()
    reads.clear()
    again = update("STOPPED", "2026-01-01T10:00:30Z", "hot-rr", rid="hot-1", message="")
    assert upsert.apply(again).outcome is Outcome.UNCHANGED
    assert counting.paths == [f"events/{again.dedup_id}"]  # one write: the ledger entry carries the state
    assert reads.collections() == ["events", "resources"] and reads.queries == 1  # as ever for a hot one
    assert ledger(firestore)["hot-rr"] == "unchanged"
    assert upsert.apply(again).outcome is Outcome.DUPLICATE
    assert last != "hot-rr"


def test_stats_count_re_reports_on_documents_and_on_the_ledger(upsert, firestore, counting, publisher):
    upsert.apply(update("RUNNING", at(0), "e1"))
    upsert.apply(update("RUNNING", at(1), "e2"))
    upsert.apply(update("RUNNING", at(2), "e3"))
    upsert.apply(update("RUNNING", at(2), "e3", ingress_id="in-e3-again"))  # a distinct publication
    make_hot(upsert, "hot-1")
    upsert.apply(update("STOPPED", "2026-01-01T10:00:30Z", "hot-rr", rid="hot-1", message=""))
    s = queries.stats(firestore)
    assert (s["applied"], s["unchanged"], s["duplicate"], s["stale"]) == (1 + 8, 2 + 1, 1, 0)
    assert s["received"] == 1 + 2 + 1 + 8 + 1  # what was published, each once
