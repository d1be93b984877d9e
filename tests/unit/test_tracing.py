"""Tracing: W3C context in and out of message attributes, a provider's context continued but never trusted,
the log lines' trace fields, the spans' attributes, the local span files and `dcm-status trace`."""

from __future__ import annotations

import json
import logging
import re

import orjson
import pytest
from click.testing import CliRunner
from dcm_status_contracts import trace_context
from dcm_status_contracts.errors import ConfigError
from dcm_status_sdk import Reporter, ReporterConfig
from opentelemetry import trace

from infra.cli.trace import Span, read_spans, render, traces_of
from infra.cli.trace import trace as trace_command
from shared.runtime import settings, tracing
from shared.runtime.logs import SPAN_KEY, TRACE_KEY, get_logger
from shared.runtime.publishing import publish
from tests.fakes import TOPOLOGY_ENV, FakePublisher, SpanRecorder

PROVIDER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PROVIDER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{PROVIDER_TRACE}-{PROVIDER_SPAN}-01"
MALFORMED = ["garbage", "", f"ff-{PROVIDER_TRACE}-{PROVIDER_SPAN}-01", f"00-{'0' * 32}-{PROVIDER_SPAN}-01",
             f"00-{PROVIDER_TRACE}-{'0' * 16}-01", f"00-{PROVIDER_TRACE.upper()}-{PROVIDER_SPAN}-01",
             f"00-{PROVIDER_TRACE}-{PROVIDER_SPAN}-01-extra", "00-xyz-abc-01", "\n" * 3, "x" * 1024]


def span_context(context) -> trace.SpanContext:
    return trace.get_current_span(context).get_span_context()


# ---- the attributes ---------------------------------------------------------------------------------------
def test_a_context_goes_into_attributes_and_comes_back_out():
    carried = trace_context.extract({"traceparent": TRACEPARENT, "tracestate": "vendor=x", "other": "kept"})
    ctx = span_context(carried)
    assert (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}", ctx.is_remote) == (PROVIDER_TRACE, PROVIDER_SPAN, True)
    out = trace_context.inject({"key": "aws/vm/1", "traceparent": "stale"}, carried)
    assert out == {"key": "aws/vm/1", "traceparent": TRACEPARENT, "tracestate": "vendor=x"}


def test_header_names_are_read_in_any_case_as_nats_may_spell_them():
    assert span_context(trace_context.extract({"Traceparent": TRACEPARENT})).is_valid


@pytest.mark.parametrize("value", MALFORMED)
def test_a_malformed_traceparent_is_no_context_never_an_error(value):
    assert not trace_context.is_valid(trace_context.extract({"traceparent": value, "tracestate": "a=b"}))


def test_a_malformed_tracestate_is_dropped_without_a_log_line(caplog):
    caplog.set_level(logging.DEBUG)
    carried = trace_context.extract({"traceparent": TRACEPARENT, "tracestate": "=bad,=worse" + ",k=v" * 40})
    assert trace_context.is_valid(carried) and "tracestate" not in trace_context.inject({}, carried)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("opentelemetry")]


def test_without_a_span_the_attributes_go_on_as_they_came():
    assert trace_context.inject({"traceparent": TRACEPARENT}) == {"traceparent": TRACEPARENT}


def test_a_report_outside_any_span_starts_a_trace_of_its_own():
    first, second = trace_context.for_report(), trace_context.for_report()
    assert first["traceparent"].split("-")[1] != second["traceparent"].split("-")[1]
    assert trace_context.is_valid(trace_context.extract(first))


