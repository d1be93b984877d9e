# Inputs. Topology (topics, subscriptions, functions, default providers,
# retry and dead-letter policies) is NOT declared here: it comes from
# infra/topology.yaml, the file the local stack reads (see topology.tf). The
# variables below only override its `defaults:` section and size the runtime.

# ---- project -----------------------------------------------------------------

variable "project_id" {
  description = "Google Cloud project id to deploy into."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a Google Cloud project id (6-30 characters, lowercase letters, digits, hyphens)."
  }
}

variable "region" {
  description = "Region of the functions and of the source bucket, e.g. europe-west1."
  type        = string
  default     = "europe-west1"
}

variable "name_prefix" {
  description = "Prefix of every named resource this module creates besides topics and subscriptions (those are named by infra/topology.yaml): functions, service accounts, bucket."
  type        = string
  default     = "dcm-status"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,11}$", var.name_prefix))
    error_message = "name_prefix must be 2-12 characters: a lowercase letter, then lowercase letters, digits or hyphens (service account ids are limited to 30 characters)."
  }
}

variable "labels" {
  description = "Labels added to every resource that supports them."
  type        = map(string)
  default     = {}
}

variable "enable_apis" {
  description = "Enable the Google Cloud APIs the stack needs (never disabled on destroy)."
  type        = bool
  default     = true
}

# ---- topology ----------------------------------------------------------------

variable "topology_file" {
  description = "Path of the topology declaration. Default: infra/topology.yaml of this repository, the file the local stack reads. Change it only to test the expansion."
  type        = string
  default     = null
}

variable "cloud_providers" {
  description = "Providers to wire (one ingress topic, one ingest subscription and one publisher identity each). Default: the `providers:` list of infra/topology.yaml. Adding a name here is how a provider is added."
  type        = list(string)
  default     = null

  validation {
    condition     = var.cloud_providers == null ? true : alltrue([for p in var.cloud_providers : can(regex("^[a-z][a-z0-9-]{0,20}[a-z0-9]$", p))])
    error_message = "Each provider name must be 2-22 characters: a lowercase letter, then lowercase letters, digits or hyphens, not ending in '-'."
  }

  validation {
    condition     = var.cloud_providers == null ? true : length(distinct(var.cloud_providers)) == length(var.cloud_providers)
    error_message = "cloud_providers must not contain duplicates."
  }

  # dcm_status_contracts.identity.RESERVED_PROVIDER_NAMES (local.reserved_provider_names checks the topology's)
  validation {
    condition     = var.cloud_providers == null ? true : length(setintersection(var.cloud_providers, ["platform", "control-plane"])) == 0
    error_message = "cloud_providers: \"platform\" and \"control-plane\" are reserved: the platform's own NATS users have those names, a provider's NATS user is its name, and nats-server stops on a duplicate user (docs/nats.md)."
  }
}

variable "provider_publishers" {
  description = "Provider name -> IAM member allowed to publish to that provider's ingress topic (e.g. \"serviceAccount:aws-bridge@other-project.iam.gserviceaccount.com\"). Providers not listed get a dedicated service account created here."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for m in values(var.provider_publishers) : can(regex("^(serviceAccount|user|group|principal|principalSet):", m))])
    error_message = "provider_publishers values must be IAM members such as serviceAccount:NAME@PROJECT.iam.gserviceaccount.com (public principals are refused)."
  }
}

variable "message_retention_duration" {
  description = "Overrides `defaults.message_retention_duration` of infra/topology.yaml: how long topics and subscriptions keep messages for replay (seconds with an `s` suffix, 600s-604800s). null = as declared."
  type        = string
  default     = null

  validation {
    condition     = var.message_retention_duration == null ? true : can(regex("^[0-9]+s$", var.message_retention_duration))
    error_message = "message_retention_duration must look like \"604800s\"."
  }
}

variable "max_delivery_attempts" {
  description = "Overrides `defaults.max_delivery_attempts` of infra/topology.yaml: deliveries before Pub/Sub dead-letters a message (5-100). null = as declared."
  type        = number
  default     = null

  validation {
    condition     = var.max_delivery_attempts == null ? true : (var.max_delivery_attempts >= 5 && var.max_delivery_attempts <= 100)
    error_message = "max_delivery_attempts must be between 5 and 100."
  }
}

