"""Whether a change event goes to notify: the callbacks' summary (what the enabled callbacks can match,
kept bounded), upsert's cached view of it (its TTL on a fake clock, fail-open), the ``notify`` attribute
and the dcm-notify subscription filter that reads it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from dcm_status_contracts import status_changed

from shared.callbacks import summary as callback_summary
from shared.callbacks.registration import Callback, Filter, Scope
from shared.callbacks.summary import MAX_FILTERS, CallbackSummary
from shared.callbacks.view import CallbackView

REPO = Path(__file__).resolve().parents[2]


def resource_cb(key: str, cid: str = "r1", disabled: str | None = None) -> Callback:
    return Callback(cid, "https://h.example/cb", Scope.RESOURCE, "2026-01-01T00:00:00Z", (), key=key,
                    disabled=disabled)


def filter_cb(cid: str = "f1", disabled: str | None = None, **where) -> Callback:
    return Callback(cid, "https://h.example/cb", Scope.FILTER, "2026-01-01T00:00:00Z", (),
                    filter=Filter.of(where), disabled=disabled)


def change(provider="aws", resource_type="vm", status="RUNNING", tenant=None) -> dict:
    return {"key": f"{provider}/{resource_type}/i-1", "provider": provider, "resourceType": resource_type,
            "newStatus": status, "resource": {"metadata": {"tenant": tenant} if tenant else {}}}


# ---- the summary ---------------------------------------------------------------------------------
def test_an_empty_summary_matches_nothing():
    assert CallbackSummary().empty and not CallbackSummary().may_match(change())


def test_a_resource_callback_makes_its_provider_and_type_match_and_nothing_else():
    s = CallbackSummary().changed(None, resource_cb("aws/vm/i-9"))
    assert s.may_match(change()) and s.may_match(change(status="STOPPED"))  # coarse: any aws/vm resource
    assert not s.may_match(change(resource_type="disk")) and not s.may_match(change(provider="azure"))
    assert s.resource_types == {"aws/vm"} and "i-9" not in str(s.to_doc())  # keys are never listed


def test_resource_callbacks_are_added_to_the_summary_never_taken_from_it():
    """So only a new provider/type writes the summary (no hot document when many resources get callbacks);
    a pair whose callbacks are gone stays "maybe" until a rebuild recounts."""
    first, second = resource_cb("aws/vm/i-1", "r1"), resource_cb("aws/vm/i-2", "r2")
    s = CallbackSummary().changed(None, first)
    assert s.changed(None, second).resource_types == s.resource_types  # nothing new: nothing to write
    assert s.changed(first, None).may_match(change())
    assert s.changed(first, resource_cb("aws/vm/i-1", "r1", disabled="410 Gone")).may_match(change())


def test_a_filter_callback_matches_as_its_filter_does_labels_included():
    s = CallbackSummary().changed(None, filter_cb(status="STOPPED", label="tenant:acme"))
    assert s.needs_resource
    assert s.may_match(change(status="STOPPED", tenant="acme"))
    assert not s.may_match(change(status="STOPPED", tenant="other")) and not s.may_match(change(tenant="acme"))


def test_an_empty_filter_matches_every_change():
    assert CallbackSummary().changed(None, filter_cb()).may_match(change(provider="x", resource_type="y"))


def test_identical_filters_are_listed_once_and_counted_and_removal_empties_the_summary():
    a, b = filter_cb("f1", status="STOPPED"), filter_cb("f2", status="STOPPED")
    s = CallbackSummary().changed(None, a).changed(None, b)
    assert len(s.filters) == 1 and list(s.filters.values())[0][1] == 2
    s = s.changed(a, None)
    assert s.may_match(change(status="STOPPED"))  # b is still there
    s = s.changed(b, None).changed(filter_cb("f3", provider="x"), None)  # removing one never counted: at 0
    assert s.empty and s.revision == 5


def test_a_disabled_callback_counts_for_nothing_and_enabling_it_counts_it_again():
    on, off = filter_cb(), filter_cb(disabled="410 Gone")
    s = CallbackSummary().changed(None, on)
    assert s.changed(on, off).empty
    assert not s.changed(on, off).changed(off, off).may_match(change())  # disabled -> disabled: nothing
    assert s.changed(on, off).changed(off, on).may_match(change())


def test_past_max_filters_every_change_may_match_until_they_are_gone():
    cbs = [filter_cb(f"f{i}", provider=f"p{i}") for i in range(MAX_FILTERS + 1)]
    s = CallbackSummary()
    for cb in cbs:
        s = s.changed(None, cb)
    assert len(s.filters) == MAX_FILTERS and s.overflow == 1
    assert s.may_match(change(provider="nobody"))  # the one not listed could be anything
    for cb in cbs:
        s = s.changed(cb, None)
    assert s.empty


def test_the_stored_form_reads_back_the_same():
    s = CallbackSummary().changed(None, filter_cb(provider="aws", label="region:eu")).changed(
        None, resource_cb("k8s/pod/ns~p"))
    doc = {k: v for k, v in s.to_doc().items() if k != "updatedAt"}
    assert CallbackSummary.from_doc(doc) == s


def test_a_document_that_is_no_summary_is_refused_so_the_reader_fails_open():
    for doc in ({"filters": {"x": {"filter": {"colour": "red"}, "count": 1}}}, {"filters": {"x": {"count": 1}}},
                {"filters": ["x"]}, {"resourceTypes": {"aws/vm": 1}}):
        with pytest.raises(ValueError, match="not a callback summary"):
            CallbackSummary.from_doc(doc)


# ---- upsert's view: TTL, fail-open ----------------------------------------------------------------
class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Reads:
    """What ``callback_summary.read`` answers, in turn; counts the reads."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.count = 0

    def __call__(self, db, timeout):
        self.count += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


