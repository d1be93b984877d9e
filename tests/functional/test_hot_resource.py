"""A hot resource on the Firestore emulator: updates far faster than Firestore's one sustained write a
second to a document coalesce. Every update still gets its ledger entry, its history entry and its
change event (billing stays exact; the accounting holds); the document is written a bounded number of
times; the resource's newest state is always the last one (read through its ledger while it is hot);
the sweep writes the document once it may and stops treating it as hot once it is quiet."""

from __future__ import annotations

import math
import time
from datetime import timedelta

import pytest
from dcm_status_contracts import status_update, timeutil

from shared.runtime import settings
from shared.state.documents import HOT_BURST, HOT_QUIET, HOT_RATE, Outcome
from shared.state.resources import newest
from shared.sweep import handler as sweep_handler
from shared.sweep.handler import Sweep
from shared.upsert.handler import Upsert
from shared.upsert.store import StateStore
from tests.fakes import FakePublisher
from tests.functional.test_upsert import CountingBatches, normalized

DOC = "resources/aws~vm~i-1"


@pytest.fixture
def counting(firestore):
    return CountingBatches(firestore)


def apply_burst(upsert: Upsert, n: int, start: int = 0) -> list[Outcome]:
    return [upsert.apply(status_update.from_bytes(normalized(["RUNNING", "STOPPED"][i % 2],
                                                         f"2026-01-01T10:{i // 60:02d}:{i % 60:02d}Z", f"h{i}")))
            .outcome for i in range(start, start + n)]


def document_writes(counting: CountingBatches) -> int:
    return sum(1 for path in counting.paths if path.count("/") == 1 and path.startswith("resources/"))


def age(db, seconds: float, doc: str = DOC) -> None:
    """As if the document had been written ``seconds`` ago (its write tokens refilled meanwhile)."""
    db.document(doc).update({"writtenAt": timeutil.format(timeutil.now() - timedelta(seconds=seconds))})


def make_hot(upsert: Upsert, rid: str, n: int = 8) -> str:
    """``n`` quick updates of ``rid``: more than its document's write burst; the last one's event id."""
    for i in range(n):
        event_id = f"{rid}-{i}"
        update = normalized(["RUNNING", "STOPPED"][i % 2], f"2026-01-01T10:00:{i:02d}Z", event_id, rid=rid)
        assert upsert.apply(status_update.from_bytes(update)).outcome is Outcome.APPLIED
    return event_id


def test_a_burst_coalesces_into_bounded_document_writes_and_loses_no_update(firestore, counting, publisher,
                                                                             monkeypatch):
    # a token a minute: the burst outruns the document however slow this machine is (at 1/s a loaded one
    # can refill it in time to write the last update, and the coalesced read goes untested)
    monkeypatch.setattr("shared.state.documents.HOT_RATE", 1 / 60)
    upsert = Upsert(StateStore(counting), publisher, "projects/p/topics/dcm-status-changed")
    started = time.monotonic()
    outcomes = apply_burst(upsert, 40)
    elapsed = time.monotonic() - started
    assert outcomes == [Outcome.APPLIED] * 40
    # the document: a burst of HOT_BURST, the mark, then HOT_RATE a second at most
    assert document_writes(counting) <= HOT_BURST + 1 + math.ceil(elapsed * HOT_RATE)
    assert firestore.document(DOC).get().to_dict()["hot"] is True
    # nothing lost: a ledger entry that is its history entry (issue 32), and a change event, each
    entries = [s.to_dict() for s in firestore.collection("events").stream()]
    assert len(entries) == 40 and all("recordedAt" in e and "expireAt" not in e for e in entries)
    assert not list(firestore.document(DOC).collection("history").stream())
    changes = publisher.on("dcm-status-changed")
    assert [c.attributes["newStatus"] for c in changes] == [["RUNNING", "STOPPED"][i % 2] for i in range(40)]
    assert [c.attributes["oldStatus"] for c in changes[1:]] == [c.attributes["newStatus"] for c in changes[:-1]]
    # the newest state is the last update, though the document was not written with it
    stored = firestore.document(DOC).get().to_dict()
    assert stored["eventId"] != "h39" and newest(firestore, stored)["eventId"] == "h39"