variable "retry_minimum_backoff" {
  description = "Overrides `defaults.retry_policy.minimum_backoff` of infra/topology.yaml (e.g. \"1s\"). A subscription's own retry_policy still wins. null = as declared."
  type        = string
  default     = null

  validation {
    condition     = var.retry_minimum_backoff == null ? true : can(regex("^[0-9]+s$", var.retry_minimum_backoff))
    error_message = "retry_minimum_backoff must look like \"1s\"."
  }
}

variable "retry_maximum_backoff" {
  description = "Overrides `defaults.retry_policy.maximum_backoff` of infra/topology.yaml (e.g. \"30s\", at most 600s). A subscription's own retry_policy still wins. null = as declared."
  type        = string
  default     = null

  validation {
    condition     = var.retry_maximum_backoff == null ? true : can(regex("^[0-9]+s$", var.retry_maximum_backoff))
    error_message = "retry_maximum_backoff must look like \"30s\"."
  }
}

variable "ack_deadline_seconds" {
  description = "Overrides `defaults.ack_deadline_seconds` of infra/topology.yaml: how long a push may take before Pub/Sub retries it (10-600). null = as declared."
  type        = number
  default     = null

  validation {
    condition     = var.ack_deadline_seconds == null ? true : (var.ack_deadline_seconds >= 10 && var.ack_deadline_seconds <= 600)
    error_message = "ack_deadline_seconds must be between 10 and 600."
  }
}

# ---- data retention --------------------------------------------------------

variable "ledger_ttl_days" {
  description = "Days a dedup-ledger entry (`events`) and a duplicate record (`duplicates`) live before the Firestore TTL policy deletes them (DCM_LEDGER_TTL_DAYS). Redeliveries older than this are caught by the staleness check."
  type        = number
  default     = 7

  validation {
    condition     = var.ledger_ttl_days >= 1
    error_message = "ledger_ttl_days must be at least 1."
  }
}

variable "hook_timeout_seconds" {
  description = "How long notify waits for a webhook receiver's answer (DCM_HOOK_TIMEOUT_SECONDS); no answer by then is a failed attempt, retried. Well under the callback subscriptions' ack deadline (60 s)."
  type        = number
  default     = 10

  validation {
    condition     = var.hook_timeout_seconds >= 1 && var.hook_timeout_seconds <= 30
    error_message = "hook_timeout_seconds must be from 1 to 30."
  }
}

variable "trace_sample_ratio" {
  description = "Share of new traces recorded and exported to Cloud Trace (DCM_TRACE_SAMPLE_RATIO), decided by the platform at the edge whatever a provider's traceparent asks; every log line carries its trace id either way (docs/tracing.md)."
  type        = number
  default     = 0.1

  validation {
    condition     = var.trace_sample_ratio >= 0 && var.trace_sample_ratio <= 1
    error_message = "trace_sample_ratio must be from 0 to 1."
  }
}

variable "callback_concurrency" {
  description = "Calls one notify instance makes at once to one webhook receiver that has shown it answers fast (DCM_CALLBACK_CONCURRENCY); a receiver not known to be fast gets one at a time (docs/callbacks.md)."
  type        = number
  default     = 8

  validation {
    condition     = var.callback_concurrency >= 1
    error_message = "callback_concurrency must be 1 or more."
  }
}

variable "max_clock_skew_seconds" {
  description = "How far ahead of the platform's clock a provider's event time may be (DCM_MAX_CLOCK_SKEW_SECONDS). Beyond it the time is clamped to when the event was received (the sent time kept as reportedTime), so one event from a broken clock cannot make every later update of its resource look stale."
  type        = number
  default     = 300

  validation {
    condition     = var.max_clock_skew_seconds >= 0
    error_message = "max_clock_skew_seconds must be 0 or more."
  }
}

variable "deadletter_ttl_days" {
  description = "Days a dead-letter entry (`deadletters`) lives after it was last seen before the Firestore TTL policy deletes it (DCM_DEADLETTER_TTL_DAYS)."
  type        = number
  default     = 30

  validation {
    condition     = var.deadletter_ttl_days >= 1
    error_message = "deadletter_ttl_days must be at least 1."
  }
}

