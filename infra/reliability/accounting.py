"""What a reliability scenario published and how it was accounted for: its ``Published`` record and its ``Row``
(one line of the table), and ``unaccounted``, which decides that a valid event with no ledger entry was lost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.state.documents import DOCUMENT_RE_REPORTS, RE_REPORTED


@dataclass
class Row:
    scenario: str
    published: int = 0
    applied: int = 0
    unchanged: int = 0
    duplicate: int = 0
    stale: int = 0
    deadlettered: int = 0
    lost: int = 0
    wrong: int = 0
    errors: int = 0  # 5xx answers (fuzz) or crashed processes
    seconds: float = 0.0
    note: str = ""

    def line(self) -> str:
        return (f"{self.scenario:<22} {self.published:>7} {self.applied:>7} {self.unchanged:>9} {self.duplicate:>9} "
                f"{self.stale:>6} {self.deadlettered:>7} {self.lost:>5} {self.wrong:>6} {self.errors:>4} "
                f"{self.seconds:>7.1f}  {self.note}")


HEADER = (f"{'scenario':<22} {'publ.':>7} {'applied':>7} {'unchanged':>9} {'duplicate':>9} {'stale':>6} "
          f"{'dead-l.':>7} {'lost':>5} {'wrong':>6} {'5xx':>4} {'seconds':>7}  note")


@dataclass
class Published:
    """What a scenario published: to check every message afterwards."""

    events: dict[str, tuple[str, str]] = field(default_factory=dict)  # dedup id -> (key, status) of valid events
    invalid: list[tuple[str, str]] = field(default_factory=list)  # (topic, message id) of malformed ones
    final: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (time, status) of the newest report
    count: int = 0  # messages published, valid or not


def unaccounted(missing: list[str], key_of: dict[str, str], docs: dict[str, dict[str, Any]]) -> list[str]:
    """The events of ``missing`` (no ledger entry) that their resource's document does not account for as
    re-reports of unchanged state (which write no ledger entry): by id in its ring of the latest
    ``RE_REPORT_RING``, or by count beyond it (``documentReReports`` counts every one the document took,
    the ring names the last ones: a resource re-reported 20 times without a ledger entry, as a burst
    reordered under load does, holds 4 that only the count vouches for). An event the count does not
    cover either is lost."""
    by_key: dict[str, list[str]] = {}
    for d in missing:
        by_key.setdefault(key_of[d], []).append(d)
    out: list[str] = []
    for key, ids in by_key.items():
        doc = docs.get(key) or {}
        ring = {e.get("id") for e in doc.get(RE_REPORTED) or []}
        beyond = max(0, int(doc.get(DOCUMENT_RE_REPORTS, 0)) - len(ring))
        out += [d for d in ids if d not in ring][beyond:]
    return out