def test_a_report_inside_the_providers_span_continues_its_trace(spans):
    with tracing.tracer().start_as_current_span("provider poll") as span:
        attrs = trace_context.for_report()
    ctx = span.get_span_context()
    assert attrs["traceparent"].split("-")[1:3] == [f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"]


def test_every_publish_carries_the_current_spans_context(spans):
    publisher = FakePublisher()
    with tracing.continuing("ingest", {"traceparent": TRACEPARENT}, edge=True) as span:
        publish(publisher, "projects/p/topics/t", b"{}", {"traceparent": "the provider's", "key": "k"})
    [out] = publisher.messages
    assert out.attributes["traceparent"].split("-")[1:3] == [PROVIDER_TRACE, f"{span.get_span_context().span_id:016x}"]
    assert out.attributes["key"] == "k"


def test_the_provider_kit_sends_each_report_with_its_own_trace_context(spans):
    publisher = FakePublisher()
    with Reporter(ReporterConfig(project="p", provider="aws", debounce_seconds=0.0), publisher=publisher) as r:
        r.report("vm", "i-1", "RUNNING")
        with tracing.tracer().start_as_current_span("provider poll") as poll:
            r.report("vm", "i-2", "RUNNING")
        r.publish_now("vm", "i-3", "RUNNING").result()
    sent = {orjson.loads(m.data)["data"]["id"]: m.attributes["traceparent"].split("-") for m in publisher.messages}
    assert sent["i-2"][1:3] == [f"{poll.get_span_context().trace_id:032x}", f"{poll.get_span_context().span_id:016x}"]
    assert len({parts[1] for parts in sent.values()}) == 3  # outside a span: a new trace per report


# ---- sampling: the provider's flag decides nothing -----------------------------------------------------
def sampled(recorder: SpanRecorder, flags: str, edge: bool) -> bool:
    with tracing.continuing("hop", {"traceparent": f"00-{PROVIDER_TRACE}-{PROVIDER_SPAN}-{flags}"}, edge=edge):
        return int(trace_context.inject({})["traceparent"].split("-")[3], 16) & 1 == 1


def test_at_the_edge_the_platform_samples_whatever_the_provider_asks():
    never = SpanRecorder(ratio=0.0)
    assert not sampled(never, "01", edge=True)
    assert not never.spans()
    always = SpanRecorder(ratio=1.0)
    assert sampled(always, "00", edge=True)


def test_past_the_edge_a_hop_follows_its_parent_so_a_trace_is_whole_or_absent():
    recorder = SpanRecorder(ratio=0.0)
    assert sampled(recorder, "01", edge=False)
    assert not sampled(recorder, "00", edge=False)
    assert [s.name for s in recorder.spans()] == ["hop"]


def test_a_new_trace_is_sampled_at_the_ratio():
    assert not sampled(SpanRecorder(ratio=0.0), "01", edge=True)
    with tracing.continuing("root", {}, edge=False) as span:
        assert not span.get_span_context().trace_flags.sampled


# ---- logs and spans -----------------------------------------------------------------------------------
def test_every_log_line_under_a_span_names_its_trace_and_span(spans, logged, monkeypatch):
    monkeypatch.setenv("DCM_PROJECT", "proj-1")
    log = get_logger("unit-tracing")
    with tracing.continuing("upsert", {"traceparent": TRACEPARENT}, edge=False) as span:
        log.info("update applied", extra={"labels": {"outcome": "applied", "provider": "aws"},
                                          "key": "aws/vm/1", "eventId": "e-1"})
    log.info("outside any span")
    inside, outside = logged()
    assert inside[TRACE_KEY] == f"projects/proj-1/traces/{PROVIDER_TRACE}"
    assert inside[SPAN_KEY] == f"{span.get_span_context().span_id:016x}"
    assert inside["logging.googleapis.com/trace_sampled"] is True
    assert TRACE_KEY not in outside and SPAN_KEY not in outside
    [recorded] = spans("upsert")
    assert {k: recorded.attributes[k] for k in ("dcm.outcome", "dcm.provider", "dcm.key", "dcm.event_id")} == \
           {"dcm.outcome": "applied", "dcm.provider": "aws", "dcm.key": "aws/vm/1", "dcm.event_id": "e-1"}
    assert recorded.parent.span_id == int(PROVIDER_SPAN, 16)


# ---- settings -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("env, expected", [
    ({"DCM_TRACE_EXPORTER": "jaeger"}, "DCM_TRACE_EXPORTER must be one of"),
    ({"DCM_TRACE_EXPORTER": "file"}, "needs DCM_TRACE_DIR"),
    ({"DCM_TRACE_SAMPLE_RATIO": "1.5"}, "from 0 to 1"),
    ({"DCM_TRACE_SAMPLE_RATIO": "all"}, "from 0 to 1"),
])
def test_a_tracing_setting_that_makes_no_sense_is_refused(env, expected):
    with pytest.raises(ConfigError, match=expected):
        settings.from_env({**TOPOLOGY_ENV, "DCM_PROJECT": "p", **env})


