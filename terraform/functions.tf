# One Cloud Functions (gen2) function per function of infra/topology.yaml.
#
# Source: the deterministic zips `python -m infra.package --out build/` writes
# (main.py + shared/{runtime,contracts,<name>}/ + schemas/ + requirements.txt). Each is uploaded under a
# name carrying its sha256, so a code change is a new object and redeploys the
# function, and an unchanged tree plans nothing.
#
# No Eventarc trigger: the functions are reached only through our own push
# subscriptions (pubsub.tf), authenticated by an OIDC token of the push
# invoker, the only principal allowed to invoke them. The exception is a
# function declared `http: true` (the status API, api): Pub/Sub never calls
# it, the push invoker may not invoke it, only the members of api_invokers may
# (api.tf).

locals {
  function_source_dir = coalesce(var.function_source_dir, "${path.module}/../build")
  function_zips       = { for name in keys(local.functions) : name => "${local.function_source_dir}/${name}.zip" }

  # Deterministic Cloud Run URL of each function, known before it exists
  # (https://SERVICE-PROJECT_NUMBER.REGION.run.app). It is the push endpoint
  # and the OIDC audience, and the function is told it (DCM_PUSH_AUDIENCE):
  # service_config[0].uri could not be, it would be a dependency cycle. For the
  # api it is the address admins open (output api_url).
  function_urls = {
    for name, f in local.functions : name => "https://${f.name}-${data.google_project.this.number}.${var.region}.run.app"
  }

  source_bucket_name = coalesce(var.source_bucket_name, "${var.project_id}-${var.name_prefix}-sources")

  # function => the settings only some functions get. A pushed function checks
  # every push token against its audience (its own URL) and the push invoker's
  # email, and refuses to start without them (shared/runtime/auth.py); the api
  # takes no push and gets neither: it verifies its callers' Google ID tokens
  # itself (shared/api/callers.py), against its own URL and
  # var.api_token_audiences (DCM_API_AUDIENCE), or IAP's signed header against
  # var.api_iap_audience, and refuses to start without them. notify and the
  # api are told where the keyring of the webhook signing keys is (secrets.tf);
  # no other function may read it.
  function_env = {
    for name, f in local.functions : name => merge(
      f.http ? {
        DCM_API_AUDIENCE     = join(",", concat([local.function_urls[name]], var.api_token_audiences))
        DCM_API_IAP_AUDIENCE = var.api_iap_audience
        } : {
        DCM_PUSH_AUDIENCE        = local.function_urls[name]
        DCM_PUSH_SERVICE_ACCOUNT = google_service_account.push_invoker.email
      },
      contains(local.callback_key_functions, name) ? { DCM_CALLBACK_KEYS_SECRET = local.callback_keys_secret_version } : {},
    )
  }
}

resource "google_storage_bucket" "sources" {
  #checkov:skip=CKV_GCP_62:Only Terraform writes and Cloud Build reads this bucket of build inputs; Cloud Audit Logs already record that access, usage logs would add a second bucket for nothing.
  project                     = var.project_id
  name                        = local.source_bucket_name
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = false
  labels                      = merge(var.labels, { app = "dcm-status" })

  versioning {
    enabled = true
  }

  # Replaced sources stay 30 days (to rebuild an older revision), then go.
  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 30
      with_state                 = "ARCHIVED"
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.api]
}

resource "google_storage_bucket_object" "source" {
  for_each = local.function_zips

  bucket       = google_storage_bucket.sources.name
  name         = "${each.key}-${filesha256(each.value)}.zip"
  source       = each.value
  content_type = "application/zip"
}