variable "max_event_bytes" {
  description = "Largest provider CloudEvent the ingest function accepts, in bytes (DCM_MAX_EVENT_BYTES); larger ones are dead-lettered as too large."
  type        = number
  default     = 65536
}

# ---- functions -------------------------------------------------------------

variable "function_source_dir" {
  description = "Directory holding the deploy zips <function>.zip built by `python -m infra.package --out <dir>`. Default: build/ at the repository root."
  type        = string
  default     = null
}

variable "runtime" {
  description = "Cloud Functions runtime (pyproject.toml allows Python 3.11 and 3.12)."
  type        = string
  default     = "python312"

  validation {
    condition     = contains(["python311", "python312"], var.runtime)
    error_message = "runtime must be python311 or python312 (pyproject.toml: requires-python >=3.11,<3.13)."
  }
}

variable "function_defaults" {
  description = "Runtime sizing of every function: memory, vCPU, instance limits, requests per instance (also the worker thread count) and timeout (must not exceed the pushing subscription's ack deadline)."
  type = object({
    available_memory                 = optional(string, "512Mi")
    available_cpu                    = optional(string, "1")
    min_instance_count               = optional(number, 0)
    max_instance_count               = optional(number, 10)
    max_instance_request_concurrency = optional(number, 16)
    timeout_seconds                  = optional(number, 60)
  })
  default = {}

  validation {
    condition     = var.function_defaults.max_instance_count >= 1 && var.function_defaults.min_instance_count <= var.function_defaults.max_instance_count
    error_message = "function_defaults: need 1 <= max_instance_count and min_instance_count <= max_instance_count."
  }
}

variable "function_overrides" {
  description = "Per-function changes to function_defaults, keyed by function name (ingest, upsert, deadletter, billing). Unset attributes keep the default."
  type = map(object({
    available_memory                 = optional(string)
    available_cpu                    = optional(string)
    min_instance_count               = optional(number)
    max_instance_count               = optional(number)
    max_instance_request_concurrency = optional(number)
    timeout_seconds                  = optional(number)
  }))
  default = {}
}

variable "ingress_settings" {
  description = "Who may reach the functions at the network level. ALLOW_INTERNAL_ONLY admits Pub/Sub push from the same project and nothing from the internet; IAM applies on top in every case: roles/run.invoker for the push invoker only (for the status API: api_invokers only, see api_ingress_settings)."
  type        = string
  default     = "ALLOW_INTERNAL_ONLY"

  validation {
    condition     = contains(["ALLOW_INTERNAL_ONLY", "ALLOW_INTERNAL_AND_GCLB", "ALLOW_ALL"], var.ingress_settings)
    error_message = "ingress_settings must be ALLOW_INTERNAL_ONLY, ALLOW_INTERNAL_AND_GCLB or ALLOW_ALL."
  }
}

# ---- the status API (functions with `http: true` in infra/topology.yaml) ----

variable "api_invokers" {
  description = "IAM members who may call the status API and open its dashboard (roles/run.invoker on the api function's Cloud Run service only), e.g. [\"group:platform-admins@example.com\"]. Default: nobody. See terraform/api.tf for how an admin opens it."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for m in var.api_invokers : can(regex("^(user|group|serviceAccount|domain):[^\\s:]+$", m))])
    error_message = "api_invokers must be IAM members: user:EMAIL, group:EMAIL, serviceAccount:EMAIL or domain:DOMAIN."
  }

  validation {
    condition     = !anytrue([for m in var.api_invokers : contains(["allusers", "allauthenticatedusers"], lower(trimspace(m)))])
    error_message = "api_invokers must not be allUsers or allAuthenticatedUsers: the status API is private, it is opened through IAM (terraform/api.tf)."
  }

  validation {
    condition     = length(distinct(var.api_invokers)) == length(var.api_invokers)
    error_message = "api_invokers must not contain duplicates."
  }
}

