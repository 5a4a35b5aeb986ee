# Identities and the bindings that are not on a module's own resources.
# Every role and its reason is listed in README.md. Project-level roles are
# limited to logging.logWriter and monitoring.metricWriter here, plus the
# conditioned roles/datastore.user in modules/firestore (Firestore has no
# resource-level binding).

locals {
  service_accounts = {
    bridge    = "jsdlq bridge (Cloud Run): JetStream advisories and records to Pub/Sub"
    classify  = "jsdlq classify function runtime"
    replay    = "jsdlq replay function runtime"
    reconcile = "jsdlq reconcile function runtime"
    tasks     = "jsdlq Cloud Tasks OIDC identity: invokes replay"
    scheduler = "jsdlq Cloud Scheduler OIDC identity: invokes reconcile"
    push      = "jsdlq Pub/Sub push OIDC identity: invokes classify"
    builder   = "jsdlq function builds (Cloud Build)"
    deliver   = "jsdlq deliver function runtime: reads endpoints and notifications, records attempts (Firestore)."
    hooks     = "jsdlq Cloud Tasks OIDC identity: invokes deliver"
  }

  # Components that run code and write logs / custom metrics.
  log_writers    = toset(["bridge", "classify", "replay", "reconcile", "deliver", "builder"])
  metric_writers = toset(["bridge", "classify", "replay", "reconcile", "deliver"])
  nats_clients   = var.nats_creds_enabled ? toset(["bridge", "classify", "replay", "reconcile"]) : toset([])
}

resource "google_service_account" "component" {
  for_each = local.service_accounts

  project      = var.project_id
  account_id   = "${var.name_prefix}-${each.key}"
  display_name = each.value
  description  = each.value

  depends_on = [google_project_service.enabled]
}

# deliver and hooks had resources of their own (webhooks.tf).
moved {
  from = google_service_account.deliver
  to   = google_service_account.component["deliver"]
}

moved {
  from = google_service_account.webhook_tasks
  to   = google_service_account.component["hooks"]
}

moved {
  from = google_project_iam_member.deliver_log_writer["roles/logging.logWriter"]
  to   = google_project_iam_member.log_writer["deliver"]
}

moved {
  from = google_project_iam_member.deliver_log_writer["roles/monitoring.metricWriter"]
  to   = google_project_iam_member.metric_writer["deliver"]
}

resource "google_project_iam_member" "log_writer" {
  for_each = local.log_writers

  project = var.project_id
  role    = "roles/logging.logWriter"
  member  = google_service_account.component[each.key].member
}

resource "google_project_iam_member" "metric_writer" {
  for_each = local.metric_writers

  project = var.project_id
  role    = "roles/monitoring.metricWriter"
  member  = google_service_account.component[each.key].member
}

resource "google_secret_manager_secret_iam_member" "nats_accessor" {
  for_each = local.nats_clients

  project   = var.project_id
  secret_id = google_secret_manager_secret.nats_creds.secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.component[each.key].member
}

resource "google_artifact_registry_repository_iam_member" "builder" {
  project    = var.project_id
  location   = var.region
  repository = google_artifact_registry_repository.images.name
  role       = "roles/artifactregistry.writer"
  member     = google_service_account.component["builder"].member
}

# Pub/Sub mints the push OIDC token as the push account. Projects created
# before April 2021 need this grant; on newer ones it is harmless.
resource "google_service_account_iam_member" "pubsub_token_creator" {
  service_account_id = google_service_account.component["push"].name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.service_agents.pubsub
}
