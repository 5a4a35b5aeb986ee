output "log_metrics" {
  description = "Log-based metric names by purpose (metric type logging.googleapis.com/user/<name>)."
  value = merge(
    { for k, m in google_logging_metric.counter : k => m.name },
    { for m in google_logging_metric.bridge_lag : "bridge_lag" => m.name },
  )
}

output "alert_policies" {
  description = "Alert policy ids by alert name."
  value = merge(
    { for k, p in google_monitoring_alert_policy.threshold : k => p.name },
    { for p in google_monitoring_alert_policy.bridge_silent : "bridge_silent" => p.name },
  )
}

output "dashboard_id" {
  description = "Id of the monitoring dashboard."
  value       = google_monitoring_dashboard.jsdlq.id
}