variable "api_ingress_settings" {
  description = "Network ingress of the status API only. null (default) = var.ingress_settings, like every function. With ALLOW_INTERNAL_ONLY, `gcloud run services proxy` works only from inside the project's VPC network; set ALLOW_ALL to open the API from an admin's workstation: IAM (api_invokers) still refuses everyone else."
  type        = string
  default     = null

  validation {
    condition     = var.api_ingress_settings == null ? true : contains(["ALLOW_INTERNAL_ONLY", "ALLOW_INTERNAL_AND_GCLB", "ALLOW_ALL"], var.api_ingress_settings)
    error_message = "api_ingress_settings must be null, ALLOW_INTERNAL_ONLY, ALLOW_INTERNAL_AND_GCLB or ALLOW_ALL."
  }
}

variable "api_admins" {
  description = "Identities (emails) that may change any webhook callback through the status API, not only the ones they registered (DCM_API_ADMINS, shared/api/callers.py). To reach the api at all they must also be in api_invokers (or a group of it)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for a in var.api_admins : can(regex("^[^\\s,]+@[^\\s,]+$", a))])
    error_message = "api_admins must be emails (no spaces or commas), e.g. alice@example.com."
  }
}

variable "api_iap" {
  description = "The api is behind Identity-Aware Proxy: the caller is the email of IAP's signed X-Goog-IAP-JWT-Assertion, which the api verifies against api_iap_audience (DCM_API_IAP; never the plain X-Goog-Authenticated-User-Email header, which any invoker could set). Leave false unless IAP is in front of it."
  type        = bool
  default     = false
}

variable "api_iap_audience" {
  description = "With api_iap: the audience of IAP's signed header, /projects/PROJECT_NUMBER/global/backendServices/SERVICE_ID (a load balancer's backend service) or /projects/PROJECT_NUMBER/apps/PROJECT_ID (DCM_API_IAP_AUDIENCE, docs/security.md item 14)."
  type        = string
  default     = ""

  validation {
    condition     = var.api_iap_audience == "" || can(regex("^/projects/[0-9]+/", var.api_iap_audience))
    error_message = "api_iap_audience must be IAP's audience, /projects/PROJECT_NUMBER/global/backendServices/SERVICE_ID or /projects/PROJECT_NUMBER/apps/PROJECT_ID."
  }
}

variable "api_token_audiences" {
  description = "Audiences, besides the api's own URL, that a caller's Google ID token may be issued for (DCM_API_AUDIENCE, docs/security.md item 14). The default is gcloud's OAuth client: the audience of the token `gcloud run services proxy` and `gcloud auth print-identity-token` attach for a user account (they cannot ask for another), which Cloud Run's IAM check accepts too. [] accepts only tokens minted for the api's URL (a service account's, or `gcloud auth print-identity-token --impersonate-service-account=SA --audiences=API_URL`)."
  type        = list(string)
  default     = ["32555940559.apps.googleusercontent.com"]

  validation {
    condition     = alltrue([for a in var.api_token_audiences : can(regex("^[^\\s,]+$", a))])
    error_message = "api_token_audiences: each an audience without spaces or commas (a URL or an OAuth client id)."
  }
}

variable "max_callbacks_per_caller" {
  description = "Webhook callbacks one caller may have registered at once (DCM_MAX_CALLBACKS_PER_CALLER); one more is refused with a 409."
  type        = number
  default     = 100

  validation {
    condition     = var.max_callbacks_per_caller >= 1
    error_message = "max_callbacks_per_caller must be 1 or more."
  }
}

variable "callback_view_ttl_seconds" {
  description = "How long upsert keeps its read of the callbacks' summary (DCM_CALLBACK_VIEW_TTL): a change committed less than this after a callback's registration may not be sent to it (docs/callbacks.md, \"Registration lag\"). 0 reads it at every change."
  type        = number
  default     = 10

  validation {
    condition     = var.callback_view_ttl_seconds >= 0 && var.callback_view_ttl_seconds <= 3600
    error_message = "callback_view_ttl_seconds must be from 0 to 3600."
  }
}

variable "max_callbacks" {
  description = "Webhook callbacks registered at once, all callers together (DCM_MAX_CALLBACKS): every change is delivered to each matching one."
  type        = number
  default     = 10000

  validation {
    condition     = var.max_callbacks >= 1
    error_message = "max_callbacks must be 1 or more."
  }
}

