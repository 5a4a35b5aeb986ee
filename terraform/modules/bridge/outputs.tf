output "service_name" {
  description = "Cloud Run service name of the bridge."
  value       = google_cloud_run_v2_service.bridge.name
}

output "uri" {
  description = "Internal URL of the bridge (health and metrics)."
  value       = google_cloud_run_v2_service.bridge.uri
}

output "latest_ready_revision" {
  description = "Revision currently serving."
  value       = google_cloud_run_v2_service.bridge.latest_ready_revision
}
