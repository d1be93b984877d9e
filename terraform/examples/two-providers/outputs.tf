output "ingress_topics" {
  description = "Provider => ingress topic its bridge publishes to."
  value       = module.dcm_status.ingress_topics
}

output "provider_publishers" {
  description = "Provider => identity allowed to publish to its ingress topic."
  value       = module.dcm_status.provider_publishers
}

output "deadletter_archive_subscriptions" {
  description = "Where every dead letter is kept for the retention period."
  value       = module.dcm_status.deadletter_archive_subscriptions
}
