# ---------------------------------------------------------------- project --

variable "project_id" {
  type        = string
  description = "Google Cloud project to deploy into."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a project id (6-30 lowercase letters, digits or hyphens, starting with a letter)."
  }
}

variable "region" {
  type        = string
  description = "Region of the functions, the bridge, the queue, the scheduler job and the source bucket."

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]+$", var.region))
    error_message = "region must be a Cloud region such as europe-west1 or us-central1."
  }
}

variable "name_prefix" {
  type        = string
  description = "Prefix of service accounts, functions, the bridge service, the image repository and monitoring names."
  default     = "jsdlq"

  validation {
    # Every name is derived from the prefix and checked here alone: 16
    # characters keep "<prefix>-scheduler" within the 30-character account
    # id limit, and with it the functions, the bridge, "<prefix>-console-api"
    # (and the project number in its run.app URL's first label), the job and
    # the default source bucket within theirs.
    condition     = can(regex("^[a-z][a-z0-9-]{1,14}[a-z0-9]$", var.name_prefix))
    error_message = "name_prefix must be 3-16 lowercase letters, digits or hyphens, starting with a letter."
  }
}

variable "labels" {
  type        = map(string)
  description = "Labels added to every resource that takes labels (app = jsdlq is always set)."
  default     = {}
}

# ------------------------------------------------------------------- NATS --

variable "nats_url" {
  type        = string
  description = "NATS server URL(s) the bridge, replay and reconcile connect to (comma-separated for a cluster)."

  validation {
    condition     = alltrue([for u in split(",", var.nats_url) : can(regex("^(nats|tls|ws|wss)://[^\\s/]+", trimspace(u)))])
    error_message = "nats_url must be one or more comma-separated nats://, tls://, ws:// or wss:// URLs."
  }
}

variable "nats_creds_enabled" {
  type        = bool
  description = "Whether NATS needs a credentials file. When true the file is read from the Secret Manager secret nats_creds_secret_id and mounted into the bridge, classify, replay and reconcile (NATS_CREDS)."
  default     = true
}

variable "nats_creds_secret_id" {
  type        = string
  description = "Secret Manager secret id that holds the NATS credentials file."
  default     = "jsdlq-nats-creds"

  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,255}$", var.nats_creds_secret_id))
    error_message = "nats_creds_secret_id may hold letters, digits, '-' and '_' (at most 255)."
  }
}

variable "nats_creds" {
  type        = string
  description = "Contents of the NATS .creds file, written as a secret version by Terraform when nats_creds_version > 0. Ephemeral: it is never stored in the plan or state. Leave null to add versions out of band (gcloud secrets versions add)."
  default     = null
  sensitive   = true
  ephemeral   = true

  validation {
    condition     = var.nats_creds == null || strcontains(coalesce(var.nats_creds, "-"), "-----BEGIN NATS USER JWT-----")
    error_message = "nats_creds must be the contents of a NATS user credentials (.creds) file."
  }
}

variable "nats_creds_version" {
  type        = number
  description = "0: the secret's versions are managed out of band. N > 0: Terraform writes nats_creds as a version; increase N to rotate."
  default     = 0

  validation {
    condition     = var.nats_creds_version >= 0 && floor(var.nats_creds_version) == var.nats_creds_version
    error_message = "nats_creds_version must be a whole number, 0 or more."
  }
}

variable "nats_creds_secret_version" {
  type        = string
  description = "Secret version mounted into the services (\"latest\", or a version number to pin)."
  default     = "latest"

  validation {
    condition     = var.nats_creds_secret_version == "latest" || can(regex("^[1-9][0-9]*$", var.nats_creds_secret_version))
    error_message = "nats_creds_secret_version must be \"latest\" or a version number."
  }
}

variable "advisory_stream" {
  type        = string
  description = "JetStream stream capturing max-deliveries and terminated advisories (ADVISORY_STREAM)."
  default     = "DLQ_ADVISORIES"
}

variable "record_stream" {
  type        = string
  description = "JetStream stream capturing explicit DLQ records from agentkit (RECORD_STREAM)."
  default     = "DLQ_RECORDS"
}

