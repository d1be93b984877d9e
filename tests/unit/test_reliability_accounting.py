"""The reliability harness's ``lost`` (infra/reliability/accounting.py ``unaccounted``): an event with no ledger
entry is a re-report of unchanged state only if its resource's document accounts for it, by id in its ring or
by count."""

from __future__ import annotations

from infra.reliability.accounting import unaccounted
from shared.state.documents import DOCUMENT_RE_REPORTS, RE_REPORT_RING, RE_REPORTED

KEY = "aws/vm/hot-1"


def document(named: list[str], taken: int) -> dict:
    return {"key": KEY, RE_REPORTED: [{"id": d, "in": f"m-{d}"} for d in named], DOCUMENT_RE_REPORTS: taken}


def test_re_reports_beyond_the_ring_are_accounted_for_by_the_documents_count():
    ring = [f"e{i}" for i in range(4, 4 + RE_REPORT_RING)]
    missing = [f"e{i}" for i in range(4 + RE_REPORT_RING)]  # 20 re-reports, none on the ledger
    assert unaccounted(missing, {d: KEY for d in missing}, {KEY: document(ring, 4 + RE_REPORT_RING)}) == []


def test_an_event_neither_named_nor_counted_is_lost():
    ring = [f"e{i}" for i in range(RE_REPORT_RING)]
    missing = ring + ["e-lost-1", "e-lost-2"]  # the document took 17 re-reports: one of the two is not among them
    assert unaccounted(missing, {d: KEY for d in missing}, {KEY: document(ring, RE_REPORT_RING + 1)}) == ["e-lost-2"]
    assert unaccounted(["x"], {"x": "aws/vm/never-stored"}, {}) == ["x"]


def test_a_row_whose_count_times_out_past_its_deadline_keeps_the_counts_last_read(monkeypatch):
    """The emulator under load can take longer than a read's timeout to count the ledger: past the row's
    deadline, the row is the counters as last read (its lost and wrong columns then say what is missing), not
    a crash of the whole run (2026-11-29: the burst row's last count timed out at load 60-110)."""
    from google.api_core.exceptions import DeadlineExceeded

    from infra.reliability import harness
    from infra.reliability.accounting import Published

    answers = iter([{"received": 3}])

    def stats(db):
        for answer in answers:
            return answer
        raise DeadlineExceeded("count timed out")

    monkeypatch.setattr(harness.queries, "stats", stats)
    monkeypatch.setattr(harness.time, "sleep", lambda seconds: None)
    published = Published()
    published.count = 10
    h = object.__new__(harness.Harness)  # no stack: settle reads the counters through queries.stats only
    h.db = None
    assert h.settle(published, timeout=0.01) == {"received": 3}
