"""The resync marker (shared/contracts/resync.py): read from an event's attributes, refused when it could
be misread, and the decision a complete batch leads to."""

from __future__ import annotations

import pytest
from dcm_status_contracts.errors import Rejected
from dcm_status_contracts.resync import ResyncMark, not_in_snapshot

MARK = ResyncMark("b1", 3, 0, "2026-11-22T10:00:00.000000Z", ("container", "vm"))


def test_a_mark_round_trips_through_event_attributes_and_the_internal_contract():
    assert ResyncMark.of(MARK.attributes()) == MARK
    assert ResyncMark.of({k: str(v) for k, v in MARK.attributes().items()}) == MARK  # binary mode: strings
    assert ResyncMark.from_dict(MARK.to_dict()) == MARK
    assert ResyncMark.of({"id": "e1", "source": "s"}) is None


@pytest.mark.parametrize("change,says", [
    ({"resynctotal": None}, "missing resynctotal"),
    ({"resyncindex": 3}, "invalid resyncindex"),  # 0..total-1
    ({"resyncindex": -1}, "invalid resyncindex"),
    ({"resynctotal": 0, "resyncindex": 0}, "invalid resynctotal"),
    ({"resynctotal": "many"}, "invalid resynctotal"),
    ({"resyncat": "yesterday"}, "invalid resyncat"),
    ({"resyncscope": ""}, "invalid resyncscope"),
    ({"resyncid": ""}, "invalid resyncid"),
])
def test_a_partial_or_malformed_mark_is_refused_so_it_can_never_delete_anything(change, says):
    attrs = {**MARK.attributes(), **change}
    attrs = {k: v for k, v in attrs.items() if v is not None}
    with pytest.raises(Rejected, match=says) as refused:
        ResyncMark.of(attrs)
    assert refused.value.reason.value == "not_a_cloudevent"


def held(key: str, status: str = "RUNNING", observed: str = "2026-11-22T09:00:00.000000Z", listed: str | None = None,
         rtype: str = "vm") -> dict:
    return {"key": key, "resourceType": rtype, "status": status, "observedAt": observed,
            **({"resync": {"id": listed}} if listed else {})}


def test_a_complete_batch_deletes_only_what_it_should():
    docs = [
        held("aws/vm/listed", listed="b1"),
        held("aws/vm/gone"),  # in scope, not listed, last reported before the snapshot began
        held("aws/vm/older-batch", listed="b0"),  # listed by an earlier batch only: gone too
        held("aws/vm/new", observed="2026-11-22T10:00:01.000000Z"),  # reported after the snapshot began
        held("aws/vm/at-the-start", observed="2026-11-22T10:00:00.000000Z"),  # at the very instant: not before
        held("aws/vm/deleted", status="DELETED"),
        held("aws/cluster/other-type", rtype="cluster"),  # outside the scope
    ]
    assert not_in_snapshot(MARK, docs) == ["aws/vm/gone", "aws/vm/older-batch"]
