# jsdlq on Google Cloud (docs/architecture.md): the bridge on Cloud Run publishes
# dead-letter events to Pub/Sub; a push subscription feeds classify, which
# stores entries in Firestore and schedules replays in Cloud Tasks; replay
# republishes to JetStream; Cloud Scheduler runs reconcile.

locals {
  labels = merge({ app = "jsdlq" }, var.labels)

  # A principal of a console role: user:, group: or serviceAccount: and an
  # email, or domain: and a domain name (IAM's spelling; the console reads
  # them the same way, console.ParsePrincipal). allUsers and
  # allAuthenticatedUsers do not match.
  principal_pattern = "^((user|group|serviceAccount):[^\\s,\"\\\\@]+@[^\\s,\"\\\\@]+|domain:[^\\s,\"\\\\@]+\\.[^\\s,\"\\\\@]+)$"

  apis = toset([
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    # The console resolves group: principals of its roles (console_viewers,
    # console_operators, console_approvers) with the Cloud Identity Groups
    # API.
    "bigquery.googleapis.com",
    "cloudidentity.googleapis.com",
    "cloudkms.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "cloudscheduler.googleapis.com",
    "cloudtasks.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    "iap.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
    "storage.googleapis.com",
  ])

  functions = {
    classify  = { entry_point = "Classify", description = "jsdlq classify: categorise dead-letter events, store them in Firestore, schedule replays." }
    replay    = { entry_point = "Replay", description = "jsdlq replay: republish a dead task to JetStream with its failure strategy applied (Cloud Tasks target)." }
    reconcile = { entry_point = "Reconcile", description = "jsdlq reconcile: audit capture, storage, metrics and the replay queue (Cloud Scheduler target)." }
    # Tenant webhooks (webhooks.tf).
    deliver = { entry_point = "Deliver", description = "jsdlq deliver: POST a tenant's notification to its webhook, signed (Cloud Tasks target)." }
  }
  function_names = { for k, _ in local.functions : k => "${var.name_prefix}-${k}" }

  # Cloud Run's deterministic URL, https://SERVICE-PROJECT_NUMBER.REGION.run.app.
  # It is known before the services exist, so replay and reconcile can be
  # told their own audience, and classify, the replay tasks, the scheduler
  # and the push subscription all use the exact string the functions check.
  run_url       = { for n in local.own_services : n => "https://${n}-${data.google_project.this.number}.${var.region}.run.app" }
  function_urls = { for k, n in local.function_names : k => local.run_url[n] }

  nats_creds_dir = "/etc/secrets/nats"
  nats_env = merge(
    { NATS_URL = var.nats_url },
    var.nats_creds_enabled ? { NATS_CREDS = "${local.nats_creds_dir}/nats.creds" } : {},
  )
  nats_files = var.nats_creds_enabled ? {
    (local.nats_creds_dir) = {
      secret  = google_secret_manager_secret.nats_creds.secret_id
      version = var.nats_creds_secret_version
      path    = "nats.creds"
    }
  } : {}

  tasks_queue = module.tasks.queue_id

  # Every function schedules replay tasks (classify its first ones, replay
  # approvals and re-queues, reconcile its repairs), so each gets the
  # scheduling settings.
  scheduling_env = {
    GOOGLE_CLOUD_PROJECT  = var.project_id
    TASKS_QUEUE           = local.tasks_queue
    REPLAY_URL            = local.function_urls.replay
    TASKS_SERVICE_ACCOUNT = google_service_account.component["tasks"].email
  }
  # Classify, replay and reconcile connect to NATS, schedule replay tasks
  # and publish the notifications outbox: classify and replay what their
  # commits stage at once (triage tasks go to NATS), reconcile the rest.
  pipeline_env = merge(local.nats_env, local.scheduling_env, local.completions_env, {
    NOTIFICATIONS_TOPIC = var.notifications_topic
    CHANGES_TOPIC       = var.changes_topic
  })
  # The end of the window in which completion records of agentkits from
  # before tenant scoping count: read by every component that asks whether
  # a task is done (replay, reconcile, the console's bulk redrives).
  completions_env = var.legacy_completions_until == null ? {} : { LEGACY_COMPLETIONS_UNTIL = var.legacy_completions_until }
  # Replay and reconcile check their caller's OIDC token in code too.
  oidc_env = { for f in ["replay", "reconcile"] : f => {
    AUTH_MODE           = "oidc"
    AUTH_AUDIENCE       = local.function_urls[f]
    AUTH_ALLOWED_EMAILS = google_service_account.component[local.function_callers[f]].email
  } }
  function_env = {
    classify = local.pipeline_env
    replay   = merge(local.pipeline_env, local.oidc_env.replay)
    reconcile = merge(local.pipeline_env, local.oidc_env.reconcile, {
      ADVISORY_STREAM                      = var.advisory_stream
      RECORD_STREAM                        = var.record_stream
      WORK_STREAMS                         = join(",", var.work_streams)
      BRIDGE_CONSUMER                      = var.bridge_consumer
      RECONCILE_CAPTURE_FILL_ALERT_PERCENT = tostring(var.capture_fill_alert_percent)
      # Finish and store the report well before the platform cuts the
      # request off.
      RECONCILE_TIME_BUDGET = "${max(30, local.reconcile_timeout - 60)}s"
    })
    deliver = {
      GOOGLE_CLOUD_PROJECT  = var.project_id
      AUTH_MODE             = "oidc"
      WEBHOOK_DISABLE_AFTER = tostring(var.webhooks.disable_after)
      WEBHOOK_TIMEOUT       = var.webhooks.timeout
      WEBHOOK_DENY_URLS     = local.webhook_deny_urls
      SECRETS_KMS_KEY       = local.secrets_kms_key
    }
  }
  reconcile_timeout = module.function["reconcile"].settings.timeout_seconds

  # Sizing: function_settings; deliver's follows var.webhooks. Whatever is
  # left unset takes the function module's defaults.
  function_settings = merge(var.function_settings, {
    deliver = {
      timeout_seconds = tonumber(trimsuffix(var.webhooks.timeout, "s")) + 30
      max_instances   = var.webhooks.max_instances
    }
  })

  # The one account that may invoke each function (run.invoker), nobody
  # else: Pub/Sub's push, Cloud Tasks' replays, Cloud Scheduler, Cloud
  # Tasks' webhook deliveries.
  function_callers  = { classify = "push", replay = "tasks", reconcile = "scheduler", deliver = "hooks" }
  function_invokers = { for f, c in local.function_callers : f => { (c) = google_service_account.component[c].member } }

  # The functions that schedule replay tasks and flush the notifications
  # outbox (and so create webhook deliveries): classify, replay, reconcile.
  flusher_members = { for f in ["classify", "replay", "reconcile"] : f => google_service_account.component[f].member }

  bridge_enabled  = var.bridge_image != null
  bridge_name     = "${var.name_prefix}-bridge"
  console_enabled = var.console_image != null

  # The console's account joins the Firestore users and the queue's
  # enqueuers (those modules hold the one definition of each grant).
  console_member = local.console_enabled ? { console = module.console[0].service_account_member } : {}
}

