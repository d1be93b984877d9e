# The keyring that encrypts the webhook signing secrets kept in Firestore
# (callbacks/{id}.secrets[]: AES-GCM, docs/callbacks.md). Firestore IAM is per
# database, not per collection, so every function that stores anything could
# read the callbacks collection; what it finds there is ciphertext. The key is
# here, and only the functions that sign or register callbacks may read it
# (topology.tf: function_access.callback_keys, i.e. notify and the api). They
# are told its name in DCM_CALLBACK_KEYS_SECRET (functions.tf).
#
# Each version of the secret is a whole keyring, JSON:
#
#   {"primary": "<key id>", "keys": {"<key id>": "<base64 of 32 random bytes>", ...}}
#
# the primary key encrypts, every key listed decrypts. The functions read
# versions/latest. Rotation adds versions by hand (docs/deploy.md, "Webhook
# signing keys"); Terraform never rewrites one.

locals {
  callback_keys_secret_version = "${google_secret_manager_secret.callback_keys.id}/versions/latest"
}

resource "google_secret_manager_secret" "callback_keys" {
  project   = var.project_id
  secret_id = var.callback_keys_secret_id
  labels    = merge(var.labels, { app = "dcm-status" })

  replication {
    auto {}
  }

  depends_on = [google_project_service.api]
}

# The first keyring: one key of 32 bytes from a CSPRNG (random_bytes). It is
# kept in the Terraform state (sensitive): whoever reads the state bucket can
# read it. To keep it out of the state, set create_callback_keys_version =
# false and add the first version yourself before the first apply reaches the
# functions (docs/deploy.md).
resource "random_bytes" "callback_key" {
  count  = var.create_callback_keys_version ? 1 : 0
  length = 32
}

resource "google_secret_manager_secret_version" "callback_keys_initial" {
  count = var.create_callback_keys_version ? 1 : 0

  secret      = google_secret_manager_secret.callback_keys.id
  secret_data = jsonencode({ primary = "k1", keys = { k1 = random_bytes.callback_key[0].base64 } })
  # Destroying or replacing this resource never destroys the key: what it
  # encrypted must stay readable. Only an operator destroys a key version,
  # after a rekey (docs/deploy.md).
  deletion_policy = "ABANDON"

  lifecycle {
    ignore_changes = [secret_data]
  }
}

# notify (signs deliveries) and the api (registers callbacks, rotates their
# secrets) read the keyring; no one else is granted anything on it here, and
# no project-wide Secret Manager role is granted to any identity of this stack.
resource "google_secret_manager_secret_iam_member" "callback_keys_accessor" {
  for_each = toset(local.callback_key_functions)

  project   = var.project_id
  secret_id = google_secret_manager_secret.callback_keys.secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.function[each.key].member
}
