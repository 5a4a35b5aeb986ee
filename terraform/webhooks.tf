# Tenant webhooks (docs/contracts.md, "Tenant webhooks"): the outbox's flush
# (classify and replay after their commits, reconcile each run) fans each
# tenant notification out to one Cloud Tasks task per enabled
# endpoint of the tenant, in a queue of their own whose retry config is the
# deliveries' backoff; the deliver function POSTs the notification, signed,
# to the tenant's endpoint. Its own runtime account (Firestore only) and its
# own OIDC identity for Cloud Tasks, which alone may invoke it (the
# components deliver and hooks of iam.tf).

locals {
  deliver_name = "${var.name_prefix}-deliver"
  deliver_url  = "https://${local.deliver_name}-${data.google_project.this.number}.${var.region}.run.app"

  # What a flush needs to create delivery tasks: classify, replay and
  # reconcile flush the outbox (main.tf merges it into their environment).
  webhook_fanout_env = {
    WEBHOOKS_QUEUE          = module.webhook_tasks.queue_id
    WEBHOOK_DELIVER_URL     = local.deliver_url
    WEBHOOK_SERVICE_ACCOUNT = google_service_account.component["hooks"].email
  }

  # jsdlq's own addresses: never a tenant's endpoint. The console's are
  # the deterministic run.app URLs of its services (their uri outputs
  # would make the console's environment depend on the console).
  console_name = "${var.name_prefix}-console"
  console_urls = local.console_enabled ? [for n in [local.console_name, "${local.console_name}-api"] : "https://${n}-${data.google_project.this.number}.${var.region}.run.app"] : []
  own_urls     = concat(values(local.function_urls), [local.deliver_url], local.console_urls)
}

# The deliveries' queue: the functions that flush the outbox create tasks
# (and act as the OIDC identity to do so). Nothing audits it: a task is
# created before its notification is marked fanned out, so none is lost.
module "webhook_tasks" {
  source = "./modules/tasks"

  project_id              = var.project_id
  region                  = var.region
  queue                   = var.webhooks.queue
  task_service_account_id = google_service_account.component["hooks"].name
  enqueuer_members        = local.flusher_members
  auditor_members         = {}

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
  service_account_email    = google_service_account.component["deliver"].email
  environment = merge({
    GOOGLE_CLOUD_PROJECT  = var.project_id
    AUTH_MODE             = "oidc"
    WEBHOOK_DISABLE_AFTER = tostring(var.webhooks.disable_after)
    WEBHOOK_TIMEOUT       = var.webhooks.timeout
    WEBHOOK_DENY_URLS     = join(",", local.own_urls)
  }, local.webhook_fanout_env, lookup(var.function_env, "deliver", {}))
  memory          = "256Mi"
  timeout_seconds = tonumber(trimsuffix(var.webhooks.timeout, "s")) + 30
  min_instances   = 0
  max_instances   = var.webhooks.max_instances
  concurrency     = 1
  ingress         = var.function_ingress
  invoker_members = {
    webhook_tasks = google_service_account.component["hooks"].member
  }

  depends_on = [
    google_project_service.enabled,
    google_project_iam_member.log_writer,
    google_project_iam_member.metric_writer,
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
