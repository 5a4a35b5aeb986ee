output "topic_id" {
  description = "The notifications topic (projects/P/topics/T)."
  value       = google_pubsub_topic.notifications.id
}

output "topic_name" {
  description = "The notifications topic's name (NOTIFICATIONS_TOPIC)."
  value       = google_pubsub_topic.notifications.name
}

output "example_subscription" {
  description = "The example subscription's name, or null."
  value       = var.example_subscription ? google_pubsub_subscription.example[0].name : null
}
