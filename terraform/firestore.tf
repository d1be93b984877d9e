# Firestore: the database, the TTL policies on the expiry fields the code
# writes, and the composite indexes its queries need.
#
# Collections (shared/state_store.py, shared/queries.py, shared/deadletter_store.py):
#   resources/{key}            current state; queried by equality filters only
#                              (provider, resourceType, status), which the
#                              automatic single-field indexes serve (merged).
#   resources/{key}/history    order_by observedAt desc: single-field index, automatic.
#   events/{dedupId}           dedup ledger + outbox; counted by outcome ==,
#                              changePending ==: automatic. TTL on expireAt.
#   duplicates/{messageId}     TTL on expireAt.
#   deadletters/{entryId}      filtered by reason / provider / fingerprint ==,
#                              ranged and ordered on lastSeen: composite
#                              indexes below. TTL on expireAt.

locals {
  # shared/clients.py opens firestore.Client(project=...): the (default) database.
  firestore_database = "(default)"

  # collection => TTL field. Firestore deletes a document (within about a day)
  # once this timestamp is past; the code sets it on every write.
  firestore_ttl_fields = {
    events      = "expireAt"
    duplicates  = "expireAt"
    deadletters = "expireAt"
  }

  # Composite indexes: equality on one field, range and order on lastSeen, in
  # both directions (the range query without order_by scans ascending, the
  # listings show the newest first). Two equality filters together are served
  # by merging these indexes, so no combination needs an index of its own.
  firestore_indexes = merge([
    for field in ["reason", "provider", "fingerprint"] : {
      for order in ["ASCENDING", "DESCENDING"] : "deadletters-${lower(field)}-lastseen-${lower(order)}" => {
        collection = "deadletters"
        fields = [
          { field_path = field, order = "ASCENDING" },
          { field_path = "lastSeen", order = order },
        ]
      }
    }
  ]...)
}

resource "google_firestore_database" "database" {
  count = var.create_firestore_database ? 1 : 0

  project                           = var.project_id
  name                              = local.firestore_database
  location_id                       = coalesce(var.firestore_location, var.region)
  type                              = "FIRESTORE_NATIVE"
  app_engine_integration_mode       = "DISABLED"
  point_in_time_recovery_enablement = var.firestore_point_in_time_recovery ? "POINT_IN_TIME_RECOVERY_ENABLED" : "POINT_IN_TIME_RECOVERY_DISABLED"
  delete_protection_state           = var.firestore_delete_protection ? "DELETE_PROTECTION_ENABLED" : "DELETE_PROTECTION_DISABLED"
  deletion_policy                   = var.firestore_delete_protection ? "ABANDON" : "DELETE"

  depends_on = [google_project_service.api]
}

resource "google_firestore_field" "ttl" {
  for_each = local.firestore_ttl_fields

  project    = var.project_id
  database   = local.firestore_database
  collection = each.key
  field      = each.value

  # TTL policy on this field...
  ttl_config {}

  # ...and no single-field index on it: it is never queried, and indexing a
  # monotonically increasing timestamp would create a write hotspot.
  index_config {}

  depends_on = [google_firestore_database.database]
}

resource "google_firestore_index" "index" {
  for_each = local.firestore_indexes

  project     = var.project_id
  database    = local.firestore_database
  collection  = each.value.collection
  query_scope = "COLLECTION"

  dynamic "fields" {
    for_each = each.value.fields
    content {
      field_path = fields.value.field_path
      order      = fields.value.order
    }
  }

  depends_on = [google_firestore_database.database]
}
