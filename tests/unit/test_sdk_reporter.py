"""The provider kit's Reporter on a fake Pub/Sub client (sdk/dcm_status_sdk/reporter.py).

Its local checks are ingest's: every invalid report is refused with the reason and message
ingest would dead-letter it with. Debounce timing is tested on a fake clock in
test_sdk_coalesce.py; the real emulator path is tests/e2e/test_provider_kit.py.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from dcm_status_contracts.errors import Rejected as IngestRejected
from dcm_status_contracts.model import PubSubMessage
from dcm_status_contracts.pubsub_binding import to_message
from dcm_status_contracts.status_report import ReportForm, build_event
from dcm_status_sdk import (
    Backlogged,
    DataType,
    FlushTimeout,
    PublishRefused,
    Refusal,
    Rejected,
    Reporter,
    ReporterConfig,
    ResourceState,
    Value,
)
from dcm_status_sdk.sequence import DIGITS, SequenceCounter
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc

from shared.ingest.normalize import normalize, normalize_message
from shared.runtime import settings
from tests.fakes import FakePublisher

TOPIC = "dcm-status-ingress-aws"


def reporter(publisher: FakePublisher, **config: Any) -> Reporter:
    config = {"provider": "aws", "debounce_seconds": 0.0, "retry_initial_seconds": 0.01, **config}
    return Reporter(ReporterConfig(project="p", **config), publisher=publisher)


def test_a_report_is_the_current_upstream_form_stamped_and_keyed_by_its_resource():
    pub = FakePublisher()
    with reporter(pub) as r:
        event_id = r.report("vm", "i-0abc", "RUNNING", "VM is running.", metadata={"region": "eu-west-1"})
    sent = pub.messages[0]
    topic, ordering_key, event = sent.topic, sent.ordering_key, orjson.loads(sent.data)
    assert topic == f"projects/p/topics/{TOPIC}" and ordering_key == "aws/vm/i-0abc"
    assert event["id"] == event_id and event["type"] == "dcm.status.vm" and event["subject"] == "dcm.vm"
    assert event["source"] == "dcm/providers/aws" and event["time"].endswith("Z")
    assert len(event["sequence"]) == DIGITS and event["sequence"].isdigit()
    assert event["data"] == {"id": "i-0abc", "status": "RUNNING", "message": "VM is running.",
                             "metadata": {"region": "eu-west-1"}}
    update = normalize_message(PubSubMessage(orjson.dumps(event), {}, "m1", topic=TOPIC), settings.from_env())
    assert str(update.key) == "aws/vm/i-0abc" and update.status == "RUNNING"  # ingest takes it as it is


def test_outputs_are_sent_as_the_control_plane_and_the_proposal_name_them_and_ingest_keeps_them():
    pub = FakePublisher()
    spec = {"host": "10.0.1.5", "port": 5432, "endpoints": [{"address": "a", "port": 80}]}
    with reporter(pub) as r:
        r.report("vm", "i-0abc", "RUNNING", output_spec=spec, outputs={"connectionString": "jdbc:x"})
        r.report("vm", "i-1", "RUNNING")
    first, second = pub.events()
    assert first["data"]["output_spec"] == spec and first["data"]["outputs"] == {"connectionString": "jdbc:x"}
    assert "output_spec" not in second["data"] and "outputs" not in second["data"]  # none sent: the stored map stays
    update = normalize_message(PubSubMessage(orjson.dumps(first), {}, "m1", topic=TOPIC), settings.from_env())
    assert (update.output_spec, update.outputs) == (spec, {"connectionString": "jdbc:x"})


def test_a_report_replacing_one_in_its_window_sends_the_output_map_it_would_have_lost():
    pub = FakePublisher()
    with reporter(pub, debounce_seconds=10) as r:
        r.report("vm", "i-1", "PROVISIONING")  # sent; the window opens
        r.report("vm", "i-1", "RUNNING", output_spec={"host": "h"})
        r.report("vm", "i-1", "RUNNING", "still", outputs={"port": 1})  # replaces the one before, in the window
        r.flush(timeout=30)
    # what a consumer stores (a map replaced when an event carries one, kept when it omits it), whether the
    # second report was replaced in the window or (a loaded machine) sent before the third was made
    stored: dict = {}
    for event in pub.events():
        stored.update({k: v for k, v in event["data"].items() if k in ("message", "output_spec", "outputs")})
    assert (stored["message"], stored.get("output_spec"), stored.get("outputs")) == ("still", {"host": "h"}, {"port": 1})


def test_the_january_form_on_request():
    pub = FakePublisher()
    with reporter(pub, form=ReportForm.JANUARY) as r:
        r.report("vm", "i-0abc", "STOPPED")
    assert pub.events()[0]["type"] == "dcm.providers.aws.vm.instances.i-0abc.status"


def test_publish_now_is_checked_published_at_once_in_the_order_made_and_unsequenced():
    pub = FakePublisher()
    with reporter(pub, debounce_seconds=60.0, form=ReportForm.JANUARY) as r:
        first = r.publish_now("vm", "i-0abc", "STOPPED", "later", time="2030-01-01T00:00:01Z")
        second = r.publish_now("vm", "i-0abc", "RUNNING", "earlier", time="2030-01-01T00:00:00Z")
        assert (first.result(), second.result()) == ("1", "2")  # no debounce window, no coalescing
        with pytest.raises(Rejected) as refused:
            r.publish_now("toaster", "t-1", "RUNNING")
        assert refused.value.reason.value == "unknown_resource_type"
    assert [m.ordering_key for m in pub.messages] == ["", ""]
    events = pub.events()
    assert [e["data"]["status"] for e in events] == ["STOPPED", "RUNNING"]
    assert all("sequence" not in e for e in events)  # the event time orders them, as sent
    assert r.stats().reported == 0


DEEP: dict[str, Any] = {}
for _ in range(40):
    DEEP = {"a": DEEP}
INVALID = {  # what a provider can get wrong in a report, and ingest's reason for it
    "unknown resource type": (("toaster", "t-1", "RUNNING"), {}, "unknown_resource_type"),
    "status not a string": (("vm", "i-1", 7), {}, "schema_invalid"),
    "resource id too long": (("vm", "i" * 600, "RUNNING"), {}, "invalid_identity"),
    "transition time not a time": (("vm", "i-1", "RUNNING"), {"last_transition_time": "yesterday"},
                                   "schema_invalid"),
    "event time not a time": (("vm", "i-1", "RUNNING"), {"time": "2026-13-45T00:00:00Z"}, "not_a_cloudevent"),
    "reserved metadata field": (("vm", "i-1", "RUNNING"), {"metadata": {"__name__": "x"}}, "schema_invalid"),
    "too big": (("vm", "i-1", "RUNNING"), {"message": "x" * 70_000}, "oversize"),
    "too deep": (("vm", "i-1", "RUNNING"), {"resource_specific": DEEP}, "schema_invalid"),
    "output_spec too deep": (("vm", "i-1", "RUNNING"), {"output_spec": DEEP}, "schema_invalid"),
    "outputs key reserved": (("vm", "i-1", "RUNNING"), {"outputs": {"__x__": 1}}, "schema_invalid"),
}


@pytest.mark.parametrize("args,fields,reason", INVALID.values(), ids=list(INVALID))
def test_an_invalid_report_is_refused_before_publishing_with_ingests_reason_and_message(args, fields, reason):
    pub = FakePublisher()
    r = reporter(pub)
    time = fields.pop("time", None)
    with pytest.raises(Rejected) as refused:
        r.report(*args, time=time, **fields)
    r.close()
    assert pub.messages == [] and refused.value.reason.value == reason
    event = build_event("aws", *args, time=time or "2026-11-22T00:00:00Z", form=ReportForm.CURRENT, **fields)
    data, attrs = to_message(event)
    with pytest.raises(IngestRejected) as ingest:
        normalize_message(PubSubMessage(data, attrs, "m1", topic=TOPIC), settings.from_env())
    sizes = re.compile(r"\d+ bytes")  # the two events differ in id, sequence and time, so in size
    assert (ingest.value.reason.value, sizes.sub("N bytes", ingest.value.message)) == \
        (reason, sizes.sub("N bytes", refused.value.message))


def test_a_provider_name_ingest_would_refuse_is_refused():
    with pytest.raises(Rejected, match="provider name"):
        Reporter(ReporterConfig(project="p", provider="AWS"), publisher=FakePublisher()).report("vm", "i", "RUNNING")


def test_a_status_outside_the_enum_is_sent_and_the_platform_keeps_it_raw(caplog):
    pub = FakePublisher()
    with reporter(pub) as r:
        r.report("vm", "i-1", "hibernating")
    assert pub.events()[0]["data"]["status"] == "hibernating"
    assert "not in the vm enum" in caplog.text


def test_the_sequence_only_increases_across_a_restart_even_when_the_clock_steps_back(tmp_path):
    path = tmp_path / "aws.seq"
    clock = iter([5_000_000, 5_000_001, 5_000_002]).__next__
    first = SequenceCounter(path, clock=clock)
    issued = [first.next() for _ in range(3)]
    assert issued == sorted(issued) and len(set(issued)) == 3
    restarted = SequenceCounter(path, clock=lambda: 1_000)  # the clock went back an hour
    assert restarted.next() > issued[-1]
    assert SequenceCounter(None, clock=lambda: 2_000).next() > f"{1_000:0{DIGITS}d}"  # no file: the clock


def test_a_sequence_file_that_is_not_a_number_is_a_clear_error(tmp_path):
    (tmp_path / "aws.seq").write_text("garbage")
    with pytest.raises(ValueError, match="not an integer"):
        SequenceCounter(tmp_path / "aws.seq")


def test_a_failed_publish_is_retried_with_back_off_and_its_ordering_key_resumed():
    pub = FakePublisher(fail_next=3)
    with reporter(pub) as r:
        r.report("vm", "i-1", "RUNNING")
        r.flush(timeout=5)
        stats = r.stats()
    assert [e["data"]["status"] for e in pub.events()] == ["RUNNING"]
    assert pub.resumed == [(f"projects/p/topics/{TOPIC}", "aws/vm/i-1")] * 3
    assert (stats.published, stats.failed_attempts) == (1, 3) and "pubsub down" in stats.last_error


def test_a_retry_gives_way_to_a_newer_report_of_its_resource():
    pub = FakePublisher(fail_next=1)
    with reporter(pub, retry_initial_seconds=0.3) as r:
        r.report("vm", "i-1", "RUNNING")
        threading.Event().wait(0.05)  # the first publish failed; its retry waits its back-off
        r.report("vm", "i-1", "STOPPED")
    assert [e["data"]["status"] for e in pub.events()] == ["STOPPED"]


def test_flush_says_how_many_are_left_when_the_topic_never_takes_them():
    pub = FakePublisher(fail=True)
    r = reporter(pub)
    r.report("vm", "i-1", "RUNNING")
    r.report("vm", "i-2", "RUNNING")
    with pytest.raises(FlushTimeout, match="2 report"):
        r.flush(timeout=0.3)
    with pytest.raises(FlushTimeout):
        r.close(timeout=0.1)
    with pytest.raises(RuntimeError, match="closed"):
        r.report("vm", "i-3", "RUNNING")


def test_report_does_not_block_longer_than_configured_when_too_much_waits():
    pub = FakePublisher(fail=True)
    r = reporter(pub, max_pending=2, max_block_seconds=0.1)
    r.report("vm", "i-1", "RUNNING")
    r.report("vm", "i-2", "RUNNING")
    r.report("vm", "i-1", "STOPPED")  # a resource already waiting takes no more room
    with pytest.raises(Backlogged, match="max_pending 2"):
        r.report("vm", "i-3", "RUNNING")
    with pytest.raises(FlushTimeout):
        r.close(timeout=0.1)


def test_reports_whose_publish_is_in_flight_still_take_room():
    """A publish in flight may fail and bring its report back: max_pending bounds them too."""
    gate = threading.Event()

    class Stuck(FakePublisher):
        def publish(self, *args: Any, **kwargs: Any):  # type: ignore[no-untyped-def]
            gate.wait(10)
            return super().publish(*args, **kwargs)

    r = reporter(Stuck(), max_pending=2, max_block_seconds=0.1)
    try:
        r.report("vm", "i-1", "RUNNING")
        r.report("vm", "i-2", "RUNNING")
        deadline = time.monotonic() + 30  # a busy machine may be slow to start the publish
        while r.stats().in_flight < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert r.stats().in_flight == 2 and r.stats().pending == 0
        r.report("vm", "i-1", "STOPPED")  # its resource is already counted
        with pytest.raises(Backlogged, match="2 resources wait"):
            r.report("vm", "i-3", "RUNNING")
    finally:
        gate.set()
        r.close(timeout=5)


def test_resync_marks_every_event_of_the_batch():
    pub = FakePublisher()
    snapshot = [ResourceState("vm", f"i-{i}", "RUNNING") for i in range(3)]
    with reporter(pub, debounce_seconds=10) as r:
        r.report("vm", "i-0", "STOPPED")  # sent; i-0's window is now open for 10 s
        batch = r.resync(snapshot)
        r.flush(timeout=5)
    resync = [e for e in pub.events() if "resyncid" in e]
    assert len(resync) == 3 and {e["resyncid"] for e in resync} == {batch}
    assert {e["resynctotal"] for e in resync} == {3}  # the snapshot skipped i-0's window


def test_a_live_report_replacing_a_queued_resync_event_keeps_the_batch_whole():
    pub = FakePublisher()
    with reporter(pub, rate_per_second=1, burst=1) as r:
        batch = r.resync([ResourceState("vm", f"i-{i}", "RUNNING") for i in range(3)])
        r.report("vm", "i-2", "STOPPED")  # i-2's snapshot still waits for a token
        r.flush(timeout=10)
    last = {e["data"]["id"]: e for e in pub.events()}
    assert last["i-2"]["data"]["status"] == "STOPPED" and last["i-2"]["resyncid"] == batch
    assert sum("resyncid" in e for e in pub.events()) == 3


@pytest.mark.parametrize("snapshot,message", [
    ([], "at least one resource"),
    ([ResourceState("vm", "i-1", "RUNNING"), ResourceState("vm", "i-1", "STOPPED")], "twice"),
])
def test_a_resync_snapshot_that_cannot_be_a_batch_is_refused(snapshot, message):
    with reporter(FakePublisher()) as r, pytest.raises(ValueError, match=message):
        r.resync(snapshot)


def test_one_invalid_state_rejects_the_whole_resync_batch():
    pub = FakePublisher()
    with reporter(pub) as r:
        with pytest.raises(Rejected, match="unknown resource type"):
            r.resync([ResourceState("vm", "i-1", "RUNNING"), ResourceState("toaster", "t-1", "RUNNING")])
    assert pub.messages == []


def test_reports_from_many_threads_end_with_each_resources_last_state():
    pub = FakePublisher()
    with reporter(pub, debounce_seconds=0.05) as r:
        def work(n: int) -> None:
            for i in range(200):
                r.report("vm", f"i-{n}-{i % 10}", "RUNNING" if i < 190 else "STOPPED")
        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    last: dict[str, str] = {}
    for e in pub.events():
        last[e["data"]["id"]] = e["data"]["status"]
    assert len(last) == 80 and set(last.values()) == {"STOPPED"}
    assert len(pub.messages) < 8 * 200  # debounced


def test_reporting_from_asyncio_code_does_not_block_the_loop():
    pub = FakePublisher()

    async def provider() -> None:
        async with reporter(pub, debounce_seconds=0.2) as r:
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.01)
            task = asyncio.create_task(ticker())
            for i in range(50):
                r.report("vm", "i-1", "RUNNING" if i % 2 else "FAILED")
            await r.aflush(timeout=5)
            task.cancel()
            assert ticks >= 1  # the loop kept running while the reporter worked

    asyncio.run(provider())
    assert [e["data"]["status"] for e in pub.events()][-1] == "RUNNING"


def test_a_binary_mode_report_is_what_ingest_decodes():
    pub = FakePublisher()
    with reporter(pub, binding="binary") as r:
        r.report("vm", "i-1", "RUNNING")
    sent = pub.messages[0]
    attrs = sent.attributes
    assert attrs["ce-type"] == "dcm.status.vm" and attrs["ce-sequence"].isdigit()
    update = normalize_message(PubSubMessage(sent.data, attrs, "m1", topic=TOPIC), settings.from_env())
    assert update.sequence == attrs["ce-sequence"]



def test_cloud_native_events_values_are_checked_as_ingest_checks_them_and_published_as_one_event():
    pub = FakePublisher()
    lock = "/cluster/node/n1/sync/ptp-status/lock-state"
    with reporter(pub, debounce_seconds=10) as r:
        first = r.report_values([Value(lock, DataType.NOTIFICATION, "enumeration", "LOCKED"),
                                 Value(lock, DataType.METRIC, "decimal64.3", -5)],
                                event_type="event.sync.ptp-status.ptp-state-change", source=lock)
        second = r.report_values([Value(lock, DataType.NOTIFICATION, "enumeration", "HOLDOVER")],
                                 event_type="event.sync.ptp-status.ptp-state-change", source=lock)
        with pytest.raises(Rejected, match="/data/values/0/resource: no resource type is declared") as refused:
            r.report_values([Value("/cluster/node/n1/fan", DataType.METRIC, "rpm", 900)], event_type="event.fan",
                            source="/cluster/node/n1/fan")
        with pytest.raises(ValueError, match="DCM's own"):
            r.report_values([Value(lock, DataType.METRIC, "x", 1)], event_type="dcm.status.vm", source=lock)
    assert refused.value.reason.value == "unknown_resource_type"
    assert [e["id"] for e in pub.events()] == [first, second]  # one event each: not debounced into one
    updates = normalize(PubSubMessage(pub.messages[0].data, pub.messages[0].attributes, "m", None, TOPIC),
                        settings.from_env())
    assert [(str(u.key), u.status) for u in updates] == [(f"aws/sync{lock}", "LOCKED")]


def test_a_resync_batch_is_queued_whole_or_not_at_all():
    pub = FakePublisher(fail=True)
    # its retry not due for 15-30 s: i-0 stays queued, not in flight again, while the batch waits for room (a
    # retry due in milliseconds was taken in flight during resync's wait on a busy machine: pending 0)
    r = reporter(pub, max_pending=3, max_block_seconds=0.1, debounce_seconds=10, retry_initial_seconds=30)
    r.report("vm", "i-0", "RUNNING")  # sent (failing, retried) ...
    deadline = time.monotonic() + 10
    while not pub.resumed and time.monotonic() < deadline:  # ... once it has been tried: not coalesced away
        time.sleep(0.001)
    r.report("vm", "i-0", "STOPPED")  # ... and this one waits in i-0's window: one resource queued, for sure
    with pytest.raises(Backlogged, match="max_pending 3"):  # 3 new resources, room for 2
        r.resync([ResourceState("vm", f"i-{i}", "RUNNING") for i in range(1, 4)])
    assert r.stats().pending == 1 and r.stats().reported == 2  # none of the batch was queued
    with pytest.raises(Backlogged, match="4 reports at once"):
        r.resync([ResourceState("vm", f"i-{i}", "RUNNING") for i in range(4)])
    with pytest.raises(FlushTimeout):
        r.close(timeout=0.1)


def test_a_closed_reporter_stops_retrying_what_it_gave_up():
    pub = FakePublisher(fail=True)
    r = reporter(pub)
    r.report("vm", "i-1", "RUNNING")
    with pytest.raises(FlushTimeout):
        r.close(timeout=0.2)
    attempts = r.stats().failed_attempts
    threading.Event().wait(0.3)  # several back-offs of 0.01 s
    assert r.stats().failed_attempts == attempts and not r._thread.is_alive()


@dataclass
class Refusing(FakePublisher):
    """Pub/Sub answering ``error`` (to every publish, or to ``only`` that ordering key; ``times`` times, or always)."""

    error: Exception = field(default_factory=lambda: gexc.NotFound("Topic not found"))
    only: str | None = None
    times: int | None = None
    attempts: list[str] = field(default_factory=list)  # the ordering key of every publish tried

    def publish(self, topic: str, data: bytes, ordering_key: str = "", retry: Any = None, timeout: Any = None,
                **attributes: Any) -> Future:
        self.attempts.append(ordering_key)
        if (self.only is None or ordering_key == self.only) and (self.times is None or self.times > 0):
            self.times = None if self.times is None else self.times - 1
            future: Future = Future()
            future.set_exception(self.error)
            return future
        return super().publish(topic, data, ordering_key, retry, timeout, **attributes)


PERMANENT = {  # what Pub/Sub answers, and what the one line must tell the provider to do
    "topic not found": (gexc.NotFound("Topic not found"), Refusal.TOPIC_NOT_FOUND,
                        ["'dcm-status provider add gcp'", 'add "gcp" to the Terraform variable cloud_providers']),
    "permission denied": (gexc.PermissionDenied("User not authorized to perform this action."),
                          Refusal.PERMISSION_DENIED, ["Terraform variable provider_publishers", '"gcp" = ']),
    "unauthenticated": (gexc.Unauthenticated("Request had invalid authentication credentials."),
                        Refusal.UNAUTHENTICATED, ["gcloud auth application-default login"]),
    "invalid argument": (gexc.InvalidArgument("Invalid resource name given"), Refusal.INVALID_ARGUMENT,
                         ["check the project (p) and the topic name"]),
}


@pytest.mark.parametrize("error,refusal,fix", PERMANENT.values(), ids=list(PERMANENT))
def test_what_pubsub_refuses_for_good_fails_at_once_and_flush_says_what_to_do(error, refusal, fix):
    pub = Refusing(error=error)
    r = reporter(pub, provider="gcp")
    r.resync([ResourceState("vm", "i-1", "RUNNING"), ResourceState("vm", "i-2", "RUNNING")])  # one batch
    with pytest.raises(PublishRefused) as refused:
        r.flush(timeout=30)  # the old kit retried until this timeout and raised FlushTimeout
    stats = r.stats()
    assert (stats.failed, stats.failed_attempts, stats.published, stats.pending, stats.in_flight) == (2, 0, 0, 0, 0)
    assert sorted(pub.attempts) == ["gcp/vm/i-1", "gcp/vm/i-2"]  # each tried once, none retried
    line = str(refused.value)
    assert "\n" not in line and line.startswith("provider gcp: ") and "projects/p/topics/dcm-status-ingress-gcp" in line
    assert refused.value.refusal is refusal and refused.value.provider == "gcp" and "2 report(s)" in line
    assert all(f in line for f in fix), line
    if refusal.whole_topic:  # the topic refuses everything: closing says so again
        with pytest.raises(PublishRefused):
            r.close(timeout=30)
    else:  # one request refused, already said by flush
        r.close(timeout=30)
    assert sorted(pub.attempts) == ["gcp/vm/i-1", "gcp/vm/i-2"]  # the closed reporter tried nothing more


TRANSIENT = [gexc.ServiceUnavailable("down"), gexc.DeadlineExceeded("slow"), gexc.ResourceExhausted("quota"),
             gexc.Aborted("aborted"), gexc.InternalServerError("oops")]


@pytest.mark.parametrize("error", TRANSIENT, ids=lambda e: type(e).__name__)
def test_what_may_pass_is_still_retried(error):
    pub = Refusing(error=error, times=2)
    with reporter(pub, provider="gcp") as r:
        r.report("vm", "i-1", "RUNNING")
        r.flush(timeout=30)
        stats = r.stats()
    assert pub.attempts == ["gcp/vm/i-1"] * 3 and [e["data"]["status"] for e in pub.events()] == ["RUNNING"]
    assert (stats.published, stats.failed_attempts, stats.failed) == (1, 2, 0)


def test_leaving_the_block_raises_the_refusal_not_a_flush_timeout():
    with pytest.raises(PublishRefused, match="provider gcp: .*dcm-status provider add gcp"):
        with reporter(Refusing(), provider="gcp") as r:
            r.report("vm", "i-1", "RUNNING")


def test_a_refused_topic_fails_what_waits_and_every_later_report_at_once():
    gate = threading.Event()
    told: list[PublishRefused] = []

    class Held(Refusing):
        def publish(self, *args: Any, **kwargs: Any) -> Future:
            gate.wait(10)
            return super().publish(*args, **kwargs)

    pub = Held()
    r = Reporter(ReporterConfig(project="p", provider="gcp", debounce_seconds=0, max_concurrent_batches=1),
                 publisher=pub, on_refused=told.append)
    r.report("vm", "i-1", "RUNNING")
    deadline = time.monotonic() + 30  # a busy machine may be slow to start the publish
    while r.stats().in_flight < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    r.report("vm", "i-2", "RUNNING")  # waits: the one publish slot is taken
    r.report("vm", "i-1", "STOPPED")  # waits behind its resource's publish
    gate.set()
    with pytest.raises(PublishRefused):
        r.flush(timeout=30)
    assert pub.attempts == ["gcp/vm/i-1"] and r.stats().failed == 3  # what waited failed with it, untried
    assert len(told) == 1 and told[0].refusal is Refusal.TOPIC_NOT_FOUND and told[0].reports == 3
    with pytest.raises(PublishRefused, match="dcm-status provider add gcp"):
        r.report("vm", "i-3", "RUNNING")
    with pytest.raises(PublishRefused):
        r.resync([ResourceState("vm", "i-3", "RUNNING")])
    with pytest.raises(PublishRefused):
        r.close(timeout=30)
    assert pub.attempts == ["gcp/vm/i-1"]


def test_an_invalid_report_fails_alone_and_the_rest_goes_on():
    pub = Refusing(error=gexc.InvalidArgument("attribute over 1024 bytes"), only="gcp/vm/i-bad")
    r = reporter(pub, provider="gcp")
    r.report("vm", "i-bad", "RUNNING")
    r.report("vm", "i-1", "RUNNING")
    with pytest.raises(PublishRefused, match="invalid_argument: attribute over 1024 bytes"):
        r.flush(timeout=30)
    r.report("vm", "i-2", "RUNNING")  # the topic takes reports: not refused as a whole
    r.close(timeout=30)  # the refusal was raised once; nothing new is refused
    stats = r.stats()
    assert sorted(m.ordering_key for m in pub.messages) == ["gcp/vm/i-1", "gcp/vm/i-2"]
    assert (stats.published, stats.failed, stats.failed_attempts) == (2, 1, 0) and pub.attempts.count("gcp/vm/i-bad") == 1


def test_no_credentials_at_all_is_the_same_one_line(monkeypatch):
    from google.cloud import pubsub_v1

    def no_credentials() -> None:
        raise auth_exc.DefaultCredentialsError("Your default credentials were not found.")

    monkeypatch.setattr(pubsub_v1, "PublisherClient", no_credentials)
    with pytest.raises(PublishRefused, match="provider gcp: .*unauthenticated.*gcloud auth application-default login"):
        Reporter(ReporterConfig(project="p", provider="gcp"))