variable "min_rotation_grace_seconds" {
  description = "Least time a rotated webhook signing secret keeps signing beside the new one (DCM_MIN_ROTATION_GRACE_SECONDS)."
  type        = number
  default     = 60

  validation {
    condition     = var.min_rotation_grace_seconds >= 0
    error_message = "min_rotation_grace_seconds must be 0 or more."
  }
}

variable "max_streams" {
  description = "Live change streams (GET /v1/changes/stream) one api instance keeps open at once (DCM_MAX_STREAMS); more are answered 429."
  type        = number
  default     = 100

  validation {
    condition     = var.max_streams >= 1
    error_message = "max_streams must be 1 or more."
  }
}

variable "max_streams_per_caller" {
  description = "Live change streams one caller may keep open on one api instance (DCM_MAX_STREAMS_PER_CALLER)."
  type        = number
  default     = 10

  validation {
    condition     = var.max_streams_per_caller >= 1
    error_message = "max_streams_per_caller must be 1 or more."
  }
}

variable "rate_cards" {
  description = "Rate cards GET /v1/usage may price with, by name (?rates=NAME; DCM_RATE_CARDS, docs/billing.md \"Usage over the API\"): each {currency, resourceTypes = {TYPE = price per hour}, providers = {PROVIDER = {TYPE = price}}, default}, as examples/rates.yaml. A request names a card, never a file. Default {}: usage without cost."
  type        = any
  default     = {}

  validation {
    condition     = alltrue([for name in keys(var.rate_cards) : can(regex("^[a-z0-9][a-z0-9_-]{0,39}$", name))])
    error_message = "rate_cards: a card's name is lower-case letters, digits, - and _ (at most 40)."
  }
}

variable "output_redact" {
  description = "Values of the output_spec and outputs maps of status events that the api, change events and webhook receivers see as \"[redacted]\": credential names, each matched as words of a key at any depth (\"password\" hides db_password and adminPassword), and JSON pointers such as /output_spec/db (DCM_OUTPUT_REDACT, docs/security.md items 13 and 17). Default []: the platform's list of credential names (password, secret, token, private_key, kubeconfig, ...); [\"none\"]: nothing hidden."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for e in var.output_redact : !startswith(e, "/") || can(regex("^/(output_spec|outputs)/.+", e))])
    error_message = "output_redact: a JSON pointer names a key inside /output_spec or /outputs (e.g. /output_spec/db/password)."
  }
}

variable "hook_ports" {
  description = "Ports a webhook may be called on besides 443 (DCM_HOOK_PORTS, docs/callbacks.md). Default: none."
  type        = list(number)
  default     = []

  validation {
    condition     = alltrue([for port in var.hook_ports : port >= 1 && port <= 65535 && floor(port) == port])
    error_message = "hook_ports must be TCP ports (1-65535)."
  }
}

variable "source_bucket_name" {
  description = "Bucket holding the function deploy zips. Default: <project_id>-<name_prefix>-sources."
  type        = string
  default     = null
}

variable "build_service_account" {
  description = "Email of an existing service account Cloud Build uses to build the functions. Default: a dedicated one is created with only the roles a function build needs."
  type        = string
  default     = null
}

# ---- webhook signing keys (secrets.tf) -------------------------------------

variable "callback_keys_secret_id" {
  description = "Secret Manager secret holding the keyring that encrypts the webhook signing secrets stored in Firestore (DCM_CALLBACK_KEYS_SECRET of notify and the api, the only identities that may read it)."
  type        = string
  default     = "dcm-callback-keys"

  validation {
    condition     = can(regex("^[a-zA-Z0-9_-]{1,255}$", var.callback_keys_secret_id))
    error_message = "callback_keys_secret_id must be 1-255 letters, digits, hyphens or underscores (a Secret Manager secret id)."
  }
}

variable "create_callback_keys_version" {
  description = "Create the first keyring version (one random 32-byte key) with Terraform: it is then also in the Terraform state. false: add the first version yourself (docs/deploy.md, \"Webhook signing keys\") before the functions start."
  type        = bool
  default     = true
}

# ---- Firestore -----------------------------------------------------------

