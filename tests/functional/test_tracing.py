"""One trace per event through the functions as functions-framework runs them: ingest continues the provider's
context, every message it publishes carries its own span's, upsert and a consumer of its change (audit) continue those, a dead letter
ends the trace in the dead-letter function with its reason; a provider's malformed context starts a new trace."""

from __future__ import annotations

import pytest
from dcm_status_contracts import deadletter as dl

from tests import samples
from tests.functional.conftest import post_push

PROVIDER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PROVIDER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{PROVIDER_TRACE}-{PROVIDER_SPAN}-01"
VALID = next(s for s in samples.load("valid") if s.name == "vm-common-status")
INVALID = next(s for s in samples.load("invalid") if s.name == "schema-invalid-status-type")


def ids(traceparent: str) -> tuple[str, str]:
    _, trace_id, span_id, _ = traceparent.split("-")
    return trace_id, span_id


def hex_ids(span) -> tuple[str, str]:
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def test_one_trace_from_the_providers_publish_through_ingest_upsert_and_a_consumer_of_the_change(
        ingest, upsert, audit, firestore, publisher, spans):
    assert post_push(ingest, "dcm-status-ingress-aws", VALID.data,
                     {**VALID.attributes, "traceparent": TRACEPARENT}).status_code == 200
    [normalized] = publisher.normalized()
    assert post_push(upsert, "dcm-status-normalized-aws", normalized.data, normalized.attributes).status_code == 200
    [change] = publisher.on("dcm-status-changed")
    assert post_push(audit, "dcm-status-changed", change.data, change.attributes).status_code == 200

    [ingested], [upserted], [audited] = spans("ingest"), spans("upsert"), spans("audit")
    assert {hex_ids(s)[0] for s in (ingested, upserted, audited)} == {PROVIDER_TRACE}
    assert f"{ingested.parent.span_id:016x}" == PROVIDER_SPAN  # the provider's span, continued
    assert ids(normalized.attributes["traceparent"]) == hex_ids(ingested)
    assert upserted.parent.span_id == ingested.context.span_id
    assert ids(change.attributes["traceparent"]) == hex_ids(upserted)
    assert audited.parent.span_id == upserted.context.span_id
    assert ingested.attributes["dcm.provider"] == "aws" and ingested.attributes["dcm.key"] == "aws/vm/i-0abc"
    assert ingested.attributes["dcm.ack"] == "acked" and ingested.attributes["dcm.edge"] is True
    assert upserted.attributes["dcm.outcome"] == "applied" and upserted.attributes["dcm.edge"] is False
    assert upserted.attributes["dcm.key"] == "aws/vm/i-0abc"


@pytest.mark.parametrize("traceparent", ["garbage", f"00-{'0' * 32}-{PROVIDER_SPAN}-01", "00-" + "f" * 600])
def test_a_malformed_provider_context_starts_a_new_trace_never_an_error(ingest, publisher, spans, traceparent):
    response = post_push(ingest, "dcm-status-ingress-aws", VALID.data, {**VALID.attributes, "traceparent": traceparent,
                                                                        "tracestate": "=bad=="})
    assert response.status_code == 200
    [normalized] = publisher.normalized()
    [ingested] = spans("ingest")
    assert ingested.parent is None  # a root: the provider's context is ignored
    assert ids(normalized.attributes["traceparent"]) == hex_ids(ingested)
    assert "tracestate" not in normalized.attributes


def test_a_rejected_event_ends_its_trace_in_the_deadletter_function_with_its_reason(
        ingest, deadletter, firestore, publisher, spans):
    assert post_push(ingest, "dcm-status-ingress-aws", INVALID.data, {"traceparent": TRACEPARENT}).status_code == 200
    [dead] = publisher.on("dcm-status-deadletter")
    assert post_push(deadletter, "dcm-status-deadletter", dead.data, dead.attributes).status_code == 200
    [ingested], [recorded] = spans("ingest"), spans("deadletter")
    assert ingested.attributes["dcm.ack"] == "dead_lettered"
    assert ingested.attributes["dcm.reason"] == "schema_invalid"
    assert hex_ids(recorded)[0] == PROVIDER_TRACE and recorded.parent.span_id == ingested.context.span_id
    assert recorded.attributes["dcm.reason"] == "schema_invalid" and recorded.attributes["dcm.provider"] == "aws"
    assert dead.attributes[dl.REASON] == "schema_invalid"


def test_a_failure_marks_the_span_and_says_pubsub_redelivers(ingest, publisher, spans):
    publisher.fail = True
    response = post_push(ingest, "dcm-status-ingress-aws", VALID.data, {**VALID.attributes, "traceparent": TRACEPARENT})
    assert response.status_code == 500
    [ingested] = spans("ingest")
    assert ingested.attributes["dcm.ack"] == "redelivered" and ingested.status.status_code.name == "ERROR"


def test_a_provider_cannot_force_its_events_into_the_sample(ingest, publisher):
    from shared.runtime import settings, tracing
    from tests.fakes import SpanRecorder

    recorder = SpanRecorder(ratio=0.0)
    try:
        post_push(ingest, "dcm-status-ingress-aws", VALID.data, {**VALID.attributes, "traceparent": TRACEPARENT})
        [normalized] = publisher.normalized()
        assert normalized.attributes["traceparent"].endswith(("-00", "-02"))  # not sampled, whatever it asked
        assert not recorder.spans()
    finally:
        tracing.configure("test", settings.from_env())


def test_what_the_sweep_publishes_carries_its_ticks_trace_on_to_upsert(upsert, sweep, firestore, publisher, spans):
    from dcm_status_contracts.resync import ResyncMark

    from tests.functional.test_sweep import AT, report, tick

    report(upsert, "gone", "RUNNING", "2026-11-22T09:00:00Z", "old-gone")
    report(upsert, "i-0", "RUNNING", "2026-11-22T10:00:05Z", "snap-0", ResyncMark("b-trace", 1, 0, AT, ("vm",)))
    assert tick(sweep, publisher, upsert) == ["aws/vm/gone"]
    [swept] = spans("sweep")
    deletion = publisher.normalized()[-1]
    assert ids(deletion.attributes["traceparent"]) == hex_ids(swept)
    applied = [s for s in spans("upsert") if s.context.trace_id == swept.context.trace_id]
    assert [s.parent.span_id for s in applied] == [swept.context.span_id]
