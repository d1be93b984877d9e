"""The pure parts of hot-resource coalescing (shared/state/documents.py): the document's write tokens,
and which of the document and the coalesced states is the newest."""

from __future__ import annotations

from datetime import timedelta

from dcm_status_contracts import timeutil

from shared.state.documents import (
    HOT_BURST,
    HOT_RATE,
    newest_state,
    without_bookkeeping,
    write_tokens,
)

NOW = timeutil.parse("2026-11-22T10:00:00Z")


def written(seconds_ago: float, tokens: float) -> dict:
    return {"writtenAt": timeutil.format(NOW - timedelta(seconds=seconds_ago)), "writeTokens": tokens}


def test_a_new_document_has_a_burst_then_tokens_come_back_at_the_rate_up_to_the_burst():
    assert write_tokens({}, NOW) == HOT_BURST
    assert write_tokens(written(0, 0.0), NOW) == 0.0  # spent: hot
    assert write_tokens(written(0.5, 0.0), NOW) == 0.5 * HOT_RATE  # still below one
    assert write_tokens(written(1, 0.0), NOW) == 1.0 * HOT_RATE
    assert write_tokens(written(3600, 0.0), NOW) == HOT_BURST  # never more than the burst
    assert write_tokens(written(-5, 2.0), NOW) == 2.0  # a clock behind the write's adds nothing


def state(event_id: str, observed: str, **extra) -> dict:
    return {"eventId": event_id, "eventSource": "s", "observedAt": observed, "publishedAt": None, **extra}


def test_the_newest_state_is_the_document_or_a_newer_coalesced_one():
    doc = state("d", "2026-11-22T10:00:01Z")
    older, newer = state("o", "2026-11-22T10:00:00Z"), state("n", "2026-11-22T10:00:02Z")
    assert newest_state(doc, []) is doc
    assert newest_state(doc, [older]) is doc
    assert newest_state(doc, [older, newer]) is newer and newest_state(doc, [newer, older]) is newer
    assert newest_state(None, [older]) is older and newest_state(None, []) is None


def test_a_carried_state_never_carries_the_documents_bookkeeping():
    carried = without_bookkeeping(state("d", "2026-11-22T10:00:01Z", hot=True, writtenAt="x", writeTokens=0.2,
                                        documentWrites=7, status="RUNNING"))
    assert set(carried) == {"eventId", "eventSource", "observedAt", "publishedAt", "status"}
