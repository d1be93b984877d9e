"""What real producers send: binding-mode rules, provider names in source, ordering, clock skew."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest
from dcm_status_contracts import timeutil
from dcm_status_contracts.errors import Reason, Rejected
from dcm_status_contracts.model import PubSubMessage
from dcm_status_contracts.pubsub_binding import BindingMode, from_message, mode_of

from shared.ingest.normalize import normalize_message
from shared.runtime import settings
from shared.upsert.decide import compare, resource_document

EVENT = {"specversion": "1.0", "id": "e-1", "source": "dcm/providers/osac-sp-vm", "type": "dcm.status.vm",
         "subject": "dcm.vm", "time": "2026-04-01T10:00:00Z", "datacontenttype": "application/json",
         "data": {"id": "vm-1", "status": "RUNNING", "message": "vm is running"}}


def message(event=None, attributes=None, provider="osac", publish_time="2026-04-01T10:00:00.250Z", data=None):
    body = data if data is not None else orjson.dumps(event or EVENT)
    return PubSubMessage(body, attributes or {}, "m-1", publish_time, f"dcm-status-ingress-{provider}")


# ---- the Pub/Sub binding --------------------------------------------------------------
@pytest.mark.parametrize("attributes, mode", [
    ({}, BindingMode.STRUCTURED),  # the Go SDK's structured writes set no attribute at all
    ({"content-type": "application/cloudevents+json"}, BindingMode.STRUCTURED),
    ({"Content-Type": "application/cloudevents+json; charset=UTF-8"}, BindingMode.STRUCTURED),
    # a structured message that also carries ce-* attributes is structured (the content type says so)
    ({"Content-Type": "application/cloudevents+json", "ce-id": "x"}, BindingMode.STRUCTURED),
    ({"ce-specversion": "1.0", "Content-Type": "application/json"}, BindingMode.BINARY),
    ({"CE-SPECVERSION": "1.0"}, BindingMode.BINARY),
])
def test_the_binding_mode_follows_the_content_type_in_any_case(attributes, mode):
    assert mode_of(attributes) is mode


def test_binary_attributes_are_read_in_any_case():
    attrs = {"CE-SpecVersion": "1.0", "Ce-Id": "e-1", "ce-source": "s", "ce-type": "dcm.status.vm",
             "Content-Type": "application/json"}
    event = from_message(PubSubMessage(b'{"id": "v", "status": "RUNNING"}', attrs, "m"), 65536)
    assert event.mode is BindingMode.BINARY
    assert event.attributes["id"] == "e-1" and event.attributes["datacontenttype"] == "application/json"
    assert event.data == {"id": "v", "status": "RUNNING"}


def test_structured_with_stray_ce_attributes_reads_the_body():
    msg = message(attributes={"Content-Type": "application/cloudevents+json", "ce-id": "not-this-one"})
    assert normalize_message(msg, settings.from_env()).event_id == "e-1"


# ---- provider names in source --------------------------------------------------------------
def test_a_declared_other_name_in_source_is_the_same_provider():
    update = normalize_message(message(), settings.from_env())
    assert str(update.key) == "osac/vm/vm-1" and update.event_source == "dcm/providers/osac-sp-vm"


def test_a_source_naming_another_provider_is_provider_mismatch():
    event = {**EVENT, "source": "dcm/providers/aws"}
    with pytest.raises(Rejected) as info:
        normalize_message(message(event), settings.from_env())
    assert info.value.reason is Reason.PROVIDER_MISMATCH and info.value.detail["attribute"] == "source"
    assert info.value.detail["eventProvider"] == "aws" and info.value.detail["topicProvider"] == "osac"


def test_a_source_not_of_the_dcm_form_is_recorded_not_rejected():
    event = {**EVENT, "source": "kubevirt.localhost", "data": {"id": "vm-1", "status": "Running"}}
    update = normalize_message(message(event, provider="kubevirt"), settings.from_env())
    assert str(update.key) == "kubevirt/vm/vm-1" and update.event_source == "kubevirt.localhost"
    assert (update.status, update.raw_status) == ("RUNNING", "Running")  # its profile's vocabulary


def test_message_is_optional_and_extra_data_fields_are_kept():
    event = {**EVENT, "data": {"id": "vm-1", "status": "RUNNING", "timestamp": "2026-04-01T10:00:00Z"}}
    update = normalize_message(message(event), settings.from_env())
    assert update.message == "" and update.extra == {"timestamp": "2026-04-01T10:00:00Z"}


# ---- ordering --------------------------------------------------------------------------------
def stored(**changes):
    update = normalize_message(message(), settings.from_env())
    doc = resource_document(update, "now")
    doc.update(changes)
    return doc


def update_with(event_changes=None, publish_time="2026-04-01T10:00:00.250Z"):
    return normalize_message(message({**EVENT, **(event_changes or {})}, publish_time=publish_time),
                             settings.from_env())


def test_same_second_ties_go_to_the_later_ingress_publication():
    held = stored()  # PENDING published at .250
    assert compare(update_with({"id": "e-2"}, "2026-04-01T10:00:00.900Z"), held) == 1
    assert compare(update_with({"id": "e-0"}, "2026-04-01T10:00:00.100Z"), held) == -1
    assert compare(update_with(), held) == 0  # the very event


def test_the_same_sources_sequence_decides_over_time():
    held = stored(sequence="00000000000000000005")
    later_seq_earlier_time = update_with({"id": "e-2", "sequence": "6", "sequencetype": "Integer",
                                          "time": "2026-04-01T09:00:00Z"})
    assert later_seq_earlier_time.sequence == "00000000000000000006"
    assert compare(later_seq_earlier_time, held) == 1
    assert compare(update_with({"id": "e-3", "sequence": 4, "time": "2026-04-01T11:00:00Z"}), held) == -1


def test_sequence_is_compared_as_a_string_as_the_extension_says():
    held = stored(sequence="b")
    assert compare(update_with({"id": "e-2", "sequence": "c"}), held) == 1
    assert compare(update_with({"id": "e-3", "sequence": "a", "time": "2026-04-01T11:00:00Z"}), held) == -1


def test_another_sources_sequence_does_not_count():
    held = stored(sequence="9", eventSource="dcm/providers/osac-sp-cluster")
    assert compare(update_with({"id": "e-2", "sequence": "1", "time": "2026-04-01T11:00:00Z"}), held) == 1


# ---- clock skew ----------------------------------------------------------------------------------
def test_an_event_from_the_far_future_is_clamped_to_the_receive_time_and_the_raw_time_kept():
    before = timeutil.now()
    update = update_with({"time": "2099-01-01T00:00:00Z"})
    assert update.reported_time == "2099-01-01T00:00:00.000000Z"
    assert before <= timeutil.parse(update.observed_at) <= timeutil.now()


def test_a_time_within_the_tolerance_is_kept():
    soon = timeutil.format(timeutil.now() + timedelta(seconds=60))
    update = update_with({"time": soon})
    assert update.observed_at == soon and update.reported_time is None


def test_the_tolerance_is_configurable():
    soon = timeutil.format(timeutil.now() + timedelta(seconds=60))
    strict = settings.from_env({"DCM_PROJECT": "p", "DCM_MAX_CLOCK_SKEW_SECONDS": "10",
                                "DCM_PROVIDER_PROFILES": '{"osac": {"names": ["osac-sp-vm"]}}'})
    update = normalize_message(message({**EVENT, "time": soon}), strict)
    assert update.reported_time == soon and update.observed_at != soon