resource "google_project_service" "enabled" {
  for_each = local.apis

  project            = var.project_id
  service            = each.value
  disable_on_destroy = false
}

data "google_project" "this" {
  project_id = var.project_id

  depends_on = [google_project_service.enabled]
}

# One repository for the function images (written by Cloud Build) and the
# bridge image.
resource "google_artifact_registry_repository" "images" {
  project       = var.project_id
  location      = var.region
  repository_id = var.name_prefix
  format        = "DOCKER"
  description   = "jsdlq function and bridge images."

  cleanup_policies {
    id     = "keep-recent"
    action = "KEEP"
    most_recent_versions {
      keep_count = 10
    }
  }

  cleanup_policies {
    id     = "delete-old"
    action = "DELETE"
    condition {
      older_than = "2592000s"
    }
  }

  depends_on = [google_project_service.enabled]
}

resource "google_secret_manager_secret" "nats_creds" {
  project   = var.project_id
  secret_id = var.nats_creds_secret_id

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}

# Optional: Terraform writes the credentials without storing them (write-only
# attribute fed by an ephemeral variable). With nats_creds_version = 0 the
# versions are added out of band and Terraform never sees the credentials.
resource "google_secret_manager_secret_version" "nats_creds" {
  count = var.nats_creds_version > 0 ? 1 : 0

  secret                 = google_secret_manager_secret.nats_creds.id
  secret_data_wo         = var.nats_creds
  secret_data_wo_version = tostring(var.nats_creds_version)
}

module "source" {
  source = "./modules/source"

  project_id    = var.project_id
  region        = var.region
  bucket_name   = coalesce(var.source_bucket_name, "${var.project_id}-${var.name_prefix}-sources")
  source_dir    = abspath("${path.root}/..")
  excludes      = var.function_source_excludes
  output_dir    = "${path.root}/.terraform/build"
  force_destroy = var.source_bucket_force_destroy
  kms_key_name  = var.kms_key_name
  reader_members = {
    builder = google_service_account.component["builder"].member
  }

  depends_on = [google_project_service.enabled, google_kms_crypto_key_iam_member.cmek]
}

module "firestore" {
  source = "./modules/firestore"

