"""Billing's usage is the same in any delivery order (issue 41's CI: the e2e usage chart failed under load).

Upsert's decisions (shared/upsert/decide.py) carried out on a store in memory, for billing's known fleet
(tests/billing_fleet.py) delivered in every order hypothesis tries, with copies: each resource's seconds per day
from the transitions upsert recorded (shared/state/usage/transitions.py, old and resumed sides included) are
the fleet's, written out by hand. The fleet's provider sends no ``lastTransitionTime``: a RUNNING that comes
before the STOPPED it followed looks like a re-report of RUNNING, and only the late STOPPED's resumed side
brings the run back. Firestore's part (the same on the emulator, fewer orders) is tests/functional/test_billing.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from dcm_status_contracts import timeutil
from dcm_status_contracts.status_update import StatusUpdate
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.state.documents import LEDGER, RESOURCES
from shared.state.usage.intervals import per_day, usage
from shared.state.usage.transitions import to_transition, transitions_path, with_sides
from shared.upsert.decide import decide
from shared.upsert.decision import Increment, LedgerEntry, Policy, Server, Stored, Unread, WriteOp
from tests import billing_fleet
from tests.profile import examples

POLICY = Policy()
FLEET = billing_fleet.fleet("u", "acme")
UPDATES = [u for r in FLEET for u in r.updates()]
AFTER_THE_WINDOW = datetime(2026, 6, 1, tzinfo=timezone.utc)


@dataclass
class MemoryStore:
    """Firestore as upsert's commits leave it: ``(collection path, doc id) -> document``."""

    docs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    now: datetime = datetime(2026, 4, 1, tzinfo=timezone.utc)

    def deliver(self, update: StatusUpdate) -> None:
        self.now += timedelta(seconds=10)  # a write token back for every resource: never hot
        stored = Stored(self.docs.get((RESOURCES, update.key.doc_id)),
                        LedgerEntry(update.dedup_id, self.docs.get((LEDGER, update.dedup_id))))
        decision = decide(POLICY, update, stored, self.now)
        if decision.unread is Unread.LEGACY_LEDGER:
            legacy = LedgerEntry(update.legacy_dedup_id, self.docs.get((LEDGER, update.legacy_dedup_id)))
            decision = decide(POLICY, update, Stored(stored.document, legacy), self.now)
        for w in decision.writes:
            before = self.docs.get((w.collection, w.doc_id)) if w.op is WriteOp.UPDATE else None
            self.docs[(w.collection, w.doc_id)] = {**(before or {}), **{
                k: self.value(v, (before or {}).get(k)) for k, v in w.data.items()}}

    def value(self, v: Any, old: Any) -> Any:
        if isinstance(v, Increment):
            return (old or 0) + v.by
        return timeutil.format(self.now) if v is Server.TIME else v

    def seconds_per_day(self, resource: billing_fleet.Resource) -> dict[str, int]:
        path = transitions_path(resource.key.doc_id)
        transitions = [to_transition(t) for (c, i), doc in sorted(self.docs.items()) if c == path
                       for t in with_sides(i, doc)]
        intervals = usage(transitions, resource.key.resource_type, billing_fleet.START, billing_fleet.END,
                          now=AFTER_THE_WINDOW)
        return {day: us // 1_000_000 for day, us in per_day(intervals).items()}


def delivered(order: list[StatusUpdate]) -> MemoryStore:
    store = MemoryStore()
    for u in order:
        store.deliver(u)
    return store


def test_in_the_order_published_each_resource_has_its_seconds():
    store = delivered(UPDATES)
    assert {str(r.key): store.seconds_per_day(r) for r in FLEET} == {str(r.key): r.expected for r in FLEET}


@settings(max_examples=examples(100), deadline=None)
@given(st.permutations(UPDATES * 2), st.lists(st.integers(0, len(UPDATES) * 2 - 1), max_size=len(UPDATES)))
def test_in_any_order_with_copies_each_resource_has_its_seconds(order, dropped):
    """Every update at least once (a copy is a redelivery: same message id), in any order."""
    kept = [u for i, u in enumerate(order) if i not in set(dropped)]
    seen = {u.dedup_id for u in kept}
    kept += [u for u in UPDATES if u.dedup_id not in seen]  # a dropped copy's original comes last
    store = delivered(kept)
    assert {str(r.key): store.seconds_per_day(r) for r in FLEET} == {str(r.key): r.expected for r in FLEET}


def test_a_late_stop_between_a_run_and_its_re_report_records_the_run_resumed():
    """RUNNING 10:00, RUNNING 14:00 (a re-report then), DELETED, then STOPPED 12:00 late: running again from
    14:00, the re-report's time."""
    [vm_g] = [r for r in FLEET if r.key.resource_id.startswith("vm-g")]
    running, deleted, stopped, restarted = vm_g.updates()
    store = delivered([running, restarted, deleted, stopped])
    assert store.seconds_per_day(vm_g) == vm_g.expected == {billing_fleet.D1: 12 * billing_fleet.H}
    [late] = [d for (c, _), d in store.docs.items() if c.endswith("transitions") and d.get("late")]
    assert late["resumedSide"]["status"] == "RUNNING" and late["resumedSide"]["at"] == restarted.last_transition_time