variable "advisory_stream_limits" {
  type = object({
    max_msgs  = number
    max_bytes = number
    max_age   = optional(string, "")
  })
  description = "Limits the bridge gives the advisory stream it creates (ADVISORY_STREAM_MAX_MSGS, _MAX_BYTES, _MAX_AGE; 0 = no limit of that kind). When full the stream refuses new advisories (discard new); reconcile alerts at capture_fill_alert_percent. An existing stream keeps its limits: resize it with nats stream edit. An age limit deletes advisories the bridge has not forwarded yet, so the default has none."
  default     = { max_msgs = 100000, max_bytes = 268435456 }

  validation {
    condition = (var.advisory_stream_limits.max_msgs >= 0 && var.advisory_stream_limits.max_bytes >= 0 &&
      var.advisory_stream_limits.max_msgs + var.advisory_stream_limits.max_bytes > 0 &&
    (var.advisory_stream_limits.max_age == "" || can(regex("^[0-9]+(h|m|s)$", var.advisory_stream_limits.max_age))))
    error_message = "advisory_stream_limits: max_msgs and max_bytes must not be negative and not both 0 (an unbounded stream); max_age is empty or a duration like 168h."
  }
}

variable "record_stream_limits" {
  type = object({
    max_msgs  = number
    max_bytes = number
    max_age   = optional(string, "")
  })
  description = "Limits the bridge gives the record stream it creates (RECORD_STREAM_MAX_MSGS, _MAX_BYTES, _MAX_AGE; 0 = no limit of that kind). Records carry payloads. When full the stream refuses agentkit's copy, which NAKs the task and keeps it; reconcile alerts at capture_fill_alert_percent. An existing stream keeps its limits: resize it with nats stream edit."
  default     = { max_msgs = 10000, max_bytes = 1073741824 }

  validation {
    condition = (var.record_stream_limits.max_msgs >= 0 && var.record_stream_limits.max_bytes >= 0 &&
      var.record_stream_limits.max_msgs + var.record_stream_limits.max_bytes > 0 &&
    (var.record_stream_limits.max_age == "" || can(regex("^[0-9]+(h|m|s)$", var.record_stream_limits.max_age))))
    error_message = "record_stream_limits: max_msgs and max_bytes must not be negative and not both 0 (an unbounded stream); max_age is empty or a duration like 168h."
  }
}

variable "capture_fill_alert_percent" {
  type        = number
  description = "Fill of a capture stream (of its message or byte limit) at which reconcile raises capture_stream_filling (RECONCILE_CAPTURE_FILL_ALERT_PERCENT)."
  default     = 80

  validation {
    condition     = var.capture_fill_alert_percent >= 1 && var.capture_fill_alert_percent <= 100 && floor(var.capture_fill_alert_percent) == var.capture_fill_alert_percent
    error_message = "capture_fill_alert_percent must be a whole number from 1 to 100."
  }
}

variable "work_streams" {
  type        = list(string)
  description = "JetStream work streams whose sequences and consumer ack floors reconcile samples (WORK_STREAMS)."
  default     = ["TASKS"]

  validation {
    condition     = length(var.work_streams) > 0 && alltrue([for s in var.work_streams : can(regex("^[A-Za-z0-9_-]+$", s))])
    error_message = "work_streams must name at least one stream; stream names hold letters, digits, '-' and '_'."
  }
}

variable "failure_bucket" {
  type        = string
  description = "JetStream KV bucket of per-attempt failures (FAILURE_BUCKET)."
  default     = "dlq_failures"
}

variable "bridge_consumer" {
  type        = string
  description = "Durable consumer name the bridge reads the advisory and record streams with (BRIDGE_CONSUMER)."
  default     = "dlq-bridge"
}

# ----------------------------------------------------------------- bridge --

variable "bridge_image" {
  type        = string
  description = "Container image of the bridge (cmd/bridge). Null skips the bridge: useful on the very first apply, before the image repository exists to push to."
  default     = null

  validation {
    condition     = var.bridge_image == null || can(regex("^[^\\s]+$", coalesce(var.bridge_image, "-")))
    error_message = "bridge_image must be an image reference without spaces."
  }
}

variable "bridge_min_instances" {
  type        = number
  description = "Bridge instances always running (at least 1: advisories are only consumed while an instance runs)."
  default     = 1

  validation {
    condition     = var.bridge_min_instances >= 1 && var.bridge_min_instances <= 10
    error_message = "bridge_min_instances must be between 1 and 10."
  }
}

variable "bridge_max_instances" {
  type        = number
  description = "Upper bound on bridge instances."
  default     = 2

  validation {
    condition     = var.bridge_max_instances >= 1 && var.bridge_max_instances <= 100
    error_message = "bridge_max_instances must be between 1 and 100."
  }
}

