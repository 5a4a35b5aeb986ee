output "function_urls" {
  description = "URLs of the classify, replay, reconcile and deliver functions (the audiences their callers' OIDC tokens carry)."
  value       = local.function_urls
}

output "function_ids" {
  description = "Full resource ids of the functions, by name (classify, replay, reconcile, deliver)."
  value       = { for k, m in module.function : k => m.id }
}

output "service_accounts" {
  description = "Service account email of each component."
  value       = { for k, sa in google_service_account.component : k => sa.email }
}

output "events_topic" {
  description = "Full id of the dlq-events topic the bridge publishes to."
  value       = module.events.topic_id
}

output "dead_letter_topic" {
  description = "Full id of the topic receiving events classify never accepted."
  value       = module.events.dead_letter_topic_id
}

output "dead_letter_subscription" {
  description = "Subscription that holds dead-lettered events (pull it to inspect or re-drive)."
  value       = module.events.dead_letter_subscription
}

output "classify_subscription" {
  description = "Push subscription feeding classify."
  value       = module.events.classify_subscription
}

output "tasks_queue" {
  description = "Full name of the replay queue (TASKS_QUEUE)."
  value       = module.tasks.queue_id
}

output "scheduler_job" {
  description = "Cloud Scheduler job that runs reconcile."
  value       = module.scheduler.job_name
}

output "firestore_database" {
  description = "Firestore database id."
  value       = module.firestore.database_id
}

output "nats_creds_secret" {
  description = "Secret Manager secret holding the NATS credentials file (add versions with gcloud secrets versions add)."
  value       = google_secret_manager_secret.nats_creds.id
}

output "image_repository" {
  description = "Artifact Registry path to push the bridge image to: <this>/bridge:<tag>."
  value       = "${var.region}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.images.repository_id}"
}

output "source_bundle" {
  description = "gs:// URL of the function source bundle currently deployed."
  value       = "gs://${module.source.bucket}/${module.source.object}"
}

output "bridge_service" {
  description = "Cloud Run service of the bridge, or null when bridge_image is unset."
  value       = one(module.bridge[*].service_name)
}

output "console_url" {
  description = "URL of the operator console (behind IAP; console_viewers, console_operators and console_approvers may open it), or null when console_image is unset."
  value       = one(module.console[*].ui_url)
}

output "console_api_url" {
  description = "Base URL of the tenant recovery API (<this>/api/v1/tenants/{tenant}/entries, Authorization: Bearer <key>), or null when the console or its API is not deployed."
  value       = one(module.console[*].api_url)
}

output "console_service_account" {
  description = "Email of the console's service account, or null when console_image is unset."
  value       = one(module.console[*].service_account_email)
}

output "dashboard_id" {
  description = "Monitoring dashboard id."
  value       = module.monitoring.dashboard_id
}

output "alert_policies" {
  description = "Alert policy ids by alert name."
  value       = module.monitoring.alert_policies
}
