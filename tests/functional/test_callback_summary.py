"""The callbacks' summary on the Firestore emulator: kept right by every change to a callback (register,
overwrite, remove, disable by a 410, enable), absent-and-unknown for callbacks stored before it; upsert's
``notify`` attribute decided from it; notify acking a ``notify="0"`` change without a read."""

from __future__ import annotations

import pytest
from dcm_status_contracts import status_changed, status_update
from dcm_status_contracts.model import PubSubMessage

from shared.api.callbacks import Callbacks
from shared.callbacks import summary as callback_summary
from shared.callbacks.store import CallbackStore
from shared.callbacks.summary import CallbackSummary
from shared.callbacks.view import CallbackView
from shared.notify.handler import Notify
from shared.runtime import secretbox
from shared.state.documents import CALLBACK_SUMMARY, CALLBACKS, SUMMARIES
from shared.upsert.handler import Upsert
from shared.upsert.store import StateStore
from tests.fakes import runtime_of
from tests.functional.conftest import PROJECT
from tests.functional.test_upsert import normalized

HOOK = "http://127.0.0.1:9/hook"
KEYS = secretbox.source(None, None, local_mode=True)
CHANGED = "projects/p/topics/dcm-status-changed"


@pytest.fixture
def registry(firestore):
    return Callbacks(firestore, local_mode=True, keys=KEYS)


def stored(firestore) -> dict | None:
    snap = firestore.collection(SUMMARIES).document(CALLBACK_SUMMARY).get()
    return snap.to_dict() if snap.exists else None


def summary(firestore) -> CallbackSummary | None:
    return callback_summary.read(firestore, 5)


def change(status="RUNNING", provider="aws", resource_type="vm", tenant="acme") -> dict:
    return {"key": f"{provider}/{resource_type}/i-1", "provider": provider, "resourceType": resource_type,
            "newStatus": status, "resource": {"metadata": {"tenant": tenant}}}


def test_no_callback_at_all_reads_as_an_empty_summary(firestore):
    assert stored(firestore) is None and summary(firestore) == CallbackSummary()


def test_register_overwrite_disable_enable_remove_keep_the_summary_right(firestore, registry):
    shown, _ = registry.add(HOOK, {"status": "STOPPED", "label": "tenant:acme"})
    fid = shown["id"]
    s = summary(firestore)
    assert s.may_match(change("STOPPED")) and not s.may_match(change("STOPPED", tenant="other"))
    assert not s.may_match(change("RUNNING"))

    registry.put_resource("aws/vm/i-7", HOOK)
    registry.put_resource("aws/vm/i-7", "http://127.0.0.1:8/other")  # overwritten: still one callback
    assert summary(firestore).resource_types == {"aws/vm"}
    assert summary(firestore).may_match(change("RUNNING")) and not summary(firestore).may_match(
        change("RUNNING", resource_type="disk"))
    revision = stored(firestore)["revision"]
    registry.put_resource("aws/vm/i-8", HOOK)  # another aws/vm resource: nothing new, the summary is not written
    assert stored(firestore)["revision"] == revision

    # the filter callback disabled by notify on a 410, then enabled again
    store = CallbackStore(firestore)
    store.disable(fid, "the receiver answered 410 Gone")
    assert not summary(firestore).filters
    store.disable(fid, "again")  # disabled twice: counted off once
    assert not summary(firestore).filters
    registry.enable(fid)
    registry.enable(fid)  # enabled twice: counted once
    assert [n for _, n in summary(firestore).filters.values()] == [1]

    registry.put_resource("aws/vm/i-7", "none")
    registry.put_resource("aws/vm/i-8", "none")
    registry.remove(fid)
    s = summary(firestore)
    assert not s.filters and s.resource_types == {"aws/vm"}  # resource pairs: add-only until a rebuild
    assert callback_summary.rebuild(firestore).empty and summary(firestore).empty


def test_a_put_re_enables_a_disabled_resource_callback_and_counts_it(firestore, registry):
    registry.put_resource("aws/vm/i-7", HOOK)
    rid = registry.of_resource("aws/vm/i-7")["id"]
    CallbackStore(firestore).disable(rid, "gone")
    callback_summary.rebuild(firestore)
    assert summary(firestore).empty
    registry.put_resource("aws/vm/i-7", HOOK)  # a PUT enables it again
    assert summary(firestore).resource_types == {"aws/vm"}


