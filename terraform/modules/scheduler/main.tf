# The periodic audit (docs/reconcile.md). Reconcile is idempotent and safe to run
# concurrently, so an overlapping retry does no harm.

resource "google_cloud_scheduler_job" "reconcile" {
  project          = var.project_id
  region           = var.region
  name             = var.job_name
  description      = "jsdlq reconcile: audit capture, storage, metrics and the replay queue."
  schedule         = var.schedule
  time_zone        = var.time_zone
  attempt_deadline = var.attempt_deadline

  retry_config {
    retry_count          = var.retry_count
    min_backoff_duration = "30s"
    max_backoff_duration = "300s"
  }

  http_target {
    uri         = var.target_uri
    http_method = "POST"
    headers = {
      "Content-Type" = "application/json"
    }
    body = base64encode(jsonencode({ trigger = "scheduler" }))

    oidc_token {
      service_account_email = var.service_account_email
      audience              = var.audience
    }
  }
}
