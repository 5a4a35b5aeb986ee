# Tenant webhooks (docs/contracts.md, "Tenant webhooks"): the outbox's flush
# (classify and replay after their commits, reconcile each run) fans each
# tenant notification out to one Cloud Tasks task per enabled
# endpoint of the tenant, in a queue of their own whose retry config is the
# deliveries' backoff; the deliver function POSTs the notification, signed,
# to the tenant's endpoint. Its own runtime account (Firestore only) and its
# own OIDC identity for Cloud Tasks, which alone may invoke it (the
# components deliver and hooks of iam.tf).

locals {
  # What a flush needs to create delivery tasks: classify, replay and
  # reconcile flush the outbox (main.tf merges it into their environment).
  webhook_fanout_env = {
    WEBHOOKS_QUEUE          = module.webhook_tasks.queue_id
    WEBHOOK_DELIVER_URL     = local.function_urls.deliver
    WEBHOOK_SERVICE_ACCOUNT = google_service_account.component["hooks"].email
  }

  # jsdlq's own addresses: never a tenant's endpoint. The console's are
  # the deterministic run.app URLs of its services (their uri outputs
  # would make the console's environment depend on the console).
  console_name  = "${var.name_prefix}-console"
  console_names = local.console_enabled ? [local.console_name, "${local.console_name}-api"] : []
  own_services  = concat(values(local.function_names), local.console_names)
  # Refused by deliver at delivery and by the tenant API at registration.
  webhook_deny_urls = join(",", [for n in local.own_services : local.run_url[n]])

  # Every URL the platform made for jsdlq's services, known once they exist:
  # each function's generated run.app URL and its cloudfunctions.net URL,
  # the console services' generated URLs, and the deterministic ones. No
  # service's environment can hold its own (it would depend on itself),
  # nor can deliver's and the console's hold each other's (they would
  # depend on each other), so they are written to one Firestore document
  # that deliver, the tenant API and dlqctl read (store.OwnURLs).
  own_generated_urls = distinct(compact(concat(
    [for n in local.own_services : local.run_url[n]],
    [for m in module.function : m.uri],
    [for m in module.function : m.url],
    local.console_enabled ? values(module.console[0].generated_urls) : [],
  )))
}

# jsdlq-deployment/own-urls {"urls": [...]}: the collection and document
# are store.Deployment and store.OwnURLsDoc (internal/deploycheck holds the
# two to each other).
resource "google_firestore_document" "own_urls" {
  project     = var.project_id
  database    = module.firestore.database_name
  collection  = "jsdlq-deployment"
  document_id = "own-urls"
  fields = jsonencode({
    urls = { arrayValue = { values = [for u in local.own_generated_urls : { stringValue = u }] } }
  })
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

# The deliver function is module.function["deliver"] (main.tf).
moved {
  from = module.deliver
  to   = module.function["deliver"]
}

# Its invoker binding is keyed by the calling component, as every function's.
moved {
  from = module.function["deliver"].google_cloud_run_v2_service_iam_member.invoker["webhook_tasks"]
  to   = module.function["deliver"].google_cloud_run_v2_service_iam_member.invoker["hooks"]
}

output "webhooks_queue" {
  description = "Full name of the webhook deliveries' queue (WEBHOOKS_QUEUE)."
  value       = module.webhook_tasks.queue_id
}

output "deliver_url" {
  description = "URL of the deliver function (WEBHOOK_DELIVER_URL, the deliveries' OIDC audience)."
  value       = local.function_urls.deliver
}