variable "bridge_cpu" {
  type        = string
  description = "CPU limit of a bridge instance (always allocated)."
  default     = "1"

  validation {
    condition     = contains(["1", "2", "4", "6", "8"], var.bridge_cpu)
    error_message = "bridge_cpu must be 1, 2, 4, 6 or 8 (always-allocated CPU needs at least one vCPU)."
  }
}

variable "bridge_memory" {
  type        = string
  description = "Memory limit of a bridge instance, e.g. 512Mi."
  default     = "512Mi"

  validation {
    condition     = can(regex("^[0-9]+(Mi|Gi)$", var.bridge_memory))
    error_message = "bridge_memory must look like 512Mi or 1Gi."
  }
}

# ---------------------------------------------------------------- console --

variable "console_image" {
  type        = string
  description = "Container image of the console (cmd/console). Null skips the console (its two services and its service account), like bridge_image."
  default     = null

  validation {
    condition     = var.console_image == null || can(regex("^[^\\s]+$", coalesce(var.console_image, "-")))
    error_message = "console_image must be an image reference without spaces."
  }
}

# The console's roles (docs/console.md, "Operator roles"). Every principal of
# the three may pass IAP to the operator UI; the console gives each identity
# the highest role whose principals match it (a user or service account by
# email, a domain by the account's Workspace domain, a group by membership,
# nested groups included, through the Cloud Identity Groups API). Members of
# the project's organization only: IAP on Cloud Run admits no other.

variable "console_viewers" {
  type        = set(string)
  description = "Console viewers: read every page, act on nothing. user:, group:, domain: or serviceAccount: principals."
  default     = []

  validation {
    condition     = alltrue([for m in var.console_viewers : can(regex(local.principal_pattern, m))])
    error_message = "console_viewers must be user:EMAIL, group:EMAIL, serviceAccount:EMAIL or domain:DOMAIN principals (allUsers and allAuthenticatedUsers are refused)."
  }
}

variable "console_operators" {
  type        = set(string)
  description = "Console operators: replay now, discard, override tenant breakers, run bulk redrives; approve the entries of rules that grant operator (not governance, poison or unknown commit state by default). user:, group:, domain: or serviceAccount: principals."
  default     = []

  validation {
    condition     = alltrue([for m in var.console_operators : can(regex(local.principal_pattern, m))])
    error_message = "console_operators must be user:EMAIL, group:EMAIL, serviceAccount:EMAIL or domain:DOMAIN principals (allUsers and allAuthenticatedUsers are refused)."
  }
}

variable "console_triage_agents" {
  type        = set(string)
  description = "Emails of the triage agents' identities (service accounts) that answer triage tasks through the tenant API's triage endpoint (POST /api/v1/triage/answers, with a Google ID token for the API's URL; docs/console.md). Agents that run next to the store answer in-process instead. Empty: the endpoint is not served. Needs console_tenant_api_enabled."
  default     = []

  validation {
    condition     = alltrue([for e in var.console_triage_agents : can(regex("^[^\\s,\"\\\\@:]+@[^\\s,\"\\\\@]+\\.[^\\s,\"\\\\@]+$", e))])
    error_message = "console_triage_agents must be bare emails (ceo-agent@PROJECT.iam.gserviceaccount.com), not principals."
  }
}

variable "console_approvers" {
  type        = set(string)
  description = "Console approvers: everything operators do, and approve the entries of every rule, among them those the policy keeps for approvers. user:, group:, domain: or serviceAccount: principals."
  default     = []

  validation {
    condition     = alltrue([for m in var.console_approvers : can(regex(local.principal_pattern, m))])
    error_message = "console_approvers must be user:EMAIL, group:EMAIL, serviceAccount:EMAIL or domain:DOMAIN principals (allUsers and allAuthenticatedUsers are refused)."
  }

  validation {
    condition     = var.console_image == null || length(var.console_viewers) + length(var.console_operators) + length(var.console_approvers) > 0
    error_message = "With console_image set, console_viewers, console_operators or console_approvers must name someone: the console gives nobody else a role (console_operator_members, which gave everyone admitted every power, is replaced by these three)."
  }
}

variable "console_tenant_api_enabled" {
  type        = bool
  description = "Whether to deploy the tenant recovery API service (<prefix>-console-api), reached by tenants with their keys (dlqctl tenant-key create)."
  default     = true
}