def test_a_rotation_or_a_refused_change_leaves_the_summary_as_it_was(firestore, registry):
    shown, _ = registry.add(HOOK, {"provider": "aws"})
    before = stored(firestore)
    registry.rotate(shown["id"])
    assert stored(firestore)["revision"] == before["revision"]
    from shared.api.callers import Caller
    with pytest.raises(Exception, match="only its owner"):
        registry.remove(shown["id"], Caller("someone-else@example.com"))
    assert stored(firestore)["revision"] == before["revision"] and summary(firestore).may_match(change())


def test_callbacks_stored_before_the_summary_leave_it_absent_and_unknown(firestore, registry):
    """An upgrade: callbacks exist and no summary. A new registration cannot know what the others match, so
    it leaves the summary absent; upsert's view reads that as unknown: every change goes to notify."""
    legacy, _ = registry.add(HOOK, {"status": "STOPPED"})
    firestore.collection(SUMMARIES).document(CALLBACK_SUMMARY).delete()
    registry.put_resource("aws/vm/i-1", HOOK)
    assert stored(firestore) is None and summary(firestore) is None
    view = CallbackView(firestore, ttl=0)
    assert view.wanted({"provider": "nobody", "resourceType": "x", "newStatus": "RUNNING"}, b"")
    assert legacy["id"]


def test_a_summary_altered_by_hand_is_left_alone_and_read_as_unknown(firestore, registry):
    registry.add(HOOK, {"status": "STOPPED"})
    firestore.collection(SUMMARIES).document(CALLBACK_SUMMARY).set({"filters": ["not", "a", "map"]})
    registry.add(HOOK, {"status": "RUNNING"})  # registering still works
    assert stored(firestore) == {"filters": ["not", "a", "map"]}
    assert CallbackView(firestore, ttl=0).wanted({"provider": "aws", "resourceType": "vm", "newStatus": "X"}, b"")


# ---- upsert sets the attribute -----------------------------------------------------------------------------
def published_notify(publisher) -> list[str]:
    return [m.attributes.get(status_changed.NOTIFY_ATTRIBUTE) for m in publisher.on("dcm-status-changed")]


def test_upsert_marks_each_change_event_by_whether_a_callback_may_want_it(firestore, publisher, registry):
    upsert = Upsert(StateStore(firestore), publisher, CHANGED, CallbackView(firestore, ttl=0).wanted)
    apply = lambda status, at, eid: upsert.apply(status_update.from_bytes(normalized(status, at, eid)))  # noqa: E731
    apply("RUNNING", "2026-01-01T10:00:00Z", "e1")  # no callback at all
    registry.add(HOOK, {"status": "STOPPED", "label": "tenant:acme"})
    apply("STARTING", "2026-01-01T10:01:00Z", "e2")  # a filter for STOPPED only
    apply("STOPPED", "2026-01-01T10:02:00Z", "e3")  # STOPPED, tenant acme (normalized() sets it)
    apply("RUNNING", "2026-01-01T09:00:00Z", "e0")  # late: notify never sends one
    registry.put_resource("aws/vm/i-2", HOOK)
    apply("RUNNING", "2026-01-01T10:03:00Z", "e4")  # an aws/vm resource has a callback: maybe
    assert published_notify(publisher) == ["0", "0", "1", "0", "1"]


def test_upsert_without_a_view_and_a_failing_view_both_say_maybe(firestore, publisher):
    class Down:
        def collection(self, name):
            raise RuntimeError("firestore down (fake)")

    Upsert(StateStore(firestore), publisher, CHANGED).apply(
        status_update.from_bytes(normalized("RUNNING", "2026-01-01T10:00:00Z", "e1")))
    Upsert(StateStore(firestore), publisher, CHANGED, CallbackView(Down(), ttl=10).wanted).apply(
        status_update.from_bytes(normalized("STOPPED", "2026-01-01T10:01:00Z", "e2")))
    assert published_notify(publisher) == ["1", "1"]


