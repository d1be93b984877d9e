# Topics and subscriptions of infra/topology.yaml (expanded in topology.tf),
# wired the way infra/local/stack.py wires the emulator: push subscriptions to each
# function with /projects/PROJECT/topics/TOPIC in the endpoint path (so the
# function knows where a message came from), retry and dead-letter policies,
# ordering where declared.
#
# We declare these push subscriptions ourselves instead of giving the
# functions Eventarc triggers: the subscription Eventarc creates cannot have a
# dead-letter policy.

locals {
  pubsub_service_agent = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
  # project id => its Pub/Sub service agent: the one that pushes, dead-letters and mints push tokens for the
  # subscriptions of that project (this one, and the lanes project when it is another: var.lanes_project)
  pubsub_service_agents = merge(
    { (var.project_id) = local.pubsub_service_agent },
    { (local.lanes_project) = "serviceAccount:service-${data.google_project.lanes.number}@gcp-sa-pubsub.iam.gserviceaccount.com" },
  )
  deadletter_topic = google_pubsub_topic.topic["deadletter"]
}

resource "google_pubsub_topic" "topic" {
  #checkov:skip=CKV_GCP_83:Messages are encrypted at rest with Google-managed keys; CMEK would add a KMS key and its cost to a stack whose payloads are resource status, not secrets.
  for_each = local.topics

  project = each.value.project # the lanes project for the providers' lanes (topology.tf)
  name    = each.value.name
  labels = merge(var.labels, {
    app      = "dcm-status"
    topic    = each.value.key
    provider = coalesce(each.value.provider, "all")
  })

  # Kept even once acknowledged, so any subscription can seek back and replay.
  message_retention_duration = local.topic_retention

  lifecycle {
    precondition {
      condition     = length(local.providers_with_reserved_names) == 0
      error_message = "Provider name(s) ${join(", ", local.providers_with_reserved_names)} of infra/topology.yaml reserved: the platform's own NATS users are named ${join(" and ", local.reserved_provider_names)}, a provider's NATS user is its name, and nats-server stops on a duplicate user (docs/nats.md)."
    }
  }

  depends_on = [google_project_service.api, google_project_service.lanes_pubsub]
}

