# Quotas this deployment asks for (var.quota_preferences; none by default). A large fleet needs more than a
# project's default of two quotas that can be raised (docs/scale.md; benchmarks/capacity.py prints what a
# fleet needs and reads the values declared here as the limits):
#   - Cloud Run's vCPU per region: the instances of every function, at the CPU per event pipeline.py measures;
#   - Pub/Sub's publisher throughput per region (200 MB/s in large regions, 50 MB/s elsewhere), charged to
#     the project of the publisher's credentials: the functions' identities are this project's.
# A preference is a request: Google reviews it, and grants it or less (the preference's status says which).
# The quota ids and units are Cloud Quotas' own; check them for the project before relying on them:
#   gcloud beta quotas info list --service=run.googleapis.com --project=PROJECT
#   gcloud beta quotas info list --service=pubsub.googleapis.com --project=PROJECT
locals {
  quota_ids = {
    run_cpu                        = { service = "run.googleapis.com", quota_id = "CpuAllocPerProjectRegion", scale = 1000 } # milli vCPU
    pubsub_publisher_kb_per_minute = { service = "pubsub.googleapis.com", quota_id = "RegionalPublisherThroughputPerMinutePerProjectPerRegion", scale = 1 }
  }
  quota_requests = {
    for name, q in local.quota_ids : name => merge(q, { value = var.quota_preferences[name] })
    if var.quota_preferences[name] != null
  }
}

resource "google_cloud_quotas_quota_preference" "quota" {
  for_each = local.quota_requests

  parent        = "projects/${var.project_id}"
  name          = "${replace(each.value.service, ".", "_")}-${each.value.quota_id}-${var.region}"
  service       = each.value.service
  quota_id      = each.value.quota_id
  dimensions    = { region = var.region }
  contact_email = var.quota_preferences.contact_email
  justification = "dcm-status: the fleet's capacity model (benchmarks/capacity.py) needs ${each.value.value} for ${each.key}."

  quota_config {
    preferred_value = tostring(each.value.value * each.value.scale)
  }

  depends_on = [google_project_service.api]
}
