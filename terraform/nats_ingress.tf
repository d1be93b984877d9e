# The NATS ingress (docs/nats.md): a long-running worker (python -m functions.nats_ingress.main)
# holding a JetStream durable pull consumer on the DCM installation's NATS, forwarding every status
# CloudEvent to the ingress topic of the provider the NATS server's import prefix names
# (providers.{provider}.dcm.>), then the pipeline is the same as for a Pub/Sub publisher.
#
# Deployed only when var.nats_url is set, as a Cloud Run service (not a worker pool: a service
# restarts a wedged instance on its /healthz liveness probe, and it is GA in every provider
# version versions.tf allows):
#
#   - at least one instance, CPU always allocated (cpu_idle = false): nothing pushes to it, it
#     pulls, so it must never scale to zero nor be throttled between requests;
#   - no invoker at all: ingress internal only and no roles/run.invoker grant. Its port answers
#     /healthz (lag, last error) to Cloud Run's probe, which needs no IAM;
#   - its own service account, which may publish to the providers' ingress topics and the
#     dead-letter topic, and read its NATS credential: nothing else (topology.tf:
#     nats_ingress_publishes);
#   - NATS URL from var.nats_url; the credential from Secret Manager: a password (NATS_USER +
#     NATS_PASSWORD) or a creds file (NATS_CREDS), never in the Terraform state (Terraform creates
#     the secret, an operator adds its version: docs/nats.md);
#   - stream, subjects and consumer from the `nats:` section of infra/topology.yaml (local.nats_env).
#
# The image is built from functions/nats_ingress/Dockerfile by cloudbuild.yaml (_NATS_INGRESS=1)
# and pushed to the Artifact Registry repository below; var.nats_ingress_image names it by digest.

locals {
  nats_ingress_enabled  = var.nats_url != null
  nats_image_repository = "${var.region}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.images.repository_id}"
}

# ---- the image -----------------------------------------------------------------

# Images this stack builds itself (today the NATS ingress; the functions' images are Cloud
# Functions' own). Empty, it costs nothing; created with the stack so the first image can be
# pushed before the ingress is switched on.
resource "google_artifact_registry_repository" "images" {
  #checkov:skip=CKV_GCP_84:Images hold the project's open code, no secret; Google-managed encryption at rest. CMEK would add a KMS key and its cost.
  project       = var.project_id
  location      = var.region
  repository_id = "${var.name_prefix}-images"
  description   = "Container images dcm-status builds itself: the NATS ingress (functions/nats_ingress/Dockerfile)."
  format        = "DOCKER"
  labels        = merge(var.labels, { app = "dcm-status" })

  docker_config {
    immutable_tags = true # a tag (the build id) always names the same image
  }

  # The last 10 images stay (rollback); older ones go after 30 days.
  cleanup_policies {
    id     = "keep-recent"
    action = "KEEP"
    most_recent_versions {
      keep_count = 10
    }
  }
  cleanup_policies {
    id     = "delete-old"
    action = "DELETE"
    condition {
      older_than = "2592000s"
    }
  }

  depends_on = [google_project_service.api]
}

# ---- identity ------------------------------------------------------------------

resource "google_service_account" "nats_ingress" {
  count = local.nats_ingress_enabled ? 1 : 0

  project      = var.project_id
  account_id   = "${var.name_prefix}-nats"
  display_name = "dcm-status NATS ingress"
  description  = "Runtime identity of the NATS ingress: publishes to the providers' ingress topics and the dead-letter topic, reads its NATS credential; nothing else."
}

# Publisher on each provider's ingress topic and on the dead-letter topic, and on no other topic.
resource "google_pubsub_topic_iam_member" "nats_ingress_publisher" {
  for_each = local.nats_ingress_enabled ? toset(local.nats_ingress_publishes) : toset([])

  project = var.project_id
  topic   = google_pubsub_topic.topic[each.key].name
  role    = "roles/pubsub.publisher"
  member  = google_service_account.nats_ingress[0].member
}

# ---- the NATS credential -------------------------------------------------------

