# The Firestore data model the code relies on: which fields carry a TTL
# policy and which composite indexes the queries need (firestore.tf creates
# them). Like topology.tf, this file uses only variables and functions, so
# tests/deploy/test_terraform.py can evaluate it without providers.
#
# Collections (shared/upsert/store.py, shared/deadletter/store.py, the read
# side shared/api/queries.py, shared/api/feed.py, and the webhook callbacks):
#   resources/{key}            current state. Equality filters on any of
#                              provider, resourceType, status, metadata.tenant,
#                              metadata.region, metadata.environment, ordered
#                              by __name__: single-field indexes, merged. Sorted
#                              by updatedAt desc (sharded), or searched by a resourceId
#                              prefix (range, ordered by resourceId), with those
#                              filters: composite indexes below.
#   resources/{key}/history    order_by observedAt desc; recordedAt <= t order_by
#                              recordedAt desc: single-field indexes, automatic.
#   events/{dedupId}           dedup ledger + outbox + change feed; counted by
#                              outcome ==, change != null: automatic. The feed:
#                              committedAt <= horizon, ordered by committedAt,
#                              __name__ (asc, or desc for the latest N), with
#                              equality on provider, resourceType, status:
#                              composite indexes below. TTL on expireAt. A hot
#                              resource's latest entries (key ==, processedAt
#                              desc): composite below.
#   duplicates/{messageId}     TTL on expireAt.
#   deadletters/{entryId}      counted by reason / provider ==; filtered by
#                              reason / provider / fingerprint ==, ranged and
#                              ordered on lastSeen: composite indexes below.
#                              TTL on expireAt.
#   billing_resources/{key}    provider ==, resourceType ==, tenants array-contains:
#                              automatic single-field indexes (merged).
#     .../transitions          read whole, counted: automatic.
#   audit_stopped/{eventId}    written once, never queried.
#   callbacks/{callbackId}     webhook callbacks (shared/api/callbacks.py,
#                              shared/notify/store.py): key ==, scope ==:
#                              automatic single-field indexes.
#   deliveries/{deliveryId}    read by id only. TTL on expireAt.
#   resyncs/{provider~batch}   snapshot batches (shared/sweep/handler.py): state ==
#                              open: automatic. Counting a batch's resources
#                              (resources: provider ==, resync.id ==) and listing
#                              a provider's (provider ==, resourceType in): merged
#                              single-field indexes, no composite. Freshness:
#                              resources staleAt <= now ordered by staleAt
#                              behind staleShard in [...]: composite below; a
#                              provider's newest deadline (provider ==, shard in,
#                              staleAt desc): composite below.
#                              Hot resources, written longest ago first (hot ==,
#                              writtenAt asc): composite below.
#   providers/{provider}       a provider silent as a whole or reporting (the
#                              sweep, at each transition): state ==, automatic.
#   audit_providers/{id}       written once, never queried.