variable "console_max_instances" {
  type        = number
  description = "Upper bound on instances of each console service (they scale to zero)."
  default     = 3

  validation {
    condition     = var.console_max_instances >= 1 && var.console_max_instances <= 100
    error_message = "console_max_instances must be between 1 and 100."
  }
}

# -------------------------------------------------------------- functions --

variable "function_runtime" {
  type        = string
  description = "Cloud Run functions Go runtime id; go126 matches go.mod (go 1.26)."
  default     = "go126"

  validation {
    condition     = can(regex("^go1[0-9]{2}$", var.function_runtime))
    error_message = "function_runtime must be a Go runtime id such as go126."
  }
}

variable "function_source_excludes" {
  type        = list(string)
  description = "Glob patterns left out of the function source bundle. The deploy root (package jsdlq) must not import anything excluded; tf-validate checks that with go list."
  default = [
    ".git", ".git/**",
    ".local/**", "bin/**",
    "terraform/**", "emulator/**", "tools/**", "examples/**", "internal/**", "docs/**", "cmd/**", "clients/**",
    "**/testdata/**", "**/*_test.go",
    "*.zip", "*.out", "*.test",
  ]
}

variable "function_settings" {
  type = map(object({
    memory          = optional(string)
    timeout_seconds = optional(number)
    min_instances   = optional(number)
    max_instances   = optional(number)
    concurrency     = optional(number)
  }))
  description = "Per-function sizing, keyed classify, replay, reconcile; missing keys and fields take the defaults (256Mi, 60 s, 0-10 instances, concurrency 1). The deliver function's follow webhooks."
  default = {
    reconcile = { memory = "512Mi", timeout_seconds = 540, max_instances = 2 }
  }

  validation {
    condition     = alltrue([for k in keys(var.function_settings) : contains(["classify", "replay", "reconcile"], k)])
    error_message = "function_settings keys must be classify, replay or reconcile."
  }
  validation {
    # A field left null takes the function module's default.
    condition = alltrue(flatten([for v in values(var.function_settings) : [
      v.timeout_seconds == null ? true : v.timeout_seconds >= 1 && v.timeout_seconds <= 3600 && floor(v.timeout_seconds) == v.timeout_seconds,
      v.min_instances == null ? true : v.min_instances >= 0,
      v.max_instances == null ? true : v.max_instances >= 1,
      v.concurrency == null ? true : v.concurrency >= 1 && v.concurrency <= 1000,
    ]]))
    error_message = "function_settings: timeout 1-3600 whole seconds, min_instances >= 0, max_instances >= 1, concurrency 1-1000."
  }
}

variable "function_env" {
  type        = map(map(string))
  description = "Extra environment variables per function (classify, replay, reconcile, deliver), merged over the generated ones."
  default     = {}

  validation {
    condition     = alltrue([for k in keys(var.function_env) : contains(["classify", "replay", "reconcile", "deliver"], k)])
    error_message = "function_env keys must be classify, replay, reconcile or deliver."
  }
}

variable "legacy_completions_until" {
  type        = string
  description = "End of the migration window (RFC 3339, e.g. 2026-12-04T00:00:00Z) in which replay, reconcile and the console still honour the completion records agentkits from before tenant scoping wrote (task-idempotency/{key}, no tenant field). Set it to 72 hours after the last agent running such a kit stopped (docs/runbook.md, \"Completion records before tenant scoping\"); null (the default) leaves the window open."
  default     = null

  validation {
    condition     = var.legacy_completions_until == null || can(formatdate("YYYY", var.legacy_completions_until))
    error_message = "legacy_completions_until must be an RFC 3339 time such as 2026-12-04T00:00:00Z, or null."
  }
}

variable "function_ingress" {
  type        = string
  description = "Ingress of the four functions. Callers are Pub/Sub push, Cloud Tasks (replay, deliver) and Cloud Scheduler; every call needs an OIDC token of an account holding run.invoker."
  default     = "ALLOW_ALL"

  validation {
    condition     = contains(["ALLOW_ALL", "ALLOW_INTERNAL_ONLY", "ALLOW_INTERNAL_AND_GCLB"], var.function_ingress)
    error_message = "function_ingress must be ALLOW_ALL, ALLOW_INTERNAL_ONLY or ALLOW_INTERNAL_AND_GCLB."
  }
}