ATTRS = {"provider": "aws", "resourceType": "vm", "newStatus": "STOPPED", "key": "aws/vm/i-1", "late": "false"}
STOPPED_ONLY = CallbackSummary().changed(None, filter_cb(status="STOPPED"))


def view_with(monkeypatch, reads: Reads, ttl: float, clock: Clock | None = None) -> CallbackView:
    monkeypatch.setattr(callback_summary, "read", reads)
    return CallbackView(object(), ttl, clock or Clock())


def test_the_summary_is_read_once_per_ttl(monkeypatch):
    clock, reads = Clock(), Reads(CallbackSummary(), STOPPED_ONLY)
    view = view_with(monkeypatch, reads, 10, clock)
    assert not view.wanted(ATTRS, b"")
    clock.now += 9.9
    assert not view.wanted(ATTRS, b"") and reads.count == 1  # cached: the new callback is not seen yet
    clock.now += 0.1
    assert view.wanted(ATTRS, b"") and reads.count == 2
    assert not view.wanted({**ATTRS, "newStatus": "RUNNING"}, b"") and reads.count == 2


def test_ttl_0_reads_at_every_change(monkeypatch):
    reads = Reads(CallbackSummary(), STOPPED_ONLY)
    view = view_with(monkeypatch, reads, 0)
    assert not view.wanted(ATTRS, b"") and view.wanted(ATTRS, b"") and reads.count == 2


@pytest.mark.parametrize("answer", [RuntimeError("firestore down"), TimeoutError("slow"), ValueError("no summary"),
                                    None])
def test_a_failed_read_or_an_unknown_summary_means_notify_looks(monkeypatch, answer):
    view = view_with(monkeypatch, Reads(answer), 10)
    assert view.wanted({**ATTRS, "newStatus": "ANYTHING", "provider": "nobody"}, b"")


def test_a_failed_read_is_tried_again_after_the_ttl(monkeypatch):
    clock, reads = Clock(), Reads(RuntimeError("down"), CallbackSummary())
    view = view_with(monkeypatch, reads, 5, clock)
    assert view.wanted(ATTRS, b"")
    clock.now += 5
    assert not view.wanted(ATTRS, b"") and reads.count == 2


def test_a_late_change_never_goes_to_notify_which_sends_none(monkeypatch):
    reads = Reads(RuntimeError("not even read"))
    view = view_with(monkeypatch, reads, 10)
    assert not view.wanted({**ATTRS, "late": "true"}, b"") and reads.count == 0


def test_a_label_filter_reads_the_resource_from_the_body_and_a_bad_body_means_notify_looks(monkeypatch):
    view = view_with(monkeypatch, Reads(CallbackSummary().changed(None, filter_cb(label="tenant:acme"))), 10)
    body = b'{"data": {"resource": {"metadata": {"tenant": "acme"}}}}'
    assert view.wanted(ATTRS, body)
    assert not view.wanted(ATTRS, body.replace(b"acme", b"other"))
    assert view.wanted(ATTRS, b"{not json")


# ---- the attribute and the subscription filter ----------------------------------------------------
def test_only_an_explicit_0_keeps_a_change_from_notify_an_absent_attribute_is_maybe():
    assert not status_changed.notify_wanted({"notify": "0"})
    assert status_changed.notify_wanted({"notify": "1"}) and status_changed.notify_wanted({})


def test_the_notify_subscription_filters_out_exactly_the_0s_and_lets_an_absent_attribute_through():
    """Pub/Sub's filter language: ``attributes.notify = "0"`` matches only a message that has the attribute
    with that value, so its negation delivers every other message, those without the attribute included
    (https://cloud.google.com/pubsub/docs/subscription-message-filter)."""
    topology = yaml.safe_load((REPO / "infra" / "topology.yaml").read_text())
    notify = next(s for s in topology["subscriptions"] if s["name"] == "dcm-notify")
    assert notify["filter"] == (f'NOT attributes.{status_changed.NOTIFY_ATTRIBUTE} = "{status_changed.NOTIFY_NO}"')