variable "create_firestore_database" {
  description = "Create the Firestore (default) database. Set to false when the project already has one (it must be in Native mode)."
  type        = bool
  default     = true
}

variable "firestore_location" {
  description = "Location of the Firestore database: a region (europe-west1) or a multi-region (eur3, nam5). Default: var.region. Cannot be changed once created."
  type        = string
  default     = null
}

variable "firestore_point_in_time_recovery" {
  description = "Keep 7 days of document versions for point-in-time recovery (billed as storage)."
  type        = bool
  default     = true
}

variable "firestore_backup_retention_days" {
  description = "Days each daily Firestore backup is kept (google_firestore_backup_schedule; Firestore allows up to 14 weeks)."
  type        = number
  default     = 14

  validation {
    condition     = var.firestore_backup_retention_days >= 1 && var.firestore_backup_retention_days <= 98 && floor(var.firestore_backup_retention_days) == var.firestore_backup_retention_days
    error_message = "firestore_backup_retention_days must be a whole number of days from 1 to 98 (14 weeks)."
  }
}

variable "firestore_delete_protection" {
  description = "Refuse to delete the Firestore database (also through `terraform destroy`)."
  type        = bool
  default     = true
}

# ---- the NATS ingress (terraform/nats_ingress.tf, docs/nats.md) -------------

variable "nats_url" {
  description = "NATS server(s) of the DCM installation the NATS ingress reads (NATS_URL), comma-separated, e.g. \"tls://nats-1.example.com:4222,tls://nats-2.example.com:4222\": the ingress splits them into nats-py's list of servers (shared/runtime/settings.py). null (default): no NATS ingress is deployed. Never put credentials in it: they come from the secret nats_credentials_secret_id."
  type        = string
  default     = null

  validation {
    condition     = var.nats_url == null ? true : alltrue([for u in split(",", var.nats_url) : can(regex("^(nats|tls|ws|wss)://[^\\s,@]+$", trimspace(u)))])
    error_message = "nats_url must be nats://, tls://, ws:// or wss:// URLs separated by commas, without credentials (user:password@ is refused: they are read from Secret Manager)."
  }
}

variable "nats_ingress_image" {
  description = "Container image of the NATS ingress (functions/nats_ingress/Dockerfile), best by digest: REGION-docker.pkg.dev/PROJECT/REPOSITORY/nats-ingress@sha256:... (output nats_image_repository says where to push; cloudbuild.yaml passes it when _NATS_INGRESS=1). Required when nats_url is set."
  type        = string
  default     = null

  validation {
    condition     = var.nats_ingress_image == null ? true : can(regex("^[a-z0-9.-]+(:[0-9]+)?/[a-z0-9._/-]+(@sha256:[0-9a-f]{64}|:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})$", var.nats_ingress_image))
    error_message = "nats_ingress_image must be an image reference with a digest (@sha256:...) or a tag, e.g. europe-west1-docker.pkg.dev/my-project/dcm-status-images/nats-ingress@sha256:<64 hex>."
  }
}

variable "nats_credentials_kind" {
  description = "What the secret nats_credentials_secret_id holds: \"password\" (the password of nats_user, given to the ingress as NATS_PASSWORD) or \"creds\" (a NATS creds file, JWT and nkey seed, mounted read-only and named by NATS_CREDS)."
  type        = string
  default     = "password"

  validation {
    condition     = contains(["password", "creds"], var.nats_credentials_kind)
    error_message = "nats_credentials_kind must be \"password\" or \"creds\"."
  }
}

variable "nats_user" {
  description = "NATS user the ingress connects as (NATS_USER), a user of the platform account (docs/nats.md); its password is the secret nats_credentials_secret_id. Required with nats_credentials_kind = \"password\"."
  type        = string
  default     = null

  validation {
    condition     = var.nats_user == null ? true : can(regex("^[A-Za-z0-9_.-]{1,128}$", var.nats_user))
    error_message = "nats_user must be 1-128 letters, digits, dots, hyphens or underscores."
  }
}

