# Firestore: the database, the TTL policies and the composite indexes that
# data_model.tf declares (see there for the collections and their queries).

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

# A daily backup beside point-in-time recovery (7 days of versions, to the minute) and delete protection:
# a backup outlives both (kept firestore_backup_retention_days) and restores into a new database.
# Procedure: docs/operations.md#restore.
resource "google_firestore_backup_schedule" "daily" {
  project   = var.project_id
  database  = local.firestore_database
  retention = "${var.firestore_backup_retention_days * 86400}s"

  daily_recurrence {}

  depends_on = [google_firestore_database.database]
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

# No single-field index on the fields written at the event rate with sequentially increasing values
# (data_model.tf says which and why): an index on one would cap its collection near 500 writes/s.
resource "google_firestore_field" "unindexed" {
  for_each = local.firestore_unindexed_fields

  project    = var.project_id
  database   = local.firestore_database
  collection = each.value.collection
  field      = each.value.field

  index_config {}

  depends_on = [google_firestore_database.database]
}

# A single-field index of collection-group scope on each field a collection-group query filters on
# (data_model.tf says which): Firestore keeps none by default. The override also drops the field's automatic
# collection-scope index, which no query of one resource's subcollection uses.
resource "google_firestore_field" "collection_group" {
  for_each = local.firestore_collection_group_indexed

  project    = var.project_id
  database   = local.firestore_database
  collection = each.value.collection
  field      = each.value.field

  index_config {
    indexes {
      order       = "ASCENDING"
      query_scope = "COLLECTION_GROUP"
    }
  }

  depends_on = [google_firestore_database.database]
}

resource "google_firestore_index" "index" {
  for_each = local.firestore_indexes

  project     = var.project_id
  database    = local.firestore_database
  collection  = each.value.collection
  query_scope = each.value.query_scope

  dynamic "fields" {
    for_each = each.value.fields
    content {
      field_path = fields.value.field_path
      order      = fields.value.order
    }
  }

  depends_on = [google_firestore_database.database]
}

# The daily usage snapshot's chunks (shared/state/usage/snapshot.py) are read whole by day, never queried by
# what they hold: no index entry for each of the up to 2,000 resources' maps a chunk holds (40,000 at most).
resource "google_firestore_field" "usage_chunk_entries" {
  project    = var.project_id
  database   = local.firestore_database
  collection = "chunks"
  field      = "entries"

  index_config {}

  depends_on = [google_firestore_database.database]
}