# The secret only: its version (the password, or the creds file) is added by an operator
# (docs/nats.md), so it is never in the Terraform state.
resource "google_secret_manager_secret" "nats_credentials" {
  count = local.nats_ingress_enabled ? 1 : 0

  project   = var.project_id
  secret_id = var.nats_credentials_secret_id
  labels    = merge(var.labels, { app = "dcm-status" })

  replication {
    auto {}
  }

  depends_on = [google_project_service.api]
}

resource "google_secret_manager_secret_iam_member" "nats_credentials_accessor" {
  count = local.nats_ingress_enabled ? 1 : 0

  project   = var.project_id
  secret_id = google_secret_manager_secret.nats_credentials[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.nats_ingress[0].member
}

# ---- the service ---------------------------------------------------------------

resource "google_cloud_run_v2_service" "nats_ingress" {
  count = local.nats_ingress_enabled ? 1 : 0

  project     = var.project_id
  location    = var.region
  name        = "${var.name_prefix}-nats-ingress"
  description = "Moves status CloudEvents from the NATS JetStream stream ${local.nats_env.NATS_STREAM_NAME} onto the providers' ingress topics (docs/nats.md)."
  labels      = merge(var.labels, { app = "dcm-status", function = "nats-ingress" })

  # Nobody calls it: reachable from inside the project only, and no member has roles/run.invoker.
  ingress = "INGRESS_TRAFFIC_INTERNAL_ONLY"
  # It keeps no state (JetStream keeps the consumer's position): destroying it loses nothing.
  deletion_protection = false

  template {
    service_account = google_service_account.nats_ingress[0].email
    labels          = merge(var.labels, { app = "dcm-status", function = "nats-ingress" })

    scaling {
      min_instance_count = var.nats_ingress_sizing.min_instance_count
      max_instance_count = var.nats_ingress_sizing.max_instance_count
    }

    containers {
      image = coalesce(var.nats_ingress_image, "-")

      resources {
        limits = {
          cpu    = var.nats_ingress_sizing.cpu
          memory = var.nats_ingress_sizing.memory
        }
        cpu_idle          = false # CPU always allocated: it works between requests (there are none)
        startup_cpu_boost = true
      }

      dynamic "env" {
        for_each = local.nats_ingress_env
        content {
          name  = env.key
          value = env.value
        }
      }

      dynamic "env" {
        for_each = var.nats_credentials_kind == "password" ? ["NATS_PASSWORD"] : []
        content {
          name = env.value
          value_source {
            secret_key_ref {
              secret  = google_secret_manager_secret.nats_credentials[0].secret_id
              version = "latest"
            }
          }
        }
      }

      dynamic "volume_mounts" {
        for_each = var.nats_credentials_kind == "creds" ? ["nats-creds"] : []
        content {
          name       = volume_mounts.value
          mount_path = local.nats_creds_dir
        }
      }

      # The port ($PORT) answers /healthz: a wedged ingress is restarted; a restart redelivers
      # only what it had not acked (after ack_wait), and the stream sequence makes it known.
      liveness_probe {
        initial_delay_seconds = 10
        period_seconds        = 30
        timeout_seconds       = 5
        failure_threshold     = 3
        http_get {
          path = "/healthz"
        }
      }
    }

    dynamic "volumes" {
      for_each = var.nats_credentials_kind == "creds" ? ["nats-creds"] : []
      content {
        name = volumes.value
        secret {
          secret = google_secret_manager_secret.nats_credentials[0].secret_id
          items {
            version = "latest"
            path    = local.nats_creds_file
          }
        }
      }
    }
  }

  lifecycle {
    precondition {
      condition     = var.nats_ingress_image != null
      error_message = "nats_url is set, so the NATS ingress is deployed: set nats_ingress_image too (build and push functions/nats_ingress/Dockerfile to output nats_image_repository; cloudbuild.yaml does it with _NATS_INGRESS=1; docs/nats.md)."
    }
    precondition {
      condition     = var.nats_credentials_kind != "password" || var.nats_user != null
      error_message = "nats_credentials_kind = \"password\" needs nats_user (the NATS user of the platform account the ingress connects as)."
    }
  }

  depends_on = [
    google_project_service.api,
    google_pubsub_topic_iam_member.nats_ingress_publisher,
    google_secret_manager_secret_iam_member.nats_credentials_accessor,
  ]
}
