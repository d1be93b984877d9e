# Scheduled functions (infra/topology.yaml: a function with a `schedule`, today the sweep): Cloud
# Scheduler publishes a tick on the topic whose subscription pushes to the function, on that
# schedule. The local stack ticks from the function's keeper instead (infra/local/supervise.py --tick).

locals {
  # function => the topic key it is pushed from, for the functions with a schedule
  scheduled = {
    for name, f in local.topology.functions : name => {
      schedule  = f.schedule
      topic_key = one([for s in local.topology.subscriptions : s.topic if try(s.push, null) == name])
    } if try(f.schedule, null) != null
  }
  scheduler_service_agent = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-cloudscheduler.iam.gserviceaccount.com"
}

resource "google_cloud_scheduler_job" "tick" {
  for_each = local.scheduled

  project     = var.project_id
  region      = var.region
  name        = "${var.name_prefix}-${each.key}"
  description = "A tick for the ${each.key} function (terraform/sweep.tf)."
  schedule    = each.value.schedule
  time_zone   = "Etc/UTC"

  pubsub_target {
    topic_name = google_pubsub_topic.topic[each.value.topic_key].id
    data       = base64encode(jsonencode({ tick = each.key }))
  }

  depends_on = [google_project_service.api]
}

# Cloud Scheduler's service agent publishes the ticks, on those topics only.
resource "google_pubsub_topic_iam_member" "scheduler_publisher" {
  for_each = toset([for f in local.scheduled : f.topic_key])

  project = var.project_id
  topic   = google_pubsub_topic.topic[each.key].name
  role    = "roles/pubsub.publisher"
  member  = local.scheduler_service_agent
}