  project_id        = var.project_id
  location_id       = coalesce(var.firestore_location, var.region)
  delete_on_destroy = var.firestore_delete_on_destroy
  delete_protection = var.firestore_delete_protection
  user_members      = merge(local.flusher_members, { deliver = google_service_account.component["deliver"].member }, local.console_member)
  kms_key_name      = var.kms_key_name

  depends_on = [google_project_service.enabled, google_kms_crypto_key_iam_member.cmek]
}

module "tasks" {
  source = "./modules/tasks"

  project_id              = var.project_id
  region                  = var.region
  queue                   = var.replay_queue
  task_service_account_id = google_service_account.component["tasks"].name
  enqueuer_members        = merge(local.flusher_members, local.console_member)
  auditor_members = {
    reconcile = google_service_account.component["reconcile"].member
  }

  depends_on = [google_project_service.enabled]
}

# The tasks module's auditor bindings were one resource per role.
moved {
  from = module.tasks.google_cloud_tasks_queue_iam_member.viewer["reconcile"]
  to   = module.tasks.google_cloud_tasks_queue_iam_member.auditor["reconcile/roles/cloudtasks.viewer"]
}

moved {
  from = module.tasks.google_cloud_tasks_queue_iam_member.task_deleter["reconcile"]
  to   = module.tasks.google_cloud_tasks_queue_iam_member.auditor["reconcile/roles/cloudtasks.taskDeleter"]
}

module "function" {
  source   = "./modules/function"
  for_each = local.functions

  project_id               = var.project_id
  region                   = var.region
  name                     = local.function_names[each.key]
  description              = each.value.description
  entry_point              = each.value.entry_point
  runtime                  = var.function_runtime
  source_bucket            = module.source.bucket
  source_object            = module.source.object
  build_service_account_id = google_service_account.component["builder"].id
  docker_repository        = google_artifact_registry_repository.images.id
  service_account_email    = google_service_account.component[each.key].email
  environment              = merge(local.function_env[each.key], local.webhook_fanout_env, lookup(var.function_env, each.key, {}))
  secret_files             = contains(local.nats_clients, each.key) ? local.nats_files : {}
  settings                 = lookup(local.function_settings, each.key, null)
  ingress                  = var.function_ingress
  invoker_members          = local.function_invokers[each.key]

  # The build and the first revision fail unless their identities can
  # already read the source, push the image, write logs, read the secret
  # and (deliver) Firestore.
  depends_on = [
    google_project_service.enabled,
    google_project_iam_member.log_writer,
    google_project_iam_member.metric_writer,
    google_artifact_registry_repository_iam_member.builder,
    google_secret_manager_secret_iam_member.nats_accessor,
    google_secret_manager_secret_version.nats_creds,
    module.firestore,
  ]
}

module "events" {
  source = "./modules/events"

  project_id                 = var.project_id
  project_number             = data.google_project.this.number
  topic_name                 = var.events_topic
  dead_letter_topic_name     = "${var.events_topic}-dead-letter"
  classify_subscription_name = "${var.events_topic}-classify"
  classify_push_endpoint     = local.function_urls.classify
  classify_audience          = local.function_urls.classify
  push_service_account_email = google_service_account.component["push"].email
  push = {
    ack_deadline_seconds  = var.classify_ack_deadline_seconds
    min_backoff_seconds   = var.classify_push_min_backoff_seconds
    max_backoff_seconds   = var.classify_push_max_backoff_seconds
    max_delivery_attempts = var.classify_max_delivery_attempts
  }
  message_retention = var.event_retention
  kms_key_name      = var.kms_key_name
  publisher_members = {
    bridge = google_service_account.component["bridge"].member
  }

  # Pushes start as soon as the subscription exists: let classify and its
  # invoker binding be there first.
  depends_on = [
    google_project_service.enabled,
    module.function,
    google_service_account_iam_member.pubsub_token_creator,
    google_kms_crypto_key_iam_member.cmek,
  ]
}

module "scheduler" {
  source = "./modules/scheduler"

  project_id            = var.project_id
  region                = var.region
  job_name              = "${var.name_prefix}-reconcile"
  schedule              = var.reconcile_schedule
  time_zone             = var.reconcile_time_zone
  target_uri            = local.function_urls.reconcile
  audience              = local.function_urls.reconcile
  service_account_email = google_service_account.component["scheduler"].email
  # Cloud Scheduler allows 15-1800 s; reconcile's timeout may be up to 3600.
  attempt_deadline = "${min(1800, max(15, local.reconcile_timeout))}s"

  depends_on = [google_project_service.enabled, module.function]
}

module "bridge" {
  source = "./modules/bridge"
  count  = local.bridge_enabled ? 1 : 0

