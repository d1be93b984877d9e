"""Tracing in production (terraform/tracing.tf, docs/tracing.md): every function and the NATS ingress export
their spans to Cloud Trace at the sample ratio the variable sets, as their own identity with the trace
writer's role only, and the settings Terraform writes are the ones the functions accept."""

from __future__ import annotations

import pytest

from shared.runtime import settings
from tests.deploy import tf
from tests.deploy.test_nats_ingress import URL
from tests.fakes import TOPOLOGY_ENV


def test_every_function_and_the_nats_ingress_export_to_cloud_trace(config: tf.Config, terraform):
    fn = config.resource("google_cloudfunctions2_function", "function")
    assert "local.trace_env" in str(fn["service_config"]), "functions.tf merges local.trace_env into the env"
    got = tf.evaluate({"trace": "local.trace_env", "ingress": "local.nats_ingress_env"}, {"nats_url": URL},
                      terraform)
    assert got["trace"] == {"DCM_TRACE_EXPORTER": "cloud_trace", "DCM_TRACE_SAMPLE_RATIO": "0.1"}
    assert {k: got["ingress"][k] for k in got["trace"]} == got["trace"]
    parsed = settings.from_env({**TOPOLOGY_ENV, "DCM_PROJECT": "p", **got["trace"]})
    assert (parsed.trace_exporter, parsed.trace_sample_ratio) == (settings.TraceExporter.CLOUD_TRACE, 0.1)


def test_the_sample_ratio_is_a_variable_from_0_to_1(terraform):
    assert tf.evaluate({"trace": "local.trace_env"}, {"trace_sample_ratio": 1}, terraform)["trace"][
        "DCM_TRACE_SAMPLE_RATIO"] == "1"
    with pytest.raises(AssertionError, match="trace_sample_ratio must be from 0 to 1"):
        tf.evaluate({"trace": "local.trace_env"}, {"trace_sample_ratio": 1.5}, terraform)


def test_span_writers_only_and_the_api_enabled(config: tf.Config):
    functions = config.resource("google_project_iam_member", "function_trace")
    assert (functions["for_each"], functions["role"]) == ("${local.functions}", "roles/cloudtrace.agent")
    assert functions["member"] == "${google_service_account.function[each.key].member}"
    ingress = config.resource("google_project_iam_member", "nats_ingress_trace")
    assert ingress["role"] == "roles/cloudtrace.agent" and ingress["count"] == "${local.nats_ingress_enabled ? 1 : 0}"
    assert config.resource("google_project_service", "cloudtrace")["service"] == "cloudtrace.googleapis.com"