variable "source_bucket_name" {
  type        = string
  description = "Bucket for function source bundles; null means <project_id>-<name_prefix>-sources."
  default     = null

  validation {
    condition     = var.source_bucket_name == null || can(regex("^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$", var.source_bucket_name))
    error_message = "source_bucket_name must be 3-63 characters of lowercase letters, digits, '.', '_' or '-', starting and ending with a letter or digit."
  }
}

variable "source_bucket_force_destroy" {
  type        = bool
  description = "Whether `terraform destroy` removes the source bucket together with old bundles."
  default     = true
}

# ---------------------------------------------------------------- Pub/Sub --

variable "events_topic" {
  type        = string
  description = "Topic the bridge publishes to (DLQ_TOPIC)."
  default     = "dlq-events"

  validation {
    condition     = can(regex("^[A-Za-z][A-Za-z0-9._~%+-]{2,254}$", var.events_topic)) && !startswith(var.events_topic, "goog")
    error_message = "events_topic must be a valid Pub/Sub topic name."
  }
}

variable "classify_push_min_backoff_seconds" {
  type        = number
  description = "Shortest retry delay of a failed push to classify (10-600 s)."
  default     = 10

  validation {
    condition     = var.classify_push_min_backoff_seconds >= 10 && var.classify_push_min_backoff_seconds <= 600
    error_message = "classify_push_min_backoff_seconds must be between 10 and 600."
  }
}

variable "classify_push_max_backoff_seconds" {
  type        = number
  description = "Longest retry delay of a failed push to classify (10-600 s)."
  default     = 600

  validation {
    condition     = var.classify_push_max_backoff_seconds >= 10 && var.classify_push_max_backoff_seconds <= 600 && var.classify_push_min_backoff_seconds <= var.classify_push_max_backoff_seconds
    error_message = "classify_push_max_backoff_seconds must be between 10 and 600 and at least classify_push_min_backoff_seconds."
  }
}

variable "classify_max_delivery_attempts" {
  type        = number
  description = "Deliveries of one event to classify before it goes to the dead-letter topic (5-100)."
  default     = 10

  validation {
    condition     = var.classify_max_delivery_attempts >= 5 && var.classify_max_delivery_attempts <= 100
    error_message = "classify_max_delivery_attempts must be between 5 and 100."
  }
}

variable "classify_ack_deadline_seconds" {
  type        = number
  description = "Seconds Pub/Sub waits for classify's answer before retrying (10-600)."
  default     = 60

  validation {
    condition     = var.classify_ack_deadline_seconds >= 10 && var.classify_ack_deadline_seconds <= 600
    error_message = "classify_ack_deadline_seconds must be between 10 and 600."
  }
}

variable "event_retention" {
  type        = string
  description = "Retention of the topics and of the dead-letter subscription (600s to 2678400s = 31 days)."
  default     = "2678400s"

  validation {
    condition     = can(regex("^[0-9]+s$", var.event_retention)) && try(tonumber(trimsuffix(var.event_retention, "s")) >= 600 && tonumber(trimsuffix(var.event_retention, "s")) <= 2678400, false)
    error_message = "event_retention must be a duration in seconds such as \"2678400s\", between 600s and 2678400s."
  }
}

# ------------------------------------------------------------ Cloud Tasks --

variable "replay_queue" {
  type = object({
    name                      = optional(string, "dlq-replay")
    max_dispatches_per_second = optional(number, 10)
    max_concurrent_dispatches = optional(number, 20)
    max_attempts              = optional(number, 10)
    min_backoff               = optional(string, "10s")
    max_backoff               = optional(string, "600s")
    max_doublings             = optional(number, 5)
    max_retry_duration        = optional(string, "86400s")
  })
  description = "Cloud Tasks replay queue: name, rate limits and retry config (each field optional; the tasks module validates them)."
  default     = {}
}

# --------------------------------------------------------- tenant webhooks --

