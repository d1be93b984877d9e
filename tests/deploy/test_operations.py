"""Operations in Terraform (monitoring.tf, firestore.tf) agree with the code, the topology and the runbook.

- each log-based metric reads fields the functions' log lines carry (named in the code that writes them);
- each alert has a runbook section in docs/operations.md, whose table states its threshold as Terraform sets it;
- the oldest-unacked alerts are the subscriptions (and exports) infra/topology.yaml declares, with its thresholds;
- the dashboard's JSON renders, and every metric it plots exists;
- a daily Firestore backup is kept a variable number of days, beside point-in-time recovery.
"""

from __future__ import annotations

import json
import re

import pytest

from infra import topology as topo
from tests.deploy import tf
from tests.deploy.tf import block

OPERATIONS = (tf.REPO_ROOT / "docs" / "operations.md").read_text()
SHARED = tf.REPO_ROOT / "shared"


def source_of(logger: str) -> str:
    """The code of every module that logs as ``logger`` (``dcm.<name>``: get_logger("<name>"))."""
    name = logger.removeprefix("dcm.")
    paths = [p for p in SHARED.rglob("*.py") if f'get_logger("{name}")' in p.read_text()]
    assert paths, f"no module logs as {logger}"
    return "\n".join(p.read_text() for p in paths)


def fields_read(text: str) -> set[tuple[str, str]]:
    return set(re.findall(r"\b(labels|jsonPayload)\.(\w+)", text))


def test_each_log_metric_reads_fields_its_function_writes(config: tf.Config):
    counters = config.locals["log_counters"]
    metrics = {name: (spec["filter"], json.dumps(spec["labels"])) for name, spec in counters.items()}
    latency = config.resource("google_logging_metric", "publish_to_stored")
    metrics["publish_to_stored"] = (latency["filter"], latency["value_extractor"] + json.dumps(
        latency["label_extractors"]))
    assert set(metrics) >= {"updates", "dead_letters", "callback_deliveries", "sweep_failures", "provider_states",
                            "quota_errors", "publish_to_stored"}
    # a log metric's filter is a Logging query (=~ regex), not a Monitoring filter (starts_with)
    assert "starts_with" not in config.locals["log_services"] and "=~" in config.locals["log_services"]
    for metric in (*config.of_type("google_logging_metric").values(),):
        assert metric["filter"].startswith("${local.log_services} AND ")
    for name, (filter_, extractors) in metrics.items():
        logger = re.search(r'jsonPayload\.logger=\\?"(dcm\.\w+)', filter_)
        code = source_of(logger.group(1)) if logger else (SHARED / "runtime" / "entrypoint.py").read_text()
        for kind, field in fields_read(filter_ + extractors) - {("jsonPayload", "logger"), ("jsonPayload", "message")}:
            assert f'"{field}"' in code, f"metric {name} reads {kind}.{field}, which {logger and logger.group(1)} never writes"
        for text in re.findall(r'jsonPayload\.message:\\?"([^"\\]+)', filter_):
            assert text in code, f"metric {name} looks for a message {text!r} the code never logs"


