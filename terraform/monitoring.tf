# Metrics, alerts and the dashboard (docs/operations.md: the SLOs, each alert's meaning and what to do).
#
# Log-based metrics read the structured JSON lines the functions write (shared/runtime/logs.py): the
# `logging.googleapis.com/labels` of a line are the entry's labels (labels.outcome, ...), every other field
# is in jsonPayload (jsonPayload.logger = "dcm.<use case>", jsonPayload.storedAfterPublishMs, ...).
# tests/deploy/test_operations.py checks that each field read here is one the code writes.

locals {
  metric_prefix = "logging.googleapis.com/user/${var.name_prefix}"
  # the functions' Cloud Run services, in a Monitoring filter and in a Logging query
  run_services = "resource.type=\"cloud_run_revision\" AND resource.labels.service_name=starts_with(\"${var.name_prefix}-\")"
  log_services = "resource.type=\"cloud_run_revision\" AND resource.labels.service_name=~\"^${var.name_prefix}-\""

  # name => a counter of log lines (DELTA, INT64); labels: metric label => its extractor from the line
  log_counters = {
    updates = {
      description = "Status updates stored by upsert, by outcome (applied, unchanged, duplicate, stale), provider and resource type."
      filter      = "jsonPayload.logger=\"dcm.upsert\" AND labels.outcome:*"
      labels      = { outcome = "EXTRACT(labels.outcome)", provider = "EXTRACT(labels.provider)", resource_type = "EXTRACT(labels.resourceType)" }
    }
    dead_letters = {
      description = "Dead letters recorded by the deadletter function, by reason (delivery_exhausted, callback_exhausted, schema_invalid, ...) and provider."
      filter      = "jsonPayload.logger=\"dcm.deadletter\" AND labels.reason:*"
      labels      = { reason = "EXTRACT(labels.reason)", provider = "EXTRACT(labels.provider)" }
    }
    callback_deliveries = {
      description = "Webhook deliveries answered by their receiver (2xx delivered, 410 disabled), by lane and HTTP status."
      filter      = "jsonPayload.logger=\"dcm.notify\" AND labels.lane:* AND labels.status:*"
      labels      = { lane = "EXTRACT(labels.lane)", status = "EXTRACT(labels.status)" }
    }
    sweep_failures = {
      description = "Sweep ticks that failed (Firestore or Pub/Sub did not answer), the sweep's or billing's (its usage snapshot, on the same ticks); the next tick does the same work."
      filter      = "(jsonPayload.logger=\"dcm.sweep\" OR jsonPayload.logger=\"dcm.billing\") AND jsonPayload.message:\"tick failed\""
      labels      = {}
    }
    sweep_resyncs = {
      description = "Resync batches the sweep closed, by result (reconciled, abandoned)."
      filter      = "jsonPayload.logger=\"dcm.sweep\" AND jsonPayload.batch:*"
      labels      = { result = "REGEXP_EXTRACT(jsonPayload.message, \"^resync batch (reconciled|abandoned)\")" }
    }
    provider_states = {
      description = "Provider-level transitions the sweep announced, by provider and state (SILENT, REPORTING)."
      filter      = "jsonPayload.logger=\"dcm.sweep\" AND labels.state:*"
      labels      = { provider = "EXTRACT(labels.provider)", state = "EXTRACT(labels.state)" }
    }
    quota_errors = {
      description = "Firestore or Pub/Sub calls refused for quota (RESOURCE_EXHAUSTED / 429), by function."
      filter      = "jsonPayload.error=~\"ResourceExhausted|RESOURCE_EXHAUSTED|[Qq]uota exceeded\""
      labels      = { function = "EXTRACT(labels.function)" }
    }
  }

  # Alert policies: one condition each, its threshold documented in docs/operations.md (the table there is
  # checked against this map), its runbook the anchor of that page.
  alerts = {
    dead_letter_rate = {
      display_name = "dcm-status: dead letters above 10 in 10 minutes"
      runbook      = "dead-letter-rate"
      filter       = "metric.type=\"${local.metric_prefix}/dead_letters\" AND resource.type=\"cloud_run_revision\""
      period       = "600s"
      aligner      = "ALIGN_DELTA"
      reducer      = "REDUCE_SUM"
      group_by     = []
      threshold    = 10
      duration     = "0s"
    }
    delivery_exhausted = {
      display_name = "dcm-status: a message exhausted its deliveries (delivery_exhausted)"
      runbook      = "delivery-exhausted"
      filter       = "metric.type=\"${local.metric_prefix}/dead_letters\" AND resource.type=\"cloud_run_revision\" AND metric.labels.reason=\"delivery_exhausted\""
      period       = "300s"
      aligner      = "ALIGN_DELTA"
      reducer      = "REDUCE_SUM"
      group_by     = ["metric.labels.provider"]
      threshold    = 0
      duration     = "0s"
    }
    callback_exhausted = {
      display_name = "dcm-status: a webhook callback exhausted its retry period (callback_exhausted)"
      runbook      = "callback-exhausted"
      filter       = "metric.type=\"${local.metric_prefix}/dead_letters\" AND resource.type=\"cloud_run_revision\" AND metric.labels.reason=\"callback_exhausted\""
      period       = "300s"
      aligner      = "ALIGN_DELTA"
      reducer      = "REDUCE_SUM"
      group_by     = []
      threshold    = 0
      duration     = "0s"
    }
    function_5xx = {
      display_name = "dcm-status: a function answers 5xx above 0.1/s for 10 minutes"
      runbook      = "function-5xx"
      filter       = "metric.type=\"run.googleapis.com/request_count\" AND ${local.run_services} AND metric.labels.response_code_class=\"5xx\""
      period       = "300s"
      aligner      = "ALIGN_RATE"
      reducer      = "REDUCE_SUM"
      group_by     = ["resource.labels.service_name"]
      threshold    = 0.1
      duration     = "600s"
    }
    provider_silent = {
      display_name = "dcm-status: a provider turned SILENT"
      runbook      = "provider-silent"
      filter       = "metric.type=\"${local.metric_prefix}/provider_states\" AND resource.type=\"cloud_run_revision\" AND metric.labels.state=\"SILENT\""
      period       = "300s"
      aligner      = "ALIGN_DELTA"
      reducer      = "REDUCE_SUM"
      group_by     = ["metric.labels.provider"]
      threshold    = 0
      duration     = "0s"
    }
    sweep_failures = {
      display_name = "dcm-status: sweep ticks failing (above 3 in 15 minutes)"
      runbook      = "sweep-failures"
      filter       = "metric.type=\"${local.metric_prefix}/sweep_failures\" AND resource.type=\"cloud_run_revision\""
      period       = "900s"
      aligner      = "ALIGN_DELTA"
      reducer      = "REDUCE_SUM"
      group_by     = []
      threshold    = 3
      duration     = "0s"
    }
    quota_errors = {
      display_name = "dcm-status: Firestore or Pub/Sub quota errors"
      runbook      = "quota-errors"
      filter       = "metric.type=\"${local.metric_prefix}/quota_errors\" AND resource.type=\"cloud_run_revision\""
      period       = "300s"
      aligner      = "ALIGN_DELTA"
      reducer      = "REDUCE_SUM"
      group_by     = ["metric.labels.function"]
      threshold    = 0
      duration     = "0s"
    }
    publish_to_stored_p99 = {
      display_name = "dcm-status: p99 publish -> stored above 5 s for 15 minutes (SLO)"
      runbook      = "publish-to-stored-latency"
      filter       = "metric.type=\"${local.metric_prefix}/publish_to_stored\" AND resource.type=\"cloud_run_revision\""
      period       = "300s"
      aligner      = "ALIGN_DELTA"
      reducer      = "REDUCE_PERCENTILE_99"
      group_by     = []
      threshold    = 5000
      duration     = "900s"
    }
  }

  # subscription => seconds past which its oldest unacked message alerts: from infra/topology.yaml
  # (`oldest_unacked_alert`, per subscription or from `defaults:`; `false` for none), exports included.
  oldest_unacked_alerts = merge(
    { for name, s in local.subscriptions : name => s.oldest_unacked_alert if s.oldest_unacked_alert != null },
    { for name, e in local.exports : name => e.oldest_unacked_alert if e.oldest_unacked_alert != null },
  )

  # every alert policy: the ones above, and one per subscription for its oldest unacked message
  alert_policies = merge(local.alerts, {
    for name, seconds in local.oldest_unacked_alerts : "oldest_unacked/${name}" => {
      display_name = "dcm-status: ${name} oldest unacked message above ${seconds} s"
      runbook      = "oldest-unacked-message"
      filter       = "metric.type=\"pubsub.googleapis.com/subscription/oldest_unacked_message_age\" AND resource.type=\"pubsub_subscription\" AND resource.labels.subscription_id=\"${name}\""
      period       = "60s"
      aligner      = "ALIGN_MAX"
      reducer      = "REDUCE_MAX"
      group_by     = []
      threshold    = seconds
      duration     = "60s"
    }
  })

  runbook = "${var.runbook_url}#"
}

