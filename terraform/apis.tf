# APIs the stack uses. Never disabled on destroy: other workloads of the
# project may rely on them.
locals {
  apis = [
    "artifactregistry.googleapis.com", # function images
    "bigquery.googleapis.com",         # the exports (exports.tf)
    "cloudbuild.googleapis.com",       # function builds
    "cloudscheduler.googleapis.com",   # the sweep's ticks (sweep.tf)
    "cloudfunctions.googleapis.com",
    "cloudquotas.googleapis.com", # quota preferences (quotas.tf)
    "cloudresourcemanager.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    "iamcredentials.googleapis.com", # OIDC tokens minted for the push invoker
    "logging.googleapis.com",
    "monitoring.googleapis.com", # alert policies and the dashboard (monitoring.tf)
    "pubsub.googleapis.com",
    "run.googleapis.com",           # gen2 functions run on Cloud Run
    "secretmanager.googleapis.com", # the webhook signing keys (secrets.tf)
    "storage.googleapis.com",
  ]
}

resource "google_project_service" "api" {
  for_each = var.enable_apis ? toset(local.apis) : toset([])

  project                    = var.project_id
  service                    = each.key
  disable_on_destroy         = false
  disable_dependent_services = false
}

data "google_project" "this" {
  project_id = var.project_id
}

# The lanes project (var.lanes_project; this project when unset): Pub/Sub there, and its number for its
# Pub/Sub service agent (pubsub.tf).
resource "google_project_service" "lanes_pubsub" {
  count = var.enable_apis && local.lanes_project != var.project_id ? 1 : 0

  project                    = local.lanes_project
  service                    = "pubsub.googleapis.com"
  disable_on_destroy         = false
  disable_dependent_services = false
}

data "google_project" "lanes" {
  project_id = local.lanes_project
}
