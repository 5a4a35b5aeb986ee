output "ui_url" {
  description = "URL of the operator UI (behind IAP): the one it answers at."
  value       = var.urls.ui
}

output "api_url" {
  description = "Base URL of the tenant recovery API (<this>/api/v1/tenants/{tenant}/entries), or null when tenant_api_enabled is false."
  value       = var.tenant_api_enabled ? var.urls.api : null
}

output "generated_urls" {
  description = "The URLs Cloud Run generated for the services (uri), by role: jsdlq's own addresses too, which the services do not answer at."
  value       = { for k, s in google_cloud_run_v2_service.console : k => s.uri }
}

output "service_names" {
  description = "Cloud Run service names by role (ui, api)."
  value       = { for k, s in google_cloud_run_v2_service.console : k => s.name }
}

output "iap_audience" {
  description = "The aud IAP signs for the operator UI (CONSOLE_IAP_AUDIENCE)."
  value       = local.services.ui.env.CONSOLE_IAP_AUDIENCE
}

output "service_account_email" {
  description = "Email of the console's service account."
  value       = google_service_account.console.email
}

output "service_account_member" {
  description = "IAM member of the console's service account (serviceAccount:…), for the Firestore and queue grants made by the firestore and tasks modules."
  value       = google_service_account.console.member
}
