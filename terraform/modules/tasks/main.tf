# The replay queue. Classify names each task, so a redelivered event never
# schedules a second replay; the queue bounds how fast replays hit the
# agents' work stream and how long a failing replay is retried.

resource "google_cloud_tasks_queue" "replay" {
  project  = var.project_id
  location = var.region
  name     = var.queue.name

  rate_limits {
    max_dispatches_per_second = var.queue.max_dispatches_per_second
    max_concurrent_dispatches = var.queue.max_concurrent_dispatches
  }

  retry_config {
    max_attempts       = var.queue.max_attempts
    min_backoff        = var.queue.min_backoff
    max_backoff        = var.queue.max_backoff
    max_doublings      = var.queue.max_doublings
    max_retry_duration = var.queue.max_retry_duration
  }

  stackdriver_logging_config {
    sampling_ratio = var.log_sampling_ratio
  }
}