resource "google_logging_metric" "counter" {
  for_each = local.log_counters

  project     = var.project_id
  name        = "${var.name_prefix}/${each.key}"
  description = each.value.description
  filter      = "${local.log_services} AND ${each.value.filter}"

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"

    dynamic "labels" {
      for_each = each.value.labels
      content {
        key        = labels.key
        value_type = "STRING"
      }
    }
  }

  label_extractors = each.value.labels

  depends_on = [google_project_service.api]
}

# Provider publish -> stored in Firestore, in ms (upsert's jsonPayload.storedAfterPublishMs), by provider.
resource "google_logging_metric" "publish_to_stored" {
  project         = var.project_id
  name            = "${var.name_prefix}/publish_to_stored"
  description     = "Milliseconds from a provider's publish on its ingress topic to upsert's commit in Firestore."
  filter          = "${local.log_services} AND jsonPayload.logger=\"dcm.upsert\" AND jsonPayload.storedAfterPublishMs:*"
  value_extractor = "EXTRACT(jsonPayload.storedAfterPublishMs)"

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "DISTRIBUTION"
    unit        = "ms"

    labels {
      key        = "provider"
      value_type = "STRING"
    }
  }

  label_extractors = {
    provider = "EXTRACT(labels.provider)"
  }

  # 1 ms to about 3 h in 40 buckets growing by half.
  bucket_options {
    exponential_buckets {
      num_finite_buckets = 40
      growth_factor      = 1.5
      scale              = 1
    }
  }

  depends_on = [google_project_service.api]
}