def test_an_older_update_of_a_hot_resource_is_stale_against_its_coalesced_state(firestore, counting, publisher):
    upsert = Upsert(StateStore(counting), publisher, "projects/p/topics/dcm-status-changed")
    apply_burst(upsert, 20)
    late = upsert.apply(status_update.from_bytes(normalized("STOPPED", "2026-01-01T10:00:15Z", "h15-late")))
    assert late.outcome is Outcome.STALE  # older than h19, which only the ledger holds
    assert newest(firestore, firestore.document(DOC).get().to_dict())["eventId"] == "h19"


def test_the_sweep_writes_a_hot_document_when_it_may_then_lets_it_cool(firestore, counting, publisher, monkeypatch):
    rate = 1 / 60  # a token a minute: the burst outruns the document however slow this machine is (at 1/s a
    monkeypatch.setattr("shared.state.documents.HOT_RATE", rate)  # loaded one wrote h19, and the sweep had nothing to do)
    upsert = Upsert(StateStore(counting), publisher, "projects/p/topics/dcm-status-changed")
    apply_burst(upsert, 20)
    sweep = Sweep(settings.from_env(), firestore, FakePublisher())
    assert firestore.document(DOC).get().to_dict()["eventId"] != "h19"
    assert sweep.flush_hot(timeutil.now()) == 0  # out of tokens: not yet
    age(firestore, 2 / rate)
    assert sweep.flush_hot(timeutil.now()) == 1
    doc = firestore.document(DOC).get().to_dict()
    assert (doc["eventId"], doc["status"], doc["hot"]) == ("h19", "STOPPED", True)
    age(firestore, HOT_QUIET)
    assert sweep.flush_hot(timeutil.now()) == 1 and "hot" not in firestore.document(DOC).get().to_dict()
    assert sweep.flush_hot(timeutil.now()) == 0  # nothing hot any more: one query, no write
    # cool again: the next update is written to the document at once
    assert apply_burst(upsert, 1, start=20) == [Outcome.APPLIED]
    assert firestore.document(DOC).get().to_dict()["eventId"] == "h20"


def test_the_sweep_takes_the_hot_documents_written_longest_ago_first(firestore, publisher, monkeypatch):
    """More hot resources than a tick looks at: the first ones by id, up to date but not yet quiet,
    do not hold the others back tick after tick."""
    upsert = Upsert(StateStore(firestore), publisher, "projects/p/topics/dcm-status-changed")
    sweep = Sweep(settings.from_env(), firestore, FakePublisher())
    with monkeypatch.context() as slow:  # a token a minute while they are made hot, however slow this machine is
        slow.setattr("shared.state.documents.HOT_RATE", 1 / 60)  # (at 1/s a loaded one wrote b0's last update at once)
        last = {rid: make_hot(upsert, rid) for rid in ("a0", "a1", "a2", "b0", "b1", "b2")}
    docs = {rid: f"resources/aws~vm~{rid}" for rid in last}
    assert all(firestore.document(d).get().to_dict()["hot"] for d in docs.values())
    for rid in ("b0", "b1", "b2"):
        age(firestore, 4 / HOT_RATE, docs[rid])  # behind their ledger, and may take a write
    for rid in ("a0", "a1", "a2"):
        age(firestore, 2 / HOT_RATE, docs[rid])
    monkeypatch.setattr(sweep_handler, "HOT_BATCH", 3)
    assert sweep.flush_hot(timeutil.now()) == 3
    assert {rid: firestore.document(docs[rid]).get().to_dict()["eventId"] for rid in ("b0", "b1", "b2")} == \
        {rid: last[rid] for rid in ("b0", "b1", "b2")}
    assert sweep.flush_hot(timeutil.now()) == 3  # the a's, now the ones written longest ago
    assert all(firestore.document(d).get().to_dict()["eventId"] == last[rid] for rid, d in docs.items())
