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
#   events/{dedupId}           dedup ledger + outbox + change feed + history; counted
#                              by outcome == (applied, stale: recordedAt >= the
#                              stats' window, composite below), change != null:
#                              automatic. The feed:
#                              committedAt <= horizon, ordered by committedAt,
#                              __name__ (asc, or desc for the latest N), with
#                              equality on provider, resourceType, status:
#                              composite indexes below. TTL on expireAt, which
#                              only entries without history carry (an applied or
#                              stale one is its resource's history: kept). A hot
#                              resource's latest entries (key ==, processedAt
#                              desc), a resource's history (key ==, observedAt
#                              desc; key ==, recordedAt <= t, recordedAt desc):
#                              composites below.
#   resources/{key}/history    history written before issue 32, read by nothing
#                              once infra/backfill_history.py folded it into events.
#   duplicates/{messageId}     TTL on expireAt.
#   deadletters/{entryId}      counted by reason / provider ==; filtered by
#                              reason / provider / fingerprint ==, ranged and
#                              ordered on lastSeen: composite indexes below.
#                              TTL on expireAt.
#   billing_resources/{key}    never written since one transition document is written per
#                              change (documents from before are left, read by nobody).
#     .../transitions/{id}     written by upsert in the commit of a change's ledger entry
#                              (issue 40; billing keeps the daily usage snapshot from them).
#     .../transitions          one resource's read whole, or from a time on (atUs >=):
#                              automatic. The report's collection-group queries
#                              (shared/state/usage/transitions.py): provider ==,
#                              resourceType ==, labels.tenant ==, merged: collection-group
#                              single-field indexes below; what was recorded since the
#                              usage snapshot looked (shard in, recordedUs >): a
#                              collection-group composite below.
#   usage_days/{day}/chunks/{n} the daily usage snapshot's (shared/state/usage/
#                              snapshot.py): read whole per day; `entries` unindexed.
#   usage_snapshot/state       its watermark: read by id.
#   audit_stopped/{eventId}    written once, never queried.
#   callbacks/{callbackId}     webhook callbacks (shared/callbacks/registry.py,
#                              shared/callbacks/store.py): key ==, scope ==:
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
  # shared/state/documents.py (tests/deploy/test_terraform.py). The TTL fields (expireAt) are exempt above.
  firestore_shard_field = "shard"
  # collection => its shard fields (shared/state/documents.py SHARD_FIELDS, with how many shards each): `shard`
  # for the sequential fields a change writes; `staleShard` for resources.staleAt alone, which every report
  # writes (a resync's re-reports included), so it spreads over more ranges (360) than a list may read.
  firestore_stale_shard_field = "staleShard"
  firestore_shard_fields = {
    events      = [local.firestore_shard_field]
    resources   = [local.firestore_shard_field, local.firestore_stale_shard_field]
    transitions = [local.firestore_shard_field]
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
      observedAt          = "unindexed"
      recordedAt          = "sharded"
      publishedAt         = "unindexed"
      lastTransitionTime  = "unindexed"
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
      reReported         = "unindexed" # the ring of latest re-reports: rewritten by each, never queried
    }
    # the transitions (a collection group): when upsert recorded each, read behind the shard by the usage snapshot
    transitions = {
      recordedUs = "sharded"
    }
  }
  # Fields no query filters, orders or sums on: the maps a provider fills (each subfield two index entries a
  # write) and free text. Mirrors UNFILTERED_FIELDS in shared/state/documents.py (issue 42: docs/cost.md).
  firestore_unfiltered_fields = {
    resources = ["resourceSpecific", "extra", "output_spec", "outputs", "message", "flapping"]
    events    = ["output_spec", "outputs", "message"]
  }
  # "collection-field" => {collection, field}: one single-field index exemption each.
  firestore_unindexed_fields = merge(concat([
    for collection, fields in local.firestore_sequential_fields : {
      for field, how in fields : "${collection}-${replace(lower(field), ".", "-")}" => { collection = collection, field = field }
    }
    ], [
    for collection, fields in local.firestore_unfiltered_fields : {
      for field in fields : "${collection}-${replace(lower(field), ".", "-")}" => { collection = collection, field = field }
    }
  ])...)

  # Fields that collection-group queries filter on (equality only, merged). Firestore keeps single-field
  # indexes of collection scope only, by default: each of these gets an ascending one of collection-group
  # scope (firestore.tf: google_firestore_field.collection_group). Mirrors GROUP_FILTER_FIELDS in
  # shared/state/usage/transitions.py (tests/deploy/test_terraform.py). None is sequential.
  firestore_collection_group_fields = {
    transitions = ["provider", "resourceType", "labels.tenant"]
  }
  # "collection-field" => {collection, field}: one field override each.
  firestore_collection_group_indexed = merge([
    for collection, fields in local.firestore_collection_group_fields : {
      for field in fields : "${collection}-${replace(lower(field), ".", "-")}" => { collection = collection, field = field }
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
    # A resource's history, newest observation first (paged), and the last applied by a time (?at=): behind
    # the key, as above, only one resource's entries share a range.
    { collection = "events", equality = ["key"], order_by = "observedAt", orders = ["DESCENDING"] },
    { collection = "events", equality = ["key"], order_by = "recordedAt", orders = ["DESCENDING"] },
    # The history entries of the stats' window, counted by outcome (an applied or stale entry has no TTL), every
    # shard at once (recordedAt is sharded); a trends minute's applied and stale totals over every provider too
    # (its duplicates' and dead letters' totals range on `at` and `firstSeen` alone: single-field indexes).
    { collection = "events", equality = ["outcome"], sharded = true, order_by = "recordedAt", orders = ["ASCENDING"] },
    # The trends (shared/state/trends.py): a minute's applied and stale entries per provider (merged with the one
    # above), its duplicate records and its new dead letters per provider. The provider in front spreads each.
    { collection = "events", equality = ["provider"], sharded = true, order_by = "recordedAt", orders = ["ASCENDING"] },
    { collection = "duplicates", equality = ["provider"], order_by = "at", orders = ["ASCENDING"] },
    { collection = "deadletters", equality = ["provider"], order_by = "firstSeen", orders = ["ASCENDING"] },
    # Resources past their freshness deadline (the sweep), every stale shard (staleAt has its own shard field).
    { collection = "resources", equality = [local.firestore_stale_shard_field], order_by = "staleAt", orders = ["ASCENDING"] },
    # A provider's resource with the newest freshness deadline (the sweep: is the provider silent?).
    { collection = "resources", equality = ["provider"], sharded = true, order_by = "staleAt", orders = ["DESCENDING"] },
    # Hot resources, the documents written longest ago first (the sweep writes or cools them).
    { collection = "resources", equality = ["hot"], sharded = true, order_by = "writtenAt", orders = ["ASCENDING"] },
    # What upsert recorded since the daily usage snapshot (billing's) last looked (shared/state/usage/snapshot.py), every
    # shard at once: a collection-group index (recordedUs is sharded).
    { collection = "transitions", equality = ["shard"], order_by = "recordedUs", orders = ["ASCENDING"], query_scope = "COLLECTION_GROUP" },
  ]

  # The equality filters of the api's resource lists (shared/api/queries.py ResourceFilter).
  resource_filter_fields = ["provider", "resourceType", "status", "metadata.tenant", "metadata.region", "metadata.environment"]

  # "collection-field-orderfield-order" => index
  firestore_indexes = merge([
    for spec in local.firestore_index_specs : {
      for pair in setproduct(spec.equality, spec.orders) :
      "${spec.collection}-${replace(lower(pair[0]), ".", "-")}${try(spec.sharded, false) ? "-shard" : ""}-${lower(spec.order_by)}-${lower(pair[1])}" => {
        collection  = spec.collection
        query_scope = try(spec.query_scope, "COLLECTION")
        fields = concat(
          [{ field_path = pair[0], order = "ASCENDING" }],
          try(spec.sharded, false) ? [{ field_path = local.firestore_shard_field, order = "ASCENDING" }] : [],
          [{ field_path = spec.order_by, order = pair[1] }],
        )
      }
    }
  ]...)
}