variable "webhooks" {
  type = object({
    disable_after = optional(number, 10)
    timeout       = optional(string, "10s")
    max_instances = optional(number, 10)
    # The deliveries' queue: its retry config is their backoff.
    queue = optional(object({
      name                      = optional(string, "dlq-webhooks")
      max_dispatches_per_second = optional(number, 20)
      max_concurrent_dispatches = optional(number, 50)
      max_attempts              = optional(number, 12)
      min_backoff               = optional(string, "10s")
      max_backoff               = optional(string, "3600s")
      max_doublings             = optional(number, 8)
      max_retry_duration        = optional(string, "172800s")
    }), {})
  })
  description = "Tenant webhook deliveries: the queue (name, rate, retry/backoff, as replay_queue), the run of consecutive failed deliveries that disables an endpoint (disable_after), one delivery's timeout and the deliver function's instances (each field optional)."
  default     = {}

  validation {
    condition     = var.webhooks.disable_after >= 1 && var.webhooks.disable_after <= 1000 && floor(var.webhooks.disable_after) == var.webhooks.disable_after
    error_message = "webhooks.disable_after must be a whole number from 1 to 1000."
  }
  validation {
    condition     = can(regex("^[0-9]+s$", var.webhooks.timeout)) && try(tonumber(trimsuffix(var.webhooks.timeout, "s")) >= 1 && tonumber(trimsuffix(var.webhooks.timeout, "s")) <= 300, false)
    error_message = "webhooks.timeout must be whole seconds from \"1s\" to \"300s\"."
  }
  validation {
    # The notification a delivery sends stays in the outbox 7 days after
    # it is published; a delivery retried longer would find it gone.
    condition     = can(regex("^[0-9]+s$", var.webhooks.queue.max_retry_duration)) && try(tonumber(trimsuffix(var.webhooks.queue.max_retry_duration, "s")) > 0 && tonumber(trimsuffix(var.webhooks.queue.max_retry_duration, "s")) <= 604800, false)
    error_message = "webhooks.queue.max_retry_duration must be whole seconds, more than \"0s\" and at most \"604800s\" (7 days, how long a published notification is kept)."
  }
  validation {
    condition     = var.webhooks.max_instances >= 1 && var.webhooks.max_instances <= 100
    error_message = "webhooks.max_instances must be between 1 and 100."
  }
}

# -------------------------------------------------------------- scheduler --

variable "reconcile_schedule" {
  type        = string
  description = "Cron schedule of the reconcile audit."
  default     = "*/15 * * * *"

  validation {
    condition     = length(split(" ", trimspace(var.reconcile_schedule))) == 5
    error_message = "reconcile_schedule must be a five-field unix-cron expression."
  }
}

variable "reconcile_time_zone" {
  type        = string
  description = "Time zone of reconcile_schedule."
  default     = "Etc/UTC"
}

# -------------------------------------------------------------- Firestore --

variable "firestore_location" {
  type        = string
  description = "Firestore location (region or multi-region such as eur3, nam5); null uses var.region. Fixed once created."
  default     = null
}

variable "firestore_delete_on_destroy" {
  type        = bool
  description = "Whether `terraform destroy` deletes the Firestore database and its data (true), or leaves it in place (false)."
  default     = true
}

variable "firestore_delete_protection" {
  type        = bool
  description = "Enable Firestore delete protection (then destroy fails until it is turned off)."
  default     = false
}

# ------------------------------------------------------------- encryption --

variable "kms_key_name" {
  type        = string
  description = "Customer-managed encryption key (CMEK) for jsdlq's data at rest: the Firestore database (its cmek_config, set at creation only: changing it replaces the database), the Pub/Sub topics (dlq-events, its dead-letter topic, dlq-notifications) and the function source bucket. A Cloud KMS CryptoKey, projects/P/locations/L/keyRings/R/cryptoKeys/K, in var.region; Terraform grants the Firestore, Pub/Sub and Cloud Storage service agents roles/cloudkms.cryptoKeyEncrypterDecrypter on it. null: Google-managed encryption."
  default     = null

  validation {
    condition     = var.kms_key_name == null || can(regex("^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$", var.kms_key_name))
    error_message = "kms_key_name must be a CryptoKey's name, projects/P/locations/L/keyRings/R/cryptoKeys/K (not a key version), or null."
  }

  validation {
    condition     = var.kms_key_name == null ? true : split("/", var.kms_key_name)[3] == var.region
    error_message = "kms_key_name must be a key in var.region: the source bucket and the Firestore database accept only a key of their own location."
  }

  validation {
    condition     = var.kms_key_name == null ? true : var.firestore_location == null || var.firestore_location == var.region
    error_message = "With kms_key_name the Firestore database must be in var.region (firestore_location null or var.region): a multi-region database needs a multi-region key, which the regional bucket cannot use."
  }
}