def test_every_alert_has_its_runbook_and_its_threshold_documented(config: tf.Config):
    alerts = config.locals["alerts"]
    assert set(alerts) == {"dead_letter_rate", "delivery_exhausted", "callback_exhausted", "function_5xx",
                           "provider_silent", "sweep_failures", "quota_errors", "publish_to_stored_p99"}
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+)` \|.*$", OPERATIONS, re.MULTILINE)}
    for name, alert in alerts.items():
        assert f'<a id="{alert["runbook"]}"></a>' in OPERATIONS, f"{name}: no runbook section {alert['runbook']}"
        row = rows.get(name)
        assert row, f"docs/operations.md has no row for the alert {name}"
        for part in (f"`> {alert['threshold']:g}`", f"`{alert['period']}`", f"`{alert['duration']}`"):
            assert part in row, f"{name}: the documented threshold {row!r} lacks {part}"
    for anchor in ("oldest-unacked-message", "replay", "restore", "bigquery-export"):
        assert f'<a id="{anchor}"></a>' in OPERATIONS


def test_every_alert_policy_notifies_the_channels_and_links_its_runbook(config: tf.Config):
    assert list(config.of_type("google_monitoring_alert_policy")) == ["alert"]
    policy = config.resource("google_monitoring_alert_policy", "alert")
    assert policy["for_each"] == "${local.alert_policies}"
    assert policy["notification_channels"] == "${var.notification_channels}"
    doc = block(policy, "documentation")
    assert "${local.runbook}${each.value.runbook}" in doc["content"]
    assert block(doc, "links")["url"] == "${local.runbook}${each.value.runbook}"
    assert block(block(policy, "conditions"), "condition_threshold")["threshold_value"] == "${each.value.threshold}"
    assert config.locals["runbook"] == "${var.runbook_url}#"
    assert config.variables["notification_channels"]["type"] == "${list(string)}"


def test_oldest_unacked_alerts_are_the_subscriptions_of_the_topology(config: tf.Config, terraform):
    expression = config.locals["oldest_unacked_alerts"]
    got = tf.evaluate({"alerts": expression[2:-1]}, terraform=terraform)["alerts"]
    t = topo.load()
    want = {s.name: s.oldest_unacked_alert for s in (*t.subscriptions, *t.exports)
            if s.oldest_unacked_alert is not None}
    assert got == want
    assert "dcm-deadletter-archive" not in got and got["dcm-sweep"] == 180 and got["dcm-changes-bigquery"] == 600
    policies = config.locals["alert_policies"]
    assert "local.alerts" in policies and "local.oldest_unacked_alerts" in policies
    assert "oldest_unacked_message_age" in policies and "subscription_id" in policies


def monitoring_locals() -> str:
    """The locals block of monitoring.tf (variables and topology only), for ``terraform console``."""
    text = (tf.TF_DIR / "monitoring.tf").read_text()
    return text[text.index("locals {"):text.index('\nresource "')]


def test_the_alert_policies_terraform_creates(terraform):
    got = tf.evaluate({"policies": "local.alert_policies"}, terraform=terraform,
                      extra={"monitoring_locals.tf": monitoring_locals()})["policies"]
    t = topo.load()
    subscriptions = {s.name for s in (*t.subscriptions, *t.exports) if s.oldest_unacked_alert is not None}
    assert {k.removeprefix("oldest_unacked/") for k in got if k.startswith("oldest_unacked/")} == subscriptions
    sweep = got["oldest_unacked/dcm-sweep"]
    assert (sweep["threshold"], sweep["runbook"]) == (180, "oldest-unacked-message")
    assert 'subscription_id="dcm-sweep"' in sweep["filter"]
    assert got["function_5xx"]["filter"].count('starts_with("dcm-status-")') == 1  # a Monitoring filter
    assert all(p["runbook"] and p["display_name"].startswith("dcm-status: ") for p in got.values())


def test_the_dashboard_renders_and_plots_declared_metrics(config: tf.Config):
    text = (tf.TF_DIR / "dashboards" / "pipeline.json").read_text()
    assert set(re.findall(r"\$\{(\w+)\}", text)) == {"metric_prefix", "name_prefix"}  # templatefile's variables
    dashboard = json.loads(text.replace("${metric_prefix}", "logging.googleapis.com/user/dcm-status")
                           .replace("${name_prefix}", "dcm-status"))
    tiles = dashboard["mosaicLayout"]["tiles"]
    titles = " | ".join(t["widget"]["title"] for t in tiles)
    for shown in ("by outcome", "Backlog per subscription", "p50", "p99", "Dead letters", "callbacks"):
        assert shown in titles, f"the dashboard shows no {shown!r}"
    declared = set(config.locals["log_counters"]) | {"publish_to_stored"}
    plotted = set(re.findall(r"logging\.googleapis\.com/user/dcm-status/(\w+)", json.dumps(dashboard)))
    assert plotted and plotted <= declared, plotted - declared
    resource = config.resource("google_monitoring_dashboard", "pipeline")
    assert 'templatefile("${path.module}/dashboards/pipeline.json"' in resource["dashboard_json"]


def test_firestore_has_a_daily_backup_beside_point_in_time_recovery(config: tf.Config):
    schedule = config.resource("google_firestore_backup_schedule", "daily")
    assert block(schedule, "daily_recurrence") == {} and "weekly_recurrence" not in schedule
    assert schedule["retention"] == "${var.firestore_backup_retention_days * 86400}s"
    assert schedule["database"] == "${local.firestore_database}"
    database = config.resource("google_firestore_database", "database")
    assert "point_in_time_recovery_enablement" in database and "delete_protection_state" in database


@pytest.mark.parametrize("days, ok", [(14, True), (1, True), (98, True), (0, False), (99, False), (1.5, False)])
def test_backup_retention_is_a_whole_number_of_days_firestore_accepts(terraform, days, ok):
    try:
        got = tf.evaluate({"r": "var.firestore_backup_retention_days"},
                          {"firestore_backup_retention_days": days}, terraform)
    except AssertionError:
        assert not ok
    else:
        assert ok and got["r"] == days
