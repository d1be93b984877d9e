"""One trace per event on the real local stack: an event the provider kit publishes is one trace id across
ingest, upsert and audit (a consumer of its change; billing is none since issue 40), in the spans (the span files under the state directory) and in every log line
of that event; a dead-lettered event's trace ends in the dead-letter function with its reason; `dcm-status
trace EVENT_ID` prints the path as a tree."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from opentelemetry import context, trace

from infra.cli.trace import read_spans
from tests import samples
from tests.e2e.conftest import E2EStack, wait_until

pytestmark = pytest.mark.e2e
TRACE_KEY = "logging.googleapis.com/trace"


def provider_context() -> tuple[str, object]:
    """A provider that traces its own work: the span its report is made in (the kit continues it)."""
    trace_id, span_id = random.getrandbits(128), random.getrandbits(64)
    span = trace.NonRecordingSpan(trace.SpanContext(trace_id, span_id, is_remote=False,
                                                    trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED)))
    return f"{trace_id:032x}", trace.set_span_in_context(span)


def spans_of(e2e: E2EStack, trace_id: str) -> dict[str, list[dict]]:
    by_service: dict[str, list[dict]] = {}
    for span in read_spans(e2e.stack.paths.trace_dir):
        if span.record["traceId"] == trace_id:
            by_service.setdefault(span.record["service"], []).append(span.record)
    return by_service


def log_lines(e2e: E2EStack, function: str, needle: str) -> list[dict]:
    """The JSON log lines of ``function`` that mention ``needle``."""
    path: Path = e2e.stack.paths.log_dir / f"{function}.log"
    lines = []
    for line in path.read_text(errors="replace").splitlines():
        if needle in line and line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def test_one_event_is_one_trace_across_ingest_upsert_and_audit_in_spans_and_logs(e2e: E2EStack, uid: str):
    key, event_id = f"aws/vm/vm-{uid}", f"evt-{uid}"
    trace_id, ctx = provider_context()
    token = context.attach(ctx)
    try:
        e2e.reporter("aws").publish_now("vm", f"vm-{uid}", "RUNNING", "traced", event_id=event_id).result(timeout=30)
    finally:
        context.detach(token)
    e2e.wait_for_status(key, "RUNNING")
    found = wait_until(lambda: (s := spans_of(e2e, trace_id)) and {"ingest", "upsert", "audit"} <= set(s) and s,
                       what="the event's spans in ingest, upsert and audit")
    [ingest], [upsert] = found["ingest"], found["upsert"]
    audit = next(s for s in found["audit"] if s["attributes"].get("dcm.key") == key)  # the emulator ignores its filter
    assert ingest["attributes"]["dcm.event_id"] == event_id and ingest["attributes"]["dcm.provider"] == "aws"
    assert upsert["parentSpanId"] == ingest["spanId"] and upsert["attributes"]["dcm.outcome"] == "applied"
    assert audit["parentSpanId"] == upsert["spanId"]

    expected = f"projects/{e2e.project}/traces/{trace_id}"
    for function, needle in (("ingest", event_id), ("upsert", event_id), ("audit", key)):
        lines = wait_until(lambda: log_lines(e2e, function, needle), what=f"{function}'s log lines of the event")
        assert {line.get(TRACE_KEY) for line in lines} == {expected}, function
        assert all(line["logging.googleapis.com/spanId"] for line in lines)

    tree = e2e.cli("trace", event_id).stdout
    print(tree)  # the report shows it (pytest -s)
    lines = tree.splitlines()
    assert lines[0] == f"trace {trace_id}" and lines[1].startswith("publish  provider aws  at ")
    assert lines[2].startswith("└─ ingest  queued ") and f"{key}  acked" in lines[2]
    assert lines[3].startswith("   └─ upsert  queued ") and f"{key}  applied" in lines[3]
    assert any(line.lstrip(" │").startswith(("├─ audit", "└─ audit")) for line in lines[4:])


def test_a_dead_lettered_events_trace_ends_in_the_deadletter_function_with_its_reason(e2e: E2EStack, uid: str):
    sample = next(s for s in samples.load("invalid") if s.name == "schema-invalid-status-type")
    trace_id = f"{random.getrandbits(128):032x}"
    e2e.publish_raw("aws", sample.data, traceparent=f"00-{trace_id}-{random.getrandbits(64):016x}-01")
    found = wait_until(lambda: (s := spans_of(e2e, trace_id)) and "deadletter" in s and s,
                       what="the dead letter's span")
    [ingest], [deadletter] = found["ingest"], found["deadletter"]
    assert ingest["attributes"]["dcm.ack"] == "dead_lettered"
    assert deadletter["parentSpanId"] == ingest["spanId"]
    assert deadletter["attributes"]["dcm.reason"] == "schema_invalid"
    assert set(found) == {"ingest", "deadletter"}  # where it ends


def test_trace_of_an_unknown_event_is_one_line_and_a_non_zero_exit(e2e: E2EStack, uid: str):
    result = e2e.cli("trace", f"no-such-{uid}", check=False)
    assert result.returncode != 0 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "no span names event" in result.stderr