locals {
  # shared/runtime/clients.py opens firestore.Client(project=...): the (default) database.
  firestore_database = "(default)"

  # The IAM condition of every Firestore grant (iam.tf): this database only. Firestore evaluates IAM
  # conditions on the database (resource.name projects/P/databases/D), not on collections or documents.
  firestore_iam_condition = "resource.name == \"projects/${var.project_id}/databases/${local.firestore_database}\""

  # collection => TTL field. Firestore deletes a document (within about a day)
  # once this timestamp is past; the code sets it on every write.
  firestore_ttl_fields = {
    events      = "expireAt"
    duplicates  = "expireAt"
    deadletters = "expireAt"
    deliveries  = "expireAt"
  }

  # Fields written at the event rate with sequentially increasing values. Firestore holds a collection
  # with such an *indexed* value to about 500 writes/s (docs/scale.md), so none keeps its single-field
  # index (firestore.tf: an exemption each; a map's exemption covers its subfields): "unindexed" ones are
  # never queried; "sharded" ones are queried only through composite indexes with the shard field in
  # front of them (below), which spread their writes over the shards. Mirrors SEQUENTIAL_FIELDS in
  # shared/state/model.py (tests/deploy/test_terraform.py). The TTL fields (expireAt) are exempt above.
  firestore_shard_field = "shard"
  # collection => its shard fields (shared/state/model.py SHARD_FIELDS, with how many shards each): `shard`
  # for the sequential fields a change writes; `staleShard` for resources.staleAt alone, which every report
  # writes (a resync's re-reports included), so it spreads over more ranges (360) than a list may read.
  firestore_stale_shard_field = "staleShard"
  firestore_shard_fields = {
    events    = [local.firestore_shard_field]
    resources = [local.firestore_shard_field, local.firestore_stale_shard_field]
  }
  firestore_sequential_fields = {
    events = {
      committedAt         = "sharded"
      processedAt         = "unindexed"
      changeAnnouncedAt   = "unindexed"
      ingressMessageId    = "unindexed"
      eventId             = "unindexed"
      "change.body"       = "unindexed"
      "change.attributes" = "unindexed"
      state               = "unindexed"
    }
    resources = {
      updatedAt          = "sharded"
      staleAt            = "sharded"
      writtenAt          = "sharded"
      lastSeenAt         = "unindexed"
      observedAt         = "unindexed"
      publishedAt        = "unindexed"
      reportedTime       = "unindexed"
      lastTransitionTime = "unindexed"
      createdAt          = "unindexed"
      recentChanges      = "unindexed"
      "resync.at"        = "unindexed"
      "resync.index"     = "unindexed"
    }
  }
  # "collection-field" => {collection, field}: one single-field index exemption each.
  firestore_unindexed_fields = merge([
    for collection, fields in local.firestore_sequential_fields : {
      for field, how in fields : "${collection}-${replace(lower(field), ".", "-")}" => { collection = collection, field = field }
    }
  ]...)

  # Composite indexes, one per (equality field, ordering): equality on one
  # field, then the range / order field (a sharded one: the equality field,
  # the shard field, then the order field; queried with shard in [every shard]). Several equality filters together are
  # served by merging the indexes of their fields (same ordering suffix), so no
  # combination needs an index of its own. Firestore appends __name__ in the
  # direction of the last field, which is the tie-break every query orders by.
  firestore_index_specs = [
    # Dead letters by reason / provider / fingerprint, newest first (and the
    # range query without order_by, which scans ascending).
    { collection = "deadletters", equality = ["reason", "provider", "fingerprint"], order_by = "lastSeen", orders = ["ASCENDING", "DESCENDING"] },
    # Resources, most recently updated first (sort=-updatedAt), every shard at once (updatedAt is sharded).
    { collection = "resources", equality = ["shard"], order_by = "updatedAt", orders = ["DESCENDING"] },
    { collection = "resources", equality = local.resource_filter_fields, sharded = true, order_by = "updatedAt", orders = ["DESCENDING"] },
    # Resources whose id starts with q: resourceId >= q and < q + "\uf8ff", ordered by resourceId.
    { collection = "resources", equality = local.resource_filter_fields, order_by = "resourceId", orders = ["ASCENDING"] },
    # The change feed in commit order, and its latest N (descending), every shard at once (committedAt is sharded).
    { collection = "events", equality = ["shard"], order_by = "committedAt", orders = ["ASCENDING", "DESCENDING"] },
    { collection = "events", equality = ["provider", "resourceType", "status"], sharded = true, order_by = "committedAt", orders = ["ASCENDING", "DESCENDING"] },
    # A hot resource's latest ledger entries, whose states are newer than its document (upsert, the sweep, the api).
    # The key in front spreads processedAt over every resource: one resource's entries only are sequential.
    { collection = "events", equality = ["key"], order_by = "processedAt", orders = ["DESCENDING"] },
    # Resources past their freshness deadline (the sweep), every stale shard (staleAt has its own shard field).
    { collection = "resources", equality = [local.firestore_stale_shard_field], order_by = "staleAt", orders = ["ASCENDING"] },
    # A provider's resource with the newest freshness deadline (the sweep: is the provider silent?).
    { collection = "resources", equality = ["provider"], sharded = true, order_by = "staleAt", orders = ["DESCENDING"] },
    # Hot resources, the documents written longest ago first (the sweep writes or cools them).
    { collection = "resources", equality = ["hot"], sharded = true, order_by = "writtenAt", orders = ["ASCENDING"] },
  ]

  # The equality filters of the api's resource lists (shared/api/queries.py ResourceFilter).
  resource_filter_fields = ["provider", "resourceType", "status", "metadata.tenant", "metadata.region", "metadata.environment"]

  # "collection-field-orderfield-order" => index
  firestore_indexes = merge([
    for spec in local.firestore_index_specs : {
      for pair in setproduct(spec.equality, spec.orders) :
      "${spec.collection}-${replace(lower(pair[0]), ".", "-")}${try(spec.sharded, false) ? "-shard" : ""}-${lower(spec.order_by)}-${lower(pair[1])}" => {
        collection = spec.collection
        fields = concat(
          [{ field_path = pair[0], order = "ASCENDING" }],
          try(spec.sharded, false) ? [{ field_path = local.firestore_shard_field, order = "ASCENDING" }] : [],
          [{ field_path = spec.order_by, order = pair[1] }],
        )
      }
    }
  ]...)
}
