output "queue_id" {
  description = "Full queue name, projects/P/locations/L/queues/Q (the TASKS_QUEUE setting)."
  value       = "projects/${var.project_id}/locations/${var.region}/queues/${google_cloud_tasks_queue.replay.name}"
}

output "queue_name" {
  description = "Short queue name."
  value       = google_cloud_tasks_queue.replay.name
}