  project_id            = var.project_id
  region                = var.region
  name                  = local.bridge_name
  image                 = var.bridge_image
  service_account_email = google_service_account.component["bridge"].email
  environment = merge(local.nats_env, {
    GOOGLE_CLOUD_PROJECT      = var.project_id
    DLQ_TOPIC                 = module.events.topic_name
    ADVISORY_STREAM           = var.advisory_stream
    RECORD_STREAM             = var.record_stream
    FAILURE_BUCKET            = var.failure_bucket
    BRIDGE_CONSUMER           = var.bridge_consumer
    ADVISORY_STREAM_MAX_MSGS  = tostring(var.advisory_stream_limits.max_msgs)
    ADVISORY_STREAM_MAX_BYTES = tostring(var.advisory_stream_limits.max_bytes)
    RECORD_STREAM_MAX_MSGS    = tostring(var.record_stream_limits.max_msgs)
    RECORD_STREAM_MAX_BYTES   = tostring(var.record_stream_limits.max_bytes)
    }, var.advisory_stream_limits.max_age == "" ? {} : { ADVISORY_STREAM_MAX_AGE = var.advisory_stream_limits.max_age },
  var.record_stream_limits.max_age == "" ? {} : { RECORD_STREAM_MAX_AGE = var.record_stream_limits.max_age })
  secret_files        = local.nats_files
  min_instances       = var.bridge_min_instances
  max_instances       = var.bridge_max_instances
  cpu                 = var.bridge_cpu
  memory              = var.bridge_memory
  deletion_protection = var.deletion_protection

  depends_on = [
    google_project_service.enabled,
    google_project_iam_member.log_writer,
    google_secret_manager_secret_iam_member.nats_accessor,
    google_secret_manager_secret_version.nats_creds,
    module.events,
  ]
}

# The operator console behind IAP and the tenant recovery API
# (docs/console.md), from the cmd/console image.
module "console" {
  source = "./modules/console"
  count  = local.console_enabled ? 1 : 0

  project_id         = var.project_id
  project_number     = data.google_project.this.number
  region             = var.region
  name               = local.console_name
  urls               = { for n in local.console_names : (n == local.console_name ? "ui" : "api") => local.run_url[n] }
  service_account_id = "${var.name_prefix}-console"
  image              = var.console_image
  viewers            = var.console_viewers
  operators          = var.console_operators
  approvers          = var.console_approvers
  tenant_api_enabled = var.console_tenant_api_enabled
  triage_agents      = var.console_triage_agents
  max_instances      = var.console_max_instances
  queue_name         = module.tasks.queue_name
  queue_location     = var.region
  # The tenant API refuses jsdlq's own URLs as webhook endpoints at
  # registration, as deliver does at delivery.
  environment         = merge(local.scheduling_env, local.completions_env, { WEBHOOK_DENY_URLS = local.webhook_deny_urls, SECRETS_KMS_KEY = local.secrets_kms_key })
  deletion_protection = var.deletion_protection
  labels              = local.labels

  depends_on = [google_project_service.enabled]
}

module "monitoring" {
  source = "./modules/monitoring"

  project_id               = var.project_id
  name_prefix              = var.name_prefix
  function_services        = { for k, m in module.function : k => m.name }
  bridge_service           = local.bridge_enabled ? local.bridge_name : null
  classify_subscription    = module.events.classify_subscription
  dead_letter_subscription = module.events.dead_letter_subscription
  queue_name               = module.tasks.queue_name
  function_error_threshold = var.function_error_threshold
  notification_channels    = var.notification_channels

  depends_on = [google_project_service.enabled]
}

# Notifications (escalations, approvals, quarantines, breaker changes,
# alerts): classify and replay publish what their commits stage at once,
# reconcile publishes the rest of the outbox each run.
module "notifications" {
  source = "./modules/notifications"

  project_id        = var.project_id
  topic_name        = var.notifications_topic
  message_retention = var.event_retention
  kms_key_name      = var.kms_key_name
  labels            = local.labels
  # Flushing the outbox is publishing it.
  publisher_members = local.flusher_members

  depends_on = [google_project_service.enabled, google_kms_crypto_key_iam_member.cmek]
}

# The change feed and its warehouse (docs/forensics.md): the outbox's
# flushers publish one row per entry transition; a BigQuery subscription
# writes them into a day-partitioned table kept longer than any entry.
module "forensics" {
  source = "./modules/forensics"

  project_id           = var.project_id
  topic_name           = var.changes_topic
  dataset_id           = var.forensics_dataset
  location             = coalesce(var.forensics_location, var.region)
  retention_days       = var.forensics_retention_days
  message_retention    = var.event_retention
  kms_key_name         = var.kms_key_name
  labels               = local.labels
  publisher_members    = local.flusher_members
  reader_members       = var.forensics_readers
  pubsub_service_agent = local.service_agents.pubsub

  depends_on = [google_project_service.enabled, google_kms_crypto_key_iam_member.cmek]
}
