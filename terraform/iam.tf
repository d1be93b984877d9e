# Identities, each with only what it needs:
#
#   function/<name>  runtime of one function: publish to the topics its use
#                    case writes; Firestore as its code uses it (read, append
#                    only, or read/write), on this stack's database only; the
#                    webhook signing keys for notify and the api only
#                    (topology.tf: function_access; secrets.tf). Nothing else.
#                    docs/deploy.md has the table of who reads and writes what.
#   push invoker     the identity Pub/Sub signs push requests as; may invoke
#                    the pushed functions (not the api), nothing else.
#   api_invokers     people and tools allowed to call the status API (api.tf).
#   build            builds the function images (Cloud Build).
#   pub-<provider>   publishes to that provider's ingress topic only (unless
#                    var.provider_publishers names an existing identity).

locals {
  build_service_account_email = coalesce(var.build_service_account, one(google_service_account.build[*].email))
  build_service_account_id    = "projects/${var.project_id}/serviceAccounts/${local.build_service_account_email}"

  # provider => member allowed to publish to its ingress topic
  provider_publisher_members = merge(
    { for p, sa in google_service_account.provider : p => sa.member },
    { for p, m in var.provider_publishers : p => m if contains(local.cloud_providers, p) },
  )
}

# ---- functions ---------------------------------------------------------------

resource "google_service_account" "function" {
  for_each = local.functions

  project      = var.project_id
  account_id   = "${var.name_prefix}-${each.key}"
  display_name = "dcm-status ${each.key} function"
  description  = "Runtime identity of the ${each.key} function (${each.value.description})"

  lifecycle {
    precondition {
      condition     = length("${var.name_prefix}-${each.key}") >= 6 && length("${var.name_prefix}-${each.key}") <= 30
      error_message = "Service account id ${var.name_prefix}-${each.key} must be 6-30 characters: adjust name_prefix."
    }
  }
}

# Firestore access of function_access => the role that grants it ("none": no grant).
locals {
  firestore_roles = {
    read   = "roles/datastore.viewer"
    append = google_project_iam_custom_role.firestore_append.name
    write  = "roles/datastore.user"
  }
}

# Create documents, and nothing else: no read, update or delete (a create is a
# commit with the precondition exists=false: datastore.entities.create). The
# audit function's records: it can neither read what others store (webhook
# callbacks included) nor change a record once written.
resource "google_project_iam_custom_role" "firestore_append" {
  project     = var.project_id
  role_id     = "${replace(var.name_prefix, "-", "_")}_firestore_append"
  title       = "dcm-status Firestore append only"
  description = "Create Firestore documents; never read, update or delete one (the dcm-status audit records)."
  permissions = ["datastore.entities.create"]
}

# Firestore IAM is granted on the project, for every collection (there is no
# per-collection IAM); the condition keeps each grant to this stack's
# database. What must stay secret in Firestore (webhook signing secrets) is
# encrypted with a key that only notify and the api may read (secrets.tf).
resource "google_project_iam_member" "function_firestore" {
  for_each = { for fn, access in local.function_access : fn => access if access.firestore != "none" && contains(keys(local.functions), fn) }

  project = var.project_id
  role    = local.firestore_roles[each.value.firestore]
  member  = google_service_account.function[each.key].member

  condition {
    title       = "dcm-status database only"
    description = "Documents of the ${local.firestore_database} Firestore database only."
    expression  = local.firestore_iam_condition
  }
}

# ---- push invoker ------------------------------------------------------------

resource "google_service_account" "push_invoker" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-push"
  display_name = "dcm-status Pub/Sub push invoker"
  description  = "Pub/Sub push subscriptions sign their requests as this account; it may only invoke the dcm-status functions."
}

# The Pub/Sub service agent mints the OIDC tokens of the push invoker (granted
# by default in projects created after April 2021; explicit here, on this one
# account only, for the older ones).
# The lanes project's agent too, when it is another project: it pushes upsert's lanes.
resource "google_service_account_iam_member" "pubsub_agent_mints_invoker_tokens" {
  for_each = local.pubsub_service_agents # project id => its agent (keys known at plan time)

  service_account_id = google_service_account.push_invoker.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_service_agents[each.key]
}

# ---- build ---------------------------------------------------------------

resource "google_service_account" "build" {
  count = var.build_service_account == null ? 1 : 0

  project      = var.project_id
  account_id   = "${var.name_prefix}-build"
  display_name = "dcm-status function builds"
  description  = "Cloud Build identity for building the dcm-status functions: write logs and images, read sources."
}

resource "google_project_iam_member" "build" {
  for_each = var.build_service_account == null ? toset([
    "roles/logging.logWriter",
    "roles/artifactregistry.writer",
  ]) : toset([])

  project = var.project_id
  role    = each.key
  member  = google_service_account.build[0].member
}

# The function sources it builds, on their bucket only: project-wide, objectViewer would also read the Terraform
# state bucket, which holds the first webhook signing key (create_callback_keys_version) and every output.
resource "google_storage_bucket_iam_member" "build_sources" {
  count = var.build_service_account == null ? 1 : 0

  bucket = google_storage_bucket.sources.name
  role   = "roles/storage.objectViewer"
  member = google_service_account.build[0].member
}

# ---- providers -----------------------------------------------------------

resource "google_service_account" "provider" {
  for_each = toset([for p in local.cloud_providers : p if !contains(keys(var.provider_publishers), p)])

  project      = var.project_id
  account_id   = "${var.name_prefix}-pub-${each.key}"
  display_name = "dcm-status ${each.key} publisher"
  description  = "The ${each.key} provider bridge publishes status CloudEvents as this account, to its own ingress topic only."

  lifecycle {
    precondition {
      condition     = length("${var.name_prefix}-pub-${each.key}") <= 30
      error_message = "Service account id ${var.name_prefix}-pub-${each.key} exceeds 30 characters: shorten name_prefix or the provider name."
    }
  }
}
