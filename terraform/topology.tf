# The expansion of infra/topology.yaml, the one topology declaration, read by
# the local stack too (infra/topology.py). These locals mirror topology.py rule
# for rule, so Terraform and the emulator stack create the same topics and
# subscriptions with the same policies:
#
#   - a topic with `per_provider: true` exists once per provider, its name's
#     "{provider}" replaced;
#   - a subscription whose name contains "{provider}" exists once per provider;
#   - `dead_letter` defaults to true, into the topic `dead_letter_topic` names
#     (a topic key, `deadletter` by default), `enable_message_ordering` to false;
#   - ack deadline, retention, max delivery attempts and retry policy come from
#     `defaults:` unless the subscription sets its own (its retry_policy is
#     merged key by key over the default one).
#
# This file must only use variables and functions (no resources or data
# sources): tests/deploy/test_terraform.py evaluates it with `terraform
# console`, without providers, and compares the result with topology.py.

locals {
  topology_file = coalesce(var.topology_file, "${path.module}/../infra/topology.yaml")
  topology      = yamldecode(file(local.topology_file))

  cloud_providers = tolist(var.cloud_providers != null ? var.cloud_providers : local.topology.providers)
  # Names the platform's own NATS users hold (dcm_status_contracts.identity.RESERVED_PROVIDER_NAMES): a provider
  # of the topology with one would stop nats-server (a duplicate user). pubsub.tf refuses them in a plan.
  reserved_provider_names       = ["platform", "control-plane"]
  providers_with_reserved_names = [for p in local.cloud_providers : p if contains(local.reserved_provider_names, p)]

  # `defaults:` of the declaration, each one overridable by a variable.
  topology_defaults = {
    ack_deadline_seconds       = coalesce(var.ack_deadline_seconds, local.topology.defaults.ack_deadline_seconds)
    message_retention_duration = coalesce(var.message_retention_duration, local.topology.defaults.message_retention_duration)
    max_delivery_attempts      = coalesce(var.max_delivery_attempts, local.topology.defaults.max_delivery_attempts)
    minimum_backoff            = coalesce(var.retry_minimum_backoff, local.topology.defaults.retry_policy.minimum_backoff)
    maximum_backoff            = coalesce(var.retry_maximum_backoff, local.topology.defaults.retry_policy.maximum_backoff)
    oldest_unacked_alert       = try(local.topology.defaults.oldest_unacked_alert, false)
  }

  # The providers' lanes (the normalized topics and upsert's subscriptions to them) may live in a project of
  # their own (var.lanes_project): Pub/Sub holds 10,000 topics and 10,000 subscriptions per project, and a
  # provider has two of each (its ingress and its lane), so 5,000 providers need two projects (docs/scale.md).
  # The ingress topics stay here: each proves its provider's identity (docs/security.md).
  lane_topic_keys = ["normalized"]
  lanes_project   = coalesce(var.lanes_project, var.project_id)

  # topic key ("ingress-aws", "normalized", ...) => topic
  topics = merge([
    for key, t in local.topology.topics : {
      for p in(try(t.per_provider, false) ? local.cloud_providers : [""]) :
      (p == "" ? key : "${key}-${p}") => {
        key         = key
        name        = replace(t.name, "{provider}", p)
        provider    = p == "" ? null : p
        description = try(t.description, "")
        project     = contains(local.lane_topic_keys, key) ? local.lanes_project : var.project_id
      }
    }
  ]...)

  # subscription name => subscription, every policy resolved
  subscriptions = merge([
    for s in local.topology.subscriptions : {
      for p in(strcontains(s.name, "{provider}") ? local.cloud_providers : [""]) :
      replace(s.name, "{provider}", p) => {
        name                    = replace(s.name, "{provider}", p)
        topic_key               = s.topic
        topic                   = try(local.topology.topics[s.topic].per_provider, false) ? "${s.topic}-${p}" : s.topic
        topic_name              = replace(local.topology.topics[s.topic].name, "{provider}", p)
        provider                = p == "" ? null : p
        project                 = contains(local.lane_topic_keys, s.topic) ? local.lanes_project : var.project_id
        push                    = try(s.push, null)
        pull                    = try(s.pull, false)
        enable_message_ordering = try(s.enable_message_ordering, false)
        dead_letter             = try(s.dead_letter, true)
        dead_letter_topic       = try(s.dead_letter_topic, "deadletter") # a topic key: where Pub/Sub dead-letters
        ack_deadline_seconds    = try(s.ack_deadline_seconds, local.topology_defaults.ack_deadline_seconds)
        max_delivery_attempts   = try(s.max_delivery_attempts, local.topology_defaults.max_delivery_attempts)
        minimum_backoff         = format("%ds", tonumber(trimsuffix(tostring(try(s.retry_policy.minimum_backoff, local.topology_defaults.minimum_backoff)), "s")))
        maximum_backoff         = format("%ds", tonumber(trimsuffix(tostring(try(s.retry_policy.maximum_backoff, local.topology_defaults.maximum_backoff)), "s")))
        retention               = format("%ds", tonumber(trimsuffix(tostring(try(s.message_retention_duration, local.topology_defaults.message_retention_duration)), "s")))
        filter                  = try(s.filter, null)
        # seconds past which the oldest unacked message alerts (monitoring.tf); null: no alert (`false`)
        oldest_unacked_alert = try(s.oldest_unacked_alert, local.topology_defaults.oldest_unacked_alert) == false ? null : tonumber(trimsuffix(tostring(try(s.oldest_unacked_alert, local.topology_defaults.oldest_unacked_alert)), "s"))
      }
    }
  ]...)

  # export name => a Pub/Sub BigQuery subscription (exports.tf): production only, the local stack skips it.
  exports = {
    for e in try(local.topology.exports, []) : e.name => {
      name                 = e.name
      topic                = e.topic
      topic_name           = local.topology.topics[e.topic].name
      dataset              = e.dataset
      table                = e.table
      event_schema         = e.event_schema
      oldest_unacked_alert = try(e.oldest_unacked_alert, local.topology_defaults.oldest_unacked_alert) == false ? null : tonumber(trimsuffix(tostring(try(e.oldest_unacked_alert, local.topology_defaults.oldest_unacked_alert)), "s"))
    }
  }

  topic_retention = format("%ds", tonumber(trimsuffix(tostring(local.topology_defaults.message_retention_duration), "s")))

  # function => its deployment: one gen2 function per declared function,
  # entry point named like the folder functions/<name>/. `http: true` marks a
  # function called over HTTP by people and their tools (the status API), never
  # pushed to by Pub/Sub: no push-invoker grant, its invokers are api_invokers
  # (api.tf).
  functions = {
    for name, f in local.topology.functions : name => {
      name        = "${var.name_prefix}-${name}"
      entry_point = name
      description = try(f.description, "")
      http        = try(f.http, false) == true
      settings = merge(var.function_defaults, {
        for k, v in try(var.function_overrides[name], {}) : k => v if v != null
      })
    }
  }

  # The functions Pub/Sub pushes to, and the ones called over HTTP (Topology.http_functions).
  push_functions = { for name, f in local.functions : name => f if !f.http }
  http_functions = { for name, f in local.functions : name => f if f.http }

  # What each function's own service account may do, and nothing more.
  # publishes: topic keys of the declaration (a per-provider key would mean
  # every provider's topic). firestore: what it does with documents, granted on
  # the project's Firestore database only (iam.tf: firestore_roles, an IAM
  # condition on the database name; Firestore has no per-collection IAM):
  # "none"; "read" (read documents, run queries and listeners:
  # roles/datastore.viewer); "append" (create documents, never read, change or
  # delete one: a custom role); "write" (read and write documents:
  # roles/datastore.user). callback_keys: may read the keyring that encrypts
  # the webhook signing secrets stored in Firestore (secrets.tf): the only
  # functions that sign or register callbacks. Every pushed function but
  # deadletter dead-letters the messages it rejects
  # (shared/runtime/entrypoint.py), so it publishes to deadletter; the
  # deadletter function never publishes (replay runs with the operator's
  # identity, from the CLI). notify publishes the webhook deliveries of both
  # lanes (callbacks, callbacks_retry). The api (HTTP) never publishes: it
  # answers a bad request itself; it reads what it serves and writes Firestore
  # only to register webhook callbacks (shared/callbacks/registry.py). audit only
  # creates its records (shared/audit/handler.py). The sweep publishes the
  # updates it synthesises (reconciliation) to upsert's topic. A function
  # missing here, or an unknown firestore value, fails the plan
  # (preconditions in functions.tf).
  function_access = {
    ingest     = { publishes = ["normalized", "deadletter"], firestore = "none", callback_keys = false }
    upsert     = { publishes = ["changed", "deadletter"], firestore = "write", callback_keys = false }
    deadletter = { publishes = [], firestore = "write", callback_keys = false }
    billing    = { publishes = ["deadletter"], firestore = "write", callback_keys = false }
    audit      = { publishes = ["deadletter"], firestore = "append", callback_keys = false }
    notify     = { publishes = ["callbacks", "callbacks_retry", "deadletter"], firestore = "write", callback_keys = true }
    api        = { publishes = [], firestore = "write", callback_keys = true }
    sweep      = { publishes = ["normalized", "providers", "deadletter"], firestore = "write", callback_keys = false }
  }

  # The functions that hold the webhook signing keys (secrets.tf): access to the secret, and its name in
  # DCM_CALLBACK_KEYS_SECRET.
  callback_key_functions = sort([for fn, access in local.function_access : fn if access.callback_keys && contains(keys(local.functions), fn)])

  # "function/topic key" => grant of roles/pubsub.publisher
  function_publisher_grants = merge([
    for fn, access in local.function_access : {
      for key, t in local.topics : "${fn}/${key}" => { function = fn, topic = key }
      if contains(access.publishes, t.key) && contains(keys(local.functions), fn)
    }
  ]...)

  # The settings every function reads (shared/runtime/settings.py), as infra/local/stack.py
  # sets them for the local stack (Topology.env()). Never DCM_LOCAL_MODE.
  topology_env = {
    DCM_NORMALIZED_TOPIC_TEMPLATE = local.topology.topics.normalized.name
    DCM_TOPIC_CHANGED             = local.topology.topics.changed.name
    DCM_TOPIC_DEADLETTER          = local.topology.topics.deadletter.name
    DCM_TOPIC_CALLBACKS           = local.topology.topics.callbacks.name
    DCM_TOPIC_CALLBACKS_RETRY     = local.topology.topics.callbacks_retry.name
    DCM_INGRESS_TOPIC_TEMPLATE    = local.topology.topics.ingress.name
    DCM_PROVIDERS                 = join(",", local.cloud_providers)
    DCM_PROVIDER_PROFILES         = jsonencode(try(local.topology.provider_profiles, {}))
    DCM_FRESHNESS                 = jsonencode(try(local.topology.freshness, {}))
    DCM_FLAPPING                  = jsonencode(try(local.topology.flapping, {}))
    DCM_TOPIC_PROVIDERS           = local.topology.topics.providers.name
    DCM_TOPIC_REPLAY              = local.topology.topics.replay.name
    DCM_INGRESS_SUBSCRIPTION      = join(",", [for s in local.topology.subscriptions : s.name if s.topic == "ingress"])
  }

  # The NATS ingress (nats_ingress.tf, docs/nats.md): its stream, subjects, durable consumer and
  # delivery limits, from the `nats:` section of infra/topology.yaml, as the local stack sets them
  # (NatsSpec.env() of infra/topology.py): a stream and a consumer per provider (their names name
  # {provider}); the DCM control-plane reads NATS_CONTROL_PLANE_STREAM, where they republish.
  nats_env = {
    NATS_STREAM_NAME      = local.topology.nats.stream
    NATS_STATUS_SUBJECT   = local.topology.nats.subjects
    NATS_CONSUMER_NAME    = local.topology.nats.consumer
    NATS_PROVIDER_PREFIX  = local.topology.nats.provider_prefix
    NATS_ACK_WAIT_SECONDS = tostring(local.topology.nats.ack_wait_seconds)
    NATS_MAX_DELIVER      = tostring(local.topology.nats.max_deliver)
    NATS_MAX_AGE_SECONDS  = tostring(tonumber(trimsuffix(tostring(local.topology.nats.max_age), "s")))
    # a stream per provider: its budget of unsettled messages and its storage (docs/nats.md)
    NATS_MAX_ACK_PENDING      = tostring(local.topology.nats.max_ack_pending)
    NATS_PROVIDER_MAX_BYTES   = tostring(local.topology.nats.max_bytes)
    NATS_PROVIDER_MAX_MSGS    = tostring(local.topology.nats.max_msgs)
    NATS_CONTROL_PLANE_STREAM = local.topology.nats.control_plane_stream
    NATS_CONTROL_PLANE_PREFIX = local.topology.nats.control_plane_prefix
  }

  # Where the ingress publishes: every provider's ingress topic (the provider is the one the NATS
  # server's import prefix names, never one read from the event) and the dead-letter topic. Topic keys
  # of local.topics; nothing else (no normalized, changed or replay topic: it may not skip ingest).
  nats_ingress_publishes = concat(sort([for key, t in local.topics : key if t.key == "ingress"]), ["deadletter"])

  # The ingress's environment (nats_ingress.tf): every function's settings (shared/runtime/settings.py),
  # the NATS stream, subjects, consumer, the server and the user. Not its credential: the password is
  # read from Secret Manager into NATS_PASSWORD, or the creds file mounted from there at nats_creds_dir.
  # every function's and the NATS ingress's spans go to Cloud Trace (tracing.tf, docs/tracing.md)
  trace_env = {
    DCM_TRACE_EXPORTER     = "cloud_trace"
    DCM_TRACE_SAMPLE_RATIO = tostring(var.trace_sample_ratio)
  }
  nats_creds_dir  = "/etc/dcm-nats"
  nats_creds_file = "ingress.creds"
  nats_ingress_env = merge(local.topology_env, local.nats_env, local.trace_env, {
    DCM_PROJECT         = var.project_id
    DCM_MAX_EVENT_BYTES = tostring(var.max_event_bytes)
    NATS_URL            = var.nats_url
    },
    var.nats_credentials_kind == "password" ? { NATS_USER = var.nats_user } : {},
    var.nats_credentials_kind == "creds" ? { NATS_CREDS = "${local.nats_creds_dir}/${local.nats_creds_file}" } : {},
  )
}
