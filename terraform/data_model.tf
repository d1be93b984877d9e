# The Firestore data model the code relies on: which fields carry a TTL
# policy and which composite indexes the queries need (firestore.tf creates
# them). Like topology.tf, this file uses only variables and functions, so
# tests/deploy/test_terraform.py can evaluate it without providers.
#
# Collections (shared/upsert/store.py, shared/upsert/queries.py, shared/deadletter/store.py):
#   resources/{key}            current state; queried by equality filters only
#                              (provider, resourceType, status), which the
#                              automatic single-field indexes serve (merged).
#   resources/{key}/history    order_by observedAt desc: single-field index, automatic.
#   events/{dedupId}           dedup ledger + outbox; counted by outcome ==,
#                              change != null: automatic. TTL on expireAt.
#   duplicates/{messageId}     TTL on expireAt.
#   deadletters/{entryId}      filtered by reason / provider / fingerprint ==,
#                              ranged and ordered on lastSeen: composite
#                              indexes below. TTL on expireAt.
#   billing_resources/{key}    provider ==, resourceType ==, tenants array-contains:
#                              automatic single-field indexes (merged).
#     .../transitions          read whole, counted: automatic.
#   audit_stopped/{eventId}    written once, never queried.

locals {
  # shared/runtime/clients.py opens firestore.Client(project=...): the (default) database.
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

