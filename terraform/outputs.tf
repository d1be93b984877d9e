output "project_id" {
  description = "Project the stack is deployed in."
  value       = var.project_id
}

output "cloud_providers" {
  description = "Providers wired (one ingress topic and one ingest subscription each)."
  value       = local.cloud_providers
}

output "ingress_topics" {
  description = "Provider => full id of its ingress topic (projects/P/topics/T): where that provider publishes its status CloudEvents."
  value       = { for key, t in local.topics : t.provider => google_pubsub_topic.topic[key].id if t.key == "ingress" }
}

output "topics" {
  description = "Topic key of infra/topology.yaml (ingress-<provider>, normalized, changed, deadletter) => topic name."
  value       = { for key, t in google_pubsub_topic.topic : key => t.name }
}

output "deadletter_topic" {
  description = "Full id of the dead-letter topic: everything that could not be processed, with its reason."
  value       = local.deadletter_topic.id
}

output "changed_topic" {
  description = "Full id of the topic carrying status-changed events, the fan-out contract for consumers."
  value       = google_pubsub_topic.topic["changed"].id
}

output "subscriptions" {
  description = "Subscription name => full id, for every subscription of infra/topology.yaml."
  value       = { for name, s in google_pubsub_subscription.subscription : name => s.id }
}

output "deadletter_archive_subscriptions" {
  description = "Pull subscriptions of the dead-letter topic (the archive that keeps every dead letter for the retention period)."
  value       = [for name, s in local.subscriptions : google_pubsub_subscription.subscription[name].id if s.topic_key == "deadletter" && s.push == null]
}

output "function_urls" {
  description = "Function => URL of its Cloud Run service (not publicly invokable: only the push invoker may call it; the status API only api_invokers, see api_url)."
  value       = { for name, f in google_cloudfunctions2_function.function : name => f.service_config[0].uri }
}

output "push_endpoints" {
  description = "Subscription name => push endpoint (deterministic function URL + /projects/P/topics/T) for push subscriptions."
  value       = { for name, s in google_pubsub_subscription.subscription : name => s.push_config[0].push_endpoint if length(s.push_config) > 0 }
}

output "function_service_accounts" {
  description = "Function => email of its runtime service account."
  value       = { for name, sa in google_service_account.function : name => sa.email }
}

output "push_invoker_service_account" {
  description = "Email of the account Pub/Sub signs push requests as (the functions check DCM_PUSH_SERVICE_ACCOUNT against it)."
  value       = google_service_account.push_invoker.email
}

output "provider_publishers" {
  description = "Provider => IAM member allowed to publish to its ingress topic. Give the created service accounts to the provider bridges (Workload Identity Federation or impersonation; no keys are created here)."
  value       = local.provider_publisher_members
}

output "build_service_account" {
  description = "Email of the service account Cloud Build uses to build the functions."
  value       = local.build_service_account_email
}

output "source_bucket" {
  description = "Bucket holding the function deploy zips."
  value       = google_storage_bucket.sources.name
}

output "function_source_objects" {
  description = "Function => deployed source object (<function>-<sha256>.zip): what each function was built from."
  value       = { for name, o in google_storage_bucket_object.source : name => o.name }
}

output "firestore_database" {
  description = "Firestore database the functions use."
  value       = local.firestore_database
}

output "firestore_ttl_fields" {
  description = "Collection => field carrying its TTL policy."
  value       = { for k, f in google_firestore_field.ttl : k => f.field }
}

output "nats_ingress_service" {
  description = "Name of the NATS ingress's Cloud Run service (docs/nats.md); null when nats_url is not set."
  value       = try(google_cloud_run_v2_service.nats_ingress[0].name, null)
}

output "nats_ingress_service_account" {
  description = "Email of the NATS ingress's service account (publishes to the ingress topics and the dead-letter topic only); null when nats_url is not set."
  value       = try(google_service_account.nats_ingress[0].email, null)
}

output "nats_credentials_secret" {
  description = "Secret Manager secret to add the NATS ingress's password or creds file to (a version; docs/nats.md); null when nats_url is not set."
  value       = try(google_secret_manager_secret.nats_credentials[0].id, null)
}

output "nats_image_repository" {
  description = "Where to push the NATS ingress image (REGION-docker.pkg.dev/PROJECT/REPOSITORY); nats_ingress_image is <this>/nats-ingress@sha256:..."
  value       = local.nats_image_repository
}
