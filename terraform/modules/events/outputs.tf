output "topic_id" {
  description = "Full id of the dlq-events topic."
  value       = google_pubsub_topic.this["events"].id
}

output "topic_name" {
  description = "Short name of the dlq-events topic (the bridge's DLQ_TOPIC)."
  value       = google_pubsub_topic.this["events"].name
}

output "dead_letter_topic_id" {
  description = "Full id of the dead-letter topic for events classify never accepted."
  value       = google_pubsub_topic.this["dead_letter"].id
}

output "dead_letter_subscription" {
  description = "Pull subscription holding dead-lettered events for inspection and re-drive."
  value       = google_pubsub_subscription.dead_letter.name
}

output "classify_subscription" {
  description = "Push subscription delivering dlq-events to classify."
  value       = google_pubsub_subscription.classify.name
}