resource "google_monitoring_alert_policy" "alert" {
  for_each = local.alert_policies

  project               = var.project_id
  display_name          = each.value.display_name
  combiner              = "OR"
  notification_channels = var.notification_channels
  user_labels           = merge(var.labels, { app = "dcm-status" })

  conditions {
    display_name = each.value.display_name

    condition_threshold {
      filter          = each.value.filter
      comparison      = "COMPARISON_GT"
      threshold_value = each.value.threshold
      duration        = each.value.duration

      aggregations {
        alignment_period     = each.value.period
        per_series_aligner   = each.value.aligner
        cross_series_reducer = each.value.reducer
        group_by_fields      = each.value.group_by
      }

      trigger {
        count = 1
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    subject   = each.value.display_name
    content   = "Runbook: ${local.runbook}${each.value.runbook} (what it means, what to do)."

    links {
      display_name = "Runbook"
      url          = "${local.runbook}${each.value.runbook}"
    }
  }

  depends_on = [
    google_logging_metric.counter,
    google_logging_metric.publish_to_stored,
    google_pubsub_subscription.subscription,
    google_pubsub_subscription.export,
  ]
}

# The pipeline, as the local dashboard shows it: events/s by outcome, backlog per subscription, p50/p99
# publish -> stored, dead letters by reason, callbacks. The JSON is kept in terraform/dashboards/.
resource "google_monitoring_dashboard" "pipeline" {
  project = var.project_id
  dashboard_json = templatefile("${path.module}/dashboards/pipeline.json", {
    metric_prefix = local.metric_prefix
    name_prefix   = var.name_prefix
  })

  depends_on = [google_logging_metric.counter, google_logging_metric.publish_to_stored]
}

# The lanes project's subscriptions (var.lanes_project) report their metrics there: adding it to this
# project's metrics scope lets the alerts and the dashboard above see upsert's lanes (their oldest
# unacknowledged message, their backlog) as they do when the lanes live here.
resource "google_monitoring_monitored_project" "lanes" {
  count = local.lanes_project != var.project_id ? 1 : 0

  metrics_scope = var.project_id
  name          = local.lanes_project
}