variable "nats_credentials_secret_id" {
  description = "Secret Manager secret holding the ingress's NATS password or creds file (nats_credentials_kind). Terraform creates the secret, never a version: add it yourself (docs/nats.md), so the credential never enters the Terraform state. Only the ingress's service account may read it."
  type        = string
  default     = "dcm-nats-ingress-credentials"

  validation {
    condition     = can(regex("^[a-zA-Z0-9_-]{1,255}$", var.nats_credentials_secret_id))
    error_message = "nats_credentials_secret_id must be 1-255 letters, digits, hyphens or underscores (a Secret Manager secret id)."
  }
}

variable "nats_ingress_sizing" {
  description = "The NATS ingress service: vCPU and memory of an instance and its instance count. At least one instance always runs (it holds the JetStream pull consumer; CPU is always allocated). More than one share the durable consumer, but two instances forward one resource's events in parallel: keep one unless one cannot keep up (docs/nats.md)."
  type = object({
    cpu                = optional(string, "1")
    memory             = optional(string, "512Mi")
    min_instance_count = optional(number, 1)
    max_instance_count = optional(number, 1)
  })
  default = {}

  validation {
    condition     = var.nats_ingress_sizing.min_instance_count >= 1 && var.nats_ingress_sizing.max_instance_count >= var.nats_ingress_sizing.min_instance_count
    error_message = "nats_ingress_sizing: need 1 <= min_instance_count <= max_instance_count (the ingress never scales to zero: it pulls, nothing pushes to it)."
  }
}

variable "bigquery_location" {
  description = "Location of the BigQuery dataset of the exports (infra/topology.yaml exports:); null: the region."
  type        = string
  default     = null
}

variable "export_partition_expiration_days" {
  description = "Days each daily partition of an export table is kept; null: kept until deleted."
  type        = number
  default     = null

  validation {
    condition     = var.export_partition_expiration_days == null || try(var.export_partition_expiration_days >= 1, false)
    error_message = "export_partition_expiration_days must be at least 1, or null."
  }
}

variable "notification_channels" {
  description = "Cloud Monitoring notification channels (projects/P/notificationChannels/ID) every alert policy notifies (monitoring.tf); empty: alerts open incidents without notifying anyone."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.notification_channels : can(regex("^projects/[^/]+/notificationChannels/[^/]+$", c))])
    error_message = "Each notification channel must be a name like projects/PROJECT/notificationChannels/ID."
  }
}

variable "runbook_url" {
  description = "Where operators read docs/operations.md (e.g. its URL in your repository host); each alert links an anchor of it."
  type        = string
  default     = "docs/operations.md"
}

variable "lanes_project" {
  description = "Project of the providers' lanes (the normalized topics and upsert's push subscriptions to them); null: project_id. Pub/Sub holds 10,000 topics and 10,000 subscriptions per project and each provider has two of each, so beyond about 3,500 providers the lanes need a project of their own (docs/scale.md). The project must exist; Terraform enables Pub/Sub there and grants its Pub/Sub service agent what the main one has (push tokens, dead-lettering)."
  type        = string
  default     = null

  validation {
    condition     = var.lanes_project == null || can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", coalesce(var.lanes_project, "-")))
    error_message = "lanes_project must be a Google Cloud project id (6-30 characters, lowercase letters, digits, hyphens) or null."
  }
}

variable "quota_preferences" {
  description = "Quotas this deployment asks Google Cloud for (google_cloud_quotas_quota_preference; granted after Google's review), null: the project's default. run_cpu: vCPU of Cloud Run in the region; pubsub_publisher_kb_per_minute: Pub/Sub publisher throughput in the region (charged to the publisher's credentials' project: this one). benchmarks/capacity.py prints what a fleet needs; contact_email is required by Google for an increase."
  type = object({
    run_cpu                        = optional(number)
    pubsub_publisher_kb_per_minute = optional(number)
    contact_email                  = optional(string)
  })
  default = {}

  validation {
    condition     = alltrue([for v in [var.quota_preferences.run_cpu, var.quota_preferences.pubsub_publisher_kb_per_minute] : v == null || try(v >= 1, false)]) && (var.quota_preferences.run_cpu == null && var.quota_preferences.pubsub_publisher_kb_per_minute == null || var.quota_preferences.contact_email != null)
    error_message = "quota_preferences: each value >= 1 (or null), and contact_email set when one is (Google requires it for an increase)."
  }
}