variable "secrets_kms_key_name" {
  type        = string
  description = "Cloud KMS CryptoKey that wraps the data keys of the webhook signing secrets (SECRETS_KMS_KEY; docs/webhooks.md), projects/P/locations/L/keyRings/R/cryptoKeys/K. null: Terraform creates the key ring <name_prefix>-secrets and its key webhook-secrets in var.region, rotated every secrets_key_rotation_period. Either way deliver may encrypt and decrypt with it and the console encrypt."
  default     = null

  validation {
    condition     = var.secrets_kms_key_name == null || can(regex("^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$", var.secrets_kms_key_name))
    error_message = "secrets_kms_key_name must be a CryptoKey's name, projects/P/locations/L/keyRings/R/cryptoKeys/K (not a key version), or null."
  }
}

variable "secrets_key_rotation_period" {
  type        = string
  description = "How often the key Terraform creates for the webhook secrets gets a new primary version (seconds, as Cloud KMS takes it). Old versions keep decrypting; dlqctl webhook reseal rewraps every secret with the new one. Unused with secrets_kms_key_name."
  default     = "7776000s"

  validation {
    condition     = can(regex("^[0-9]+s$", var.secrets_key_rotation_period)) && try(tonumber(trimsuffix(var.secrets_key_rotation_period, "s")) > 86400, false)
    error_message = "secrets_key_rotation_period must be whole seconds ending in s, more than 86400s (one day), as Cloud KMS requires."
  }
}

# ------------------------------------------------------------- monitoring --

variable "notification_channels" {
  type        = list(string)
  description = "Monitoring notification channel ids every alert notifies."
  default     = []

  validation {
    condition     = alltrue([for c in var.notification_channels : can(regex("^projects/[^/]+/notificationChannels/[^/]+$", c))])
    error_message = "notification_channels entries must look like projects/P/notificationChannels/N."
  }
}

variable "function_error_threshold" {
  type        = number
  description = "ERROR log lines per function within 5 minutes above which the function_errors alert fires."
  default     = 5

  validation {
    condition     = var.function_error_threshold >= 0
    error_message = "function_error_threshold must not be negative."
  }
}

variable "deletion_protection" {
  type        = bool
  description = "Whether Terraform refuses to delete the bridge and console services."
  default     = false
}

variable "notifications_topic" {
  type        = string
  description = "Topic notifications are published to (NOTIFICATIONS_TOPIC)."
  default     = "dlq-notifications"

  validation {
    condition     = can(regex("^[A-Za-z][A-Za-z0-9._~%+-]{2,254}$", var.notifications_topic)) && !startswith(var.notifications_topic, "goog")
    error_message = "notifications_topic must be a valid Pub/Sub topic name."
  }
}

variable "changes_topic" {
  type        = string
  description = "Topic the change feed is published to (CHANGES_TOPIC): one jsdlq.change.v1 row per entry transition."
  default     = "dlq-changes"

  validation {
    condition     = can(regex("^[A-Za-z][A-Za-z0-9._~%+-]{2,254}$", var.changes_topic)) && !startswith(var.changes_topic, "goog")
    error_message = "changes_topic must be a valid Pub/Sub topic name."
  }
}

variable "forensics_dataset" {
  type        = string
  description = "BigQuery dataset of the change feed's warehouse (the documented queries name it jsdlq_forensics)."
  default     = "jsdlq_forensics"

  validation {
    condition     = can(regex("^[A-Za-z_][A-Za-z0-9_]*$", var.forensics_dataset)) && length(var.forensics_dataset) <= 1024
    error_message = "forensics_dataset must be letters, digits and underscores."
  }
}

variable "forensics_location" {
  type        = string
  description = "BigQuery location of the warehouse; null: var.region."
  default     = null
}

variable "forensics_retention_days" {
  type        = number
  description = "Days the warehouse keeps a row (default 400: longer than any entry's retention, so the archive outlives the entries)."
  default     = 400

  validation {
    condition     = var.forensics_retention_days >= 31 && var.forensics_retention_days == floor(var.forensics_retention_days)
    error_message = "forensics_retention_days must be a whole number of days, at least 31."
  }
}

variable "forensics_readers" {
  type        = map(string)
  description = "Who reads the warehouse (user:, group:, serviceAccount:), keyed by a name: roles/bigquery.dataViewer on the dataset."
  default     = {}

  validation {
    condition     = alltrue([for m in values(var.forensics_readers) : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "forensics_readers must name identities, never allUsers or allAuthenticatedUsers."
  }
}
