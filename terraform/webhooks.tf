# Tenant webhooks (docs/contracts.md, "Tenant webhooks"): reconcile's flush
# fans each tenant notification out to one Cloud Tasks task per enabled
# endpoint of the tenant, in a queue of their own whose retry config is the
# deliveries' backoff; the deliver function POSTs the notification, signed,
# to the tenant's endpoint. Its own runtime account (Firestore only) and its
# own OIDC identity for Cloud Tasks, which alone may invoke it.

variable "webhooks" {
  type = object({
    queue_name                = optional(string, "dlq-webhooks")
    disable_after             = optional(number, 10)
    timeout                   = optional(string, "10s")
    max_dispatches_per_second = optional(number, 20)
    max_concurrent_dispatches = optional(number, 50)
    max_attempts              = optional(number, 12)
    min_backoff               = optional(string, "10s")
    max_backoff               = optional(string, "3600s")
    max_doublings             = optional(number, 8)
    max_retry_duration        = optional(string, "172800s")
    max_instances             = optional(number, 10)
  })
  description = "Tenant webhook deliveries: the queue (name, rate, retry/backoff), the run of consecutive failed deliveries that disables an endpoint (disable_after), one delivery's timeout and the deliver function's instances (each field optional)."
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
    condition     = can(regex("^[0-9]+s$", var.webhooks.max_retry_duration)) && try(tonumber(trimsuffix(var.webhooks.max_retry_duration, "s")) > 0 && tonumber(trimsuffix(var.webhooks.max_retry_duration, "s")) <= 604800, false)
    error_message = "webhooks.max_retry_duration must be whole seconds, more than \"0s\" and at most \"604800s\" (7 days, how long a published notification is kept)."
  }
  validation {
    condition     = var.webhooks.max_instances >= 1 && var.webhooks.max_instances <= 100
    error_message = "webhooks.max_instances must be between 1 and 100."
  }
}

locals {
  deliver_name = "${var.name_prefix}-deliver"
  deliver_url  = "https://${local.deliver_name}-${data.google_project.this.number}.${var.region}.run.app"

  # What a flush needs to create delivery tasks: classify, replay and
  # reconcile flush the outbox (main.tf merges it into their environment).
  webhook_fanout_env = {
    WEBHOOKS_QUEUE          = module.webhook_tasks.queue_id
    WEBHOOK_DELIVER_URL     = local.deliver_url
    WEBHOOK_SERVICE_ACCOUNT = google_service_account.webhook_tasks.email
  }

  # jsdlq's own addresses: never a tenant's endpoint.
  console_urls = local.console_enabled ? [module.console[0].ui_url, module.console[0].api_url] : []
  own_urls     = concat(values(local.function_urls), [local.deliver_url], [for u in local.console_urls : u if u != null])
}

resource "google_service_account" "deliver" {
  project      = var.project_id
  account_id   = local.deliver_name
  display_name = "jsdlq deliver function runtime"
  description  = "jsdlq deliver function runtime: reads endpoints and notifications, records attempts (Firestore)."

  depends_on = [google_project_service.enabled]
}

resource "google_service_account" "webhook_tasks" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-hooks"
  display_name = "jsdlq Cloud Tasks OIDC identity: invokes deliver"
  description  = "jsdlq Cloud Tasks OIDC identity: invokes deliver"

  depends_on = [google_project_service.enabled]
}

resource "google_project_iam_member" "deliver_log_writer" {
  for_each = toset(["roles/logging.logWriter", "roles/monitoring.metricWriter"])

  project = var.project_id
  role    = each.value
  member  = google_service_account.deliver.member
}

# The deliveries' queue: the functions that flush the outbox create tasks
# (and act as the OIDC identity to do so). Nothing audits it: a task is
# created before its notification is marked fanned out, so none is lost.
module "webhook_tasks" {
  source = "./modules/tasks"

  project_id                = var.project_id
  region                    = var.region
  queue_name                = var.webhooks.queue_name
  max_dispatches_per_second = var.webhooks.max_dispatches_per_second
  max_concurrent_dispatches = var.webhooks.max_concurrent_dispatches
  max_attempts              = var.webhooks.max_attempts
  min_backoff               = var.webhooks.min_backoff
  max_backoff               = var.webhooks.max_backoff
  max_doublings             = var.webhooks.max_doublings
  max_retry_duration        = var.webhooks.max_retry_duration
  task_service_account_id   = google_service_account.webhook_tasks.name
  enqueuer_members = {
    classify  = google_service_account.component["classify"].member
    replay    = google_service_account.component["replay"].member
    reconcile = google_service_account.component["reconcile"].member
  }
  auditor_members = {}

  depends_on = [google_project_service.enabled]
}

module "deliver" {
  source = "./modules/function"

  project_id               = var.project_id
  region                   = var.region
  name                     = local.deliver_name
  description              = "jsdlq deliver: POST a tenant's notification to its webhook, signed (Cloud Tasks target)."
  entry_point              = "Deliver"
  runtime                  = var.function_runtime
  source_bucket            = module.source.bucket
  source_object            = module.source.object
  build_service_account_id = google_service_account.component["builder"].id
  docker_repository        = google_artifact_registry_repository.images.id
  service_account_email    = google_service_account.deliver.email
  environment = merge({
    GOOGLE_CLOUD_PROJECT    = var.project_id
    AUTH_MODE               = "oidc"
    WEBHOOKS_QUEUE          = module.webhook_tasks.queue_id
    WEBHOOK_DELIVER_URL     = local.deliver_url
    WEBHOOK_SERVICE_ACCOUNT = google_service_account.webhook_tasks.email
    WEBHOOK_DISABLE_AFTER   = tostring(var.webhooks.disable_after)
    WEBHOOK_TIMEOUT         = var.webhooks.timeout
    WEBHOOK_DENY_URLS       = join(",", local.own_urls)
  }, lookup(var.function_env, "deliver", {}))
  memory          = "256Mi"
  timeout_seconds = tonumber(trimsuffix(var.webhooks.timeout, "s")) + 30
  min_instances   = 0
  max_instances   = var.webhooks.max_instances
  concurrency     = 1
  ingress         = var.function_ingress
  invoker_members = {
    webhook_tasks = google_service_account.webhook_tasks.member
  }

  depends_on = [
    google_project_service.enabled,
    google_project_iam_member.deliver_log_writer,
    google_artifact_registry_repository_iam_member.builder,
    module.firestore,
  ]
}

output "webhooks_queue" {
  description = "Full name of the webhook deliveries' queue (WEBHOOKS_QUEUE)."
  value       = module.webhook_tasks.queue_id
}

output "deliver_url" {
  description = "URL of the deliver function (WEBHOOK_DELIVER_URL, the deliveries' OIDC audience)."
  value       = local.deliver_url
}