resource "google_pubsub_subscription" "subscription" {
  for_each = local.subscriptions

  project = each.value.project # its topic's: the lanes project for upsert's lanes (topology.tf)
  name    = each.value.name
  topic   = google_pubsub_topic.topic[each.value.topic].id
  labels = merge(var.labels, {
    app      = "dcm-status"
    consumer = coalesce(each.value.push, "pull")
  })

  ack_deadline_seconds       = each.value.ack_deadline_seconds
  message_retention_duration = each.value.retention
  enable_message_ordering    = each.value.enable_message_ordering
  filter                     = each.value.filter

  # Never expire for inactivity (a quiet provider or the archive would lose its subscription).
  expiration_policy {
    ttl = ""
  }

  retry_policy {
    minimum_backoff = each.value.minimum_backoff
    maximum_backoff = each.value.maximum_backoff
  }

  dynamic "dead_letter_policy" {
    for_each = each.value.dead_letter ? [google_pubsub_topic.topic[each.value.dead_letter_topic].id] : []
    content {
      dead_letter_topic     = dead_letter_policy.value
      max_delivery_attempts = each.value.max_delivery_attempts
    }
  }

  dynamic "push_config" {
    for_each = each.value.push != null ? [each.value.push] : []
    content {
      push_endpoint = "${local.function_urls[push_config.value]}/projects/${each.value.project}/topics/${each.value.topic_name}"

      # Signed by Google for the push invoker; verified by Cloud Run IAM and
      # again by the function (shared/runtime/auth.py: audience, issuer, email).
      oidc_token {
        service_account_email = google_service_account.push_invoker.email
        audience              = local.function_urls[push_config.value]
      }
    }
  }

  lifecycle {
    precondition {
      condition     = each.value.push != null || each.value.pull
      error_message = "Subscription ${each.value.name} in infra/topology.yaml needs `push: <function>` or `pull: true`."
    }
    precondition {
      condition     = each.value.push == null || contains(keys(local.functions), coalesce(each.value.push, "-"))
      error_message = "Subscription ${each.value.name} pushes to a function that infra/topology.yaml does not declare."
    }
    precondition {
      condition     = each.value.push == null || !try(local.functions[each.value.push].http, false)
      error_message = "Subscription ${each.value.name} pushes to ${coalesce(each.value.push, "-")}, a function called over HTTP (http: true): the push invoker may not invoke it."
    }
    precondition {
      condition     = !(each.value.dead_letter && each.value.topic_key == "deadletter")
      error_message = "Subscription ${each.value.name} reads the dead-letter topic: it must set `dead_letter: false`, or failures would loop into it."
    }
    precondition {
      condition     = !each.value.dead_letter || (contains(keys(local.topology.topics), each.value.dead_letter_topic) && each.value.dead_letter_topic != each.value.topic_key && !try(local.topology.topics[each.value.dead_letter_topic].per_provider, false))
      error_message = "Subscription ${each.value.name}: dead_letter_topic must name a topic of infra/topology.yaml (not per provider) other than the one it reads."
    }
    precondition {
      condition     = each.value.push == null || try(local.functions[each.value.push].settings.timeout_seconds, 0) <= each.value.ack_deadline_seconds
      error_message = "The timeout of the function behind ${each.value.name} exceeds the subscription's ack deadline: Pub/Sub would redeliver messages still being processed."
    }
  }

  depends_on = [
    google_cloud_run_v2_service_iam_member.push_invoker,
    google_service_account_iam_member.pubsub_agent_mints_invoker_tokens,
  ]
}

# ---- who may publish ----------------------------------------------------------

# One ingress topic per provider: only that provider's identity may publish.
resource "google_pubsub_topic_iam_member" "provider_publisher" {
  for_each = { for key, t in local.topics : key => t if t.key == "ingress" }

  project = var.project_id
  topic   = google_pubsub_topic.topic[each.key].name
  role    = "roles/pubsub.publisher"
  member  = local.provider_publisher_members[each.value.provider]
}

# Each function publishes only where its use case writes (topology.tf: function_access).
resource "google_pubsub_topic_iam_member" "function_publisher" {
  for_each = local.function_publisher_grants

  project = local.topics[each.value.topic].project # a lane: in the lanes project (cross-project publish)
  topic   = google_pubsub_topic.topic[each.value.topic].name
  role    = "roles/pubsub.publisher"
  member  = google_service_account.function[each.value.function].member
}

# ---- dead-lettering by Pub/Sub itself -----------------------------------------

# The Pub/Sub service agent forwards undeliverable messages to each topic a subscription dead-letters
# into (the dead-letter topic; the webhook retry lane's into the first lane)...
# The agent is that of the subscription's project: the lanes project's for upsert's lanes, which dead-letter
# into this project's dead-letter topic (a cross-project dead-letter policy).
resource "google_pubsub_topic_iam_member" "pubsub_agent_deadletter_publisher" {
  for_each = { for pair in distinct([for s in local.subscriptions : { topic = s.dead_letter_topic, project = s.project } if s.dead_letter]) : "${pair.topic}/${pair.project}" => pair }

  project = local.topics[each.value.topic].project
  topic   = google_pubsub_topic.topic[each.value.topic].name
  role    = "roles/pubsub.publisher"
  member  = local.pubsub_service_agents[each.value.project]
}

# ...and must be able to acknowledge them on each source subscription.
resource "google_pubsub_subscription_iam_member" "pubsub_agent_subscriber" {
  for_each = { for name, s in local.subscriptions : name => s if s.dead_letter }

  project      = each.value.project
  subscription = google_pubsub_subscription.subscription[each.key].name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agents[each.value.project]
}