resource "google_cloudfunctions2_function" "function" {
  for_each = local.functions

  project     = var.project_id
  location    = var.region
  name        = each.value.name
  description = each.value.description
  labels      = merge(var.labels, { app = "dcm-status", function = each.key })

  build_config {
    runtime         = var.runtime
    entry_point     = each.value.entry_point
    service_account = local.build_service_account_id

    source {
      storage_source {
        bucket = google_storage_bucket.sources.name
        object = google_storage_bucket_object.source[each.key].name
      }
    }
  }

  service_config {
    service_account_email = google_service_account.function[each.key].email
    # Private at the network level like every function; the status API alone
    # may be opened wider (api_ingress_settings), IAM still admitting only api_invokers.
    ingress_settings               = each.value.http ? coalesce(var.api_ingress_settings, var.ingress_settings) : var.ingress_settings
    all_traffic_on_latest_revision = true

    available_memory                 = each.value.settings.available_memory
    available_cpu                    = each.value.settings.available_cpu
    min_instance_count               = each.value.settings.min_instance_count
    max_instance_count               = each.value.settings.max_instance_count
    max_instance_request_concurrency = each.value.settings.max_instance_request_concurrency
    timeout_seconds                  = each.value.settings.timeout_seconds

    # shared/runtime/settings.py: the same for every function, then its own
    # (local.function_env). DCM_LOCAL_MODE, which turns the push token check
    # off for the emulator stack, is never set here (and is refused on Cloud Run).
    environment_variables = merge(local.topology_env, {
      DCM_PROJECT                = var.project_id
      DCM_LANES_PROJECT          = local.lanes_project
      DCM_LEDGER_TTL_DAYS        = tostring(var.ledger_ttl_days)
      DCM_DEADLETTER_TTL_DAYS    = tostring(var.deadletter_ttl_days)
      DCM_MAX_EVENT_BYTES        = tostring(var.max_event_bytes)
      DCM_MAX_CLOCK_SKEW_SECONDS = tostring(var.max_clock_skew_seconds)
      DCM_HOOK_TIMEOUT_SECONDS   = tostring(var.hook_timeout_seconds)
      DCM_CALLBACK_CONCURRENCY   = tostring(var.callback_concurrency)
      DCM_CALLBACK_VIEW_TTL      = tostring(var.callback_view_ttl_seconds)
      DCM_HOOK_PORTS             = join(",", var.hook_ports)
      # output values readers see as "[redacted]" (docs/security.md, item 13); "" = the default names
      DCM_OUTPUT_REDACT = join(",", var.output_redact)
      # the rate cards /v1/usage prices with, by name (docs/billing.md "Usage over the API")
      DCM_RATE_CARDS = jsonencode(var.rate_cards)
      # the api's guards (shared/api/callers.py, shared/api/app.py)
      DCM_API_ADMINS                 = join(",", var.api_admins)
      DCM_API_IAP                    = tostring(var.api_iap)
      DCM_MAX_CALLBACKS_PER_CALLER   = tostring(var.max_callbacks_per_caller)
      DCM_MAX_CALLBACKS              = tostring(var.max_callbacks)
      DCM_MIN_ROTATION_GRACE_SECONDS = tostring(var.min_rotation_grace_seconds)
      DCM_MAX_STREAMS                = tostring(var.max_streams)
      DCM_MAX_STREAMS_PER_CALLER     = tostring(var.max_streams_per_caller)
      # A live change stream of the api (GET /v1/changes/stream) ends by itself
      # before the request timeout would cut it (a 504): its last wait for news
      # lasts up to 15 s (shared/api/feed.py), hence the 20 s margin; EventSource
      # reconnects at once. Raise the api's timeout_seconds for longer streams.
      DCM_STREAM_SECONDS = tostring(max(each.value.settings.timeout_seconds - 20, 10))
      # functions-framework runs one gunicorn worker with THREADS threads:
      # as many as the requests an instance is given.
      THREADS = tostring(each.value.settings.max_instance_request_concurrency)
    }, local.trace_env, local.function_env[each.key])
  }

  lifecycle {
    precondition {
      condition     = contains(keys(local.function_access), each.key)
      error_message = "Function ${each.key} has no entry in local.function_access (terraform/topology.tf): declare what its service account may do."
    }
    precondition {
      condition     = contains(["none", "read", "append", "write"], try(local.function_access[each.key].firestore, ""))
      error_message = "local.function_access.${each.key}.firestore (terraform/topology.tf) must be \"none\", \"read\", \"append\" or \"write\"."
    }
    precondition {
      condition     = !each.value.http || length(try(local.function_access[each.key].publishes, [])) == 0
      error_message = "Function ${each.key} is called over HTTP (http: true in infra/topology.yaml): it answers its callers itself and may not publish (local.function_access)."
    }
    precondition {
      condition     = !each.value.http || !var.api_iap || var.api_iap_audience != ""
      error_message = "api_iap = true needs api_iap_audience, the audience of IAP's signed header (/projects/NUMBER/global/backendServices/ID): the api verifies it (shared/api/callers.py) and does not start without it."
    }
    precondition {
      condition     = !each.value.http || each.value.settings.timeout_seconds >= 30
      error_message = "Function ${each.key} serves live streams that end 20 s before its timeout: give it timeout_seconds >= 30 (function_overrides)."
    }
    precondition {
      condition     = length("${each.value.name}-${data.google_project.this.number}") <= 63
      error_message = "Function name ${each.value.name} is too long for a deterministic Cloud Run URL (63 characters with the project number): shorten name_prefix."
    }
  }

  depends_on = [
    google_project_service.api,
    google_project_iam_member.build,
    google_project_iam_member.function_firestore,
    google_secret_manager_secret_iam_member.callback_keys_accessor,
    google_secret_manager_secret_version.callback_keys_initial,
  ]
}

# Functions are not publicly invokable: the push invoker is the only member
# with roles/run.invoker on the Cloud Run services of the pushed functions.
# The status API (http: true) is not one of them: api.tf grants its invokers.
resource "google_cloud_run_v2_service_iam_member" "push_invoker" {
  for_each = local.push_functions

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.function[each.key].name
  role     = "roles/run.invoker"
  member   = google_service_account.push_invoker.member
}
