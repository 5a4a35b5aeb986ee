output "name" {
  description = "Function name (also its Cloud Run service name)."
  value       = google_cloudfunctions2_function.this.name
}

output "id" {
  description = "Full resource id of the function."
  value       = google_cloudfunctions2_function.this.id
}

output "uri" {
  description = "URL the platform reports for the function's service."
  value       = google_cloudfunctions2_function.this.service_config[0].uri
}

output "url" {
  description = "The function's cloudfunctions.net URL (https://REGION-PROJECT.cloudfunctions.net/NAME): the same service under another name."
  value       = google_cloudfunctions2_function.this.url
}

output "service" {
  description = "Cloud Run service backing the function."
  value       = google_cloudfunctions2_function.this.service_config[0].service
}

output "settings" {
  description = "The sizing the function runs with, defaults filled in."
  value       = var.settings
}
