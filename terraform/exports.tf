# The exports of infra/topology.yaml (`exports:`, expanded in topology.tf): a topic written straight into a
# BigQuery table by a Pub/Sub BigQuery subscription, no function in between (billing and audit analytics).
# The table's schema is generated from the event's JSON schema (infra/bigquery_schema.py writes
# terraform/bigquery/<table>.json; a deploy test regenerates and compares it), partitioned by day on the
# message's publish time. Production only: the local stack skips them (the emulator has no BigQuery
# subscriptions). A row BigQuery refuses stays in the subscription's backlog: the oldest-unacked alert
# (monitoring.tf) says so; docs/operations.md#bigquery-export.

resource "google_bigquery_dataset" "export" {
  #checkov:skip=CKV_GCP_81:Google-managed encryption at rest; CMEK would add a KMS key and its cost for status events that hold no secret.
  for_each = toset([for e in local.exports : e.dataset])

  project               = var.project_id
  dataset_id            = each.key
  location              = coalesce(var.bigquery_location, var.region)
  description           = "dcm-status exports (infra/topology.yaml exports:), written by Pub/Sub BigQuery subscriptions."
  labels                = merge(var.labels, { app = "dcm-status" })
  max_time_travel_hours = 168

  depends_on = [google_project_service.api]
}

resource "google_bigquery_table" "export" {
  #checkov:skip=CKV_GCP_80:Google-managed encryption at rest; CMEK would add a KMS key and its cost for status events that hold no secret.
  for_each = local.exports

  project             = var.project_id
  dataset_id          = google_bigquery_dataset.export[each.value.dataset].dataset_id
  table_id            = each.value.table
  description         = "Every ${each.value.topic_name} event (${each.value.event_schema}), one row per message; at-least-once: deduplicate on id."
  labels              = merge(var.labels, { app = "dcm-status", export = each.value.name })
  schema              = file("${path.module}/bigquery/${each.value.table}.json")
  deletion_protection = true

  time_partitioning {
    type          = "DAY"
    field         = "publish_time"
    expiration_ms = var.export_partition_expiration_days == null ? null : var.export_partition_expiration_days * 86400000
  }
  require_partition_filter = true # every query names the days it reads: no accidental full scan
}

# The Pub/Sub service agent writes the rows (and reads the table's metadata): on each export table only.
resource "google_bigquery_table_iam_member" "pubsub_agent_writer" {
  for_each = local.exports

  project    = var.project_id
  dataset_id = google_bigquery_table.export[each.key].dataset_id
  table_id   = google_bigquery_table.export[each.key].table_id
  role       = "roles/bigquery.dataEditor"
  member     = local.pubsub_service_agent
}

resource "google_pubsub_subscription" "export" {
  for_each = local.exports

  project = var.project_id
  name    = each.value.name
  topic   = google_pubsub_topic.topic[each.value.topic].id
  labels = merge(var.labels, {
    app      = "dcm-status"
    consumer = "bigquery"
  })

  message_retention_duration = local.topic_retention

  bigquery_config {
    table               = "${var.project_id}.${google_bigquery_table.export[each.key].dataset_id}.${google_bigquery_table.export[each.key].table_id}"
    use_table_schema    = true # the message's JSON into the generated columns
    write_metadata      = true # subscription_name, message_id, publish_time (the partition), attributes
    drop_unknown_fields = true # a field added by a later MINOR version waits for the regenerated schema
  }

  # Never expire for inactivity (a quiet week must not lose the export).
  expiration_policy {
    ttl = ""
  }

  depends_on = [google_bigquery_table_iam_member.pubsub_agent_writer]
}
