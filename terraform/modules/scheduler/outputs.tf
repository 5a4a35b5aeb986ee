output "job_id" {
  description = "Full id of the scheduler job."
  value       = google_cloud_scheduler_job.reconcile.id
}

output "job_name" {
  description = "Scheduler job name (run it now with `gcloud scheduler jobs run`)."
  value       = google_cloud_scheduler_job.reconcile.name
}