# ---- notify's skip path ------------------------------------------------------------------------------------
class NoReads:
    """A store that fails the test on any use: the skip path reads nothing."""

    def __getattr__(self, name):
        raise AssertionError(f"notify used its store ({name}) for a change marked notify=0")


def test_notify_acks_a_change_marked_0_without_reading_anything(firestore, publisher):
    upsert = Upsert(StateStore(firestore), publisher, CHANGED, CallbackView(firestore, ttl=0).wanted)
    upsert.apply(status_update.from_bytes(normalized("RUNNING", "2026-01-01T10:00:00Z", "e1")))
    [out] = publisher.on("dcm-status-changed")
    assert out.attributes["notify"] == "0"
    settings = runtime_of(DCM_PROJECT=PROJECT).settings
    message = PubSubMessage(out.data, out.attributes, "c-1", None, settings.topic_changed)
    assert Notify(NoReads(), publisher, settings, keys=KEYS)(message) == []
    assert len(publisher.messages) == 1  # nothing published either


def test_notify_reads_a_change_without_the_attribute_as_before(firestore, publisher, registry):
    """An older upsert (a rolling deploy) or a replayed message: no attribute is "maybe"."""
    registry.add(HOOK, {})
    upsert = Upsert(StateStore(firestore), publisher, CHANGED)
    result = upsert.apply(status_update.from_bytes(normalized("RUNNING", "2026-01-01T10:00:00Z", "e1")))
    settings = runtime_of(DCM_PROJECT=PROJECT).settings
    bare = {k: v for k, v in result.change.attributes.items() if k != status_changed.NOTIFY_ATTRIBUTE}
    message = PubSubMessage(result.change.body, bare, "c-1", None, settings.topic_changed)
    sent = Notify(CallbackStore(firestore), publisher, settings, keys=KEYS)(message)
    assert len(sent) == 1 and len(publisher.on("dcm-status-callbacks")) == 1
    assert firestore.collection(CALLBACKS).document(sent[0].split(".")[-1]).get().exists


# ---- rebuilding it (dcm-status callbacks summarize) --------------------------------------------------------
def test_a_rebuild_counts_callbacks_stored_before_the_summary_and_the_view_then_knows(firestore, registry):
    registry.add(HOOK, {"status": "STOPPED"})
    registry.put_resource("azure/disk/d-1", HOOK)
    firestore.collection(SUMMARIES).document(CALLBACK_SUMMARY).delete()  # as before the upgrade
    registry.put_resource("aws/vm/i-1", HOOK)
    assert summary(firestore) is None  # unknown
    done = callback_summary.rebuild(firestore)
    assert done.resource_types == {"azure/disk", "aws/vm"} and len(done.filters) == 1 and done.complete
    assert summary(firestore) == CallbackSummary.from_doc(stored(firestore))
    view = CallbackView(firestore, ttl=0)
    assert not view.wanted({"provider": "aws", "resourceType": "disk", "newStatus": "RUNNING"}, b"")
    assert view.wanted({"provider": "aws", "resourceType": "disk", "newStatus": "STOPPED"}, b"")
    registry.add(HOOK, {"provider": "gcp"})  # kept right from then on
    assert summary(firestore).may_match(change(provider="gcp"))


def test_a_rebuild_that_sees_callbacks_change_meanwhile_writes_nothing_but_its_placeholder(firestore, registry,
                                                                                            monkeypatch):
    registry.add(HOOK, {"status": "STOPPED"})
    firestore.collection(SUMMARIES).document(CALLBACK_SUMMARY).delete()
    real = callback_summary.CallbackSummary.changed

    def racing(self, before, after):  # a registration lands while the rebuild counts
        if not getattr(racing, "done", False) and before is None and after is not None and after.id != "r-race":
            racing.done = True
            monkeypatch.setattr(callback_summary.CallbackSummary, "changed", real)
            registry.put_resource("gcp/vm/race", HOOK)
        return real(self, before, after)

    monkeypatch.setattr(callback_summary.CallbackSummary, "changed", racing)
    assert callback_summary.rebuild(firestore, attempts=1) is None
    assert stored(firestore)["complete"] is False and summary(firestore) is None  # unknown: notify looks
    done = callback_summary.rebuild(firestore)
    assert done.resource_types == {"gcp/vm"} and len(done.filters) == 1
