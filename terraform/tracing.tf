# One trace per status event (docs/tracing.md): every function and the NATS ingress export their spans to
# Cloud Trace (DCM_TRACE_EXPORTER=cloud_trace, local.trace_env in topology.tf), as their own service
# account, a sampled share of them (var.trace_sample_ratio).

resource "google_project_service" "cloudtrace" {
  count = var.enable_apis ? 1 : 0

  project                    = var.project_id
  service                    = "cloudtrace.googleapis.com"
  disable_on_destroy         = false
  disable_dependent_services = false
}

# Write spans, nothing else (cloudtrace.traces.patch): Cloud Trace grants it per project only. No
# function may read traces.
resource "google_project_iam_member" "function_trace" {
  for_each = local.functions

  project = var.project_id
  role    = "roles/cloudtrace.agent"
  member  = google_service_account.function[each.key].member
}

resource "google_project_iam_member" "nats_ingress_trace" {
  count = local.nats_ingress_enabled ? 1 : 0

  project = var.project_id
  role    = "roles/cloudtrace.agent"
  member  = google_service_account.nats_ingress[0].member
}