def test_production_defaults_export_nothing_and_sample_everything():
    s = settings.from_env({**TOPOLOGY_ENV, "DCM_PROJECT": "p"})
    assert (s.trace_exporter, s.trace_sample_ratio) == (settings.TraceExporter.NONE, 1.0)
    assert tracing.exporter_for("ingest", s) is None


# ---- the local span files and `dcm-status trace` ------------------------------------------------------
def write_trace(directory) -> None:
    """ingest (its parent the provider's unrecorded publish) -> upsert -> billing and notify -> webhook."""
    s = settings.from_env({**TOPOLOGY_ENV, "DCM_PROJECT": "p", "DCM_TRACE_EXPORTER": "file",
                           "DCM_TRACE_DIR": str(directory)})

    def hop(service, carrier, published_at, **labels):
        provider = tracing.configure(service, s)
        with tracing.continuing(service, carrier, edge=service == "ingest",
                                attributes={tracing.PUBLISHED_AT: published_at}):
            get_logger(service).info("hop", extra={"labels": labels, "key": "aws/vm/1", "eventId": "evt-1"})
            if service == "notify":
                with tracing.child("webhook", {"http.response.status_code": 204}):
                    pass
            carried = trace_context.inject({})
        provider.shutdown()
        return carried

    after_ingest = hop("ingest", {"traceparent": TRACEPARENT}, "2026-01-01T00:00:00.000000123Z", provider="aws")
    after_upsert = hop("upsert", after_ingest, "2026-01-01T00:00:00.1Z", outcome="applied")
    hop("billing", after_upsert, "2026-01-01T00:00:00.2Z")
    hop("notify", after_upsert, "2026-01-01T00:00:00.2Z")


def test_the_span_files_hold_one_trace_printed_as_a_tree(tmp_path, monkeypatch):
    write_trace(tmp_path)
    spans = read_spans(tmp_path)
    assert {s.record["service"] for s in spans} == {"ingest", "upsert", "billing", "notify"}
    assert {s.record["traceId"] for s in spans} == {PROVIDER_TRACE}
    assert traces_of(spans, "evt-1") == [PROVIDER_TRACE]
    lines = list(render(spans, PROVIDER_TRACE))
    assert lines[:2] == [f"trace {PROVIDER_TRACE}", "publish  provider aws  at 2026-01-01T00:00:00.000000123Z"]
    tree = [re.match(r"^[│ ]*[└├]─ \S+", line).group(0) for line in lines[2:]]
    assert tree in (["└─ ingest", "   └─ upsert", "      ├─ billing", "      └─ notify", "         └─ notify/webhook"],
                    ["└─ ingest", "   └─ upsert", "      ├─ notify", "      │  └─ notify/webhook", "      └─ billing"])
    upsert = next(line for line in lines if "upsert" in line)
    assert "queued " in upsert and " ms, ran " in upsert and "aws/vm/1  applied" in upsert
    webhook = next(line for line in lines if "webhook" in line)
    assert "started +" in webhook and webhook.endswith("http 204")


def test_a_line_cut_short_in_a_span_file_is_skipped(tmp_path):
    write_trace(tmp_path)
    next(tmp_path.glob("*.spans.jsonl")).open("a").write('{"traceId": "cut sho')
    assert len(read_spans(tmp_path)) == 5


def test_trace_of_an_unknown_event_is_one_line_on_stderr_and_a_non_zero_exit(tmp_path, monkeypatch):
    monkeypatch.setenv("DCM_STATE_DIR", str(tmp_path))
    write_trace(tmp_path / "traces")
    result = CliRunner().invoke(trace_command, ["no-such-event"])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "no span names event 'no-such-event'" in result.output
    found = CliRunner().invoke(trace_command, ["evt-1"])
    assert found.exit_code == 0 and found.output.startswith(f"trace {PROVIDER_TRACE}\n")


def test_a_span_record_is_json_with_hex_ids(tmp_path):
    write_trace(tmp_path)
    line = json.loads(next(tmp_path.glob("ingest-*.spans.jsonl")).read_text().splitlines()[0])
    assert line["traceId"] == PROVIDER_TRACE and line["parentSpanId"] == PROVIDER_SPAN
    assert line["attributes"]["dcm.edge"] is True
    assert Span(line).duration_ms >= 0


@pytest.fixture(autouse=True)
def _untraced_afterwards():
    yield
    tracing.configure("test", settings.from_env())
    logging.getLogger("dcm").handlers[0].flush() if logging.getLogger("dcm").handlers else None
