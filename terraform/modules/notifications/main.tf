# dlq-notifications: jsdlq.notification.v1 events (docs/contracts.md), one
# per transition someone must hear about (an entry escalated, awaiting
# approval or quarantined; a tenant breaker opened, half-open or closed).
# The attributes kind, tenant, severity and notification_id let each
# subscriber take only what concerns it; the example subscription below
# keeps what needs a human now.

resource "google_pubsub_topic" "notifications" {
  project                    = var.project_id
  name                       = var.topic_name
  message_retention_duration = var.message_retention
  kms_key_name               = var.kms_key_name
  labels                     = var.labels
}

# An example pull subscription: operators' critical notifications and every
# escalation (a subscriber deduplicates by the notification_id attribute).
resource "google_pubsub_subscription" "example" {
  count = var.example_subscription ? 1 : 0

  project                    = var.project_id
  name                       = "${var.topic_name}-operators"
  topic                      = google_pubsub_topic.notifications.id
  ack_deadline_seconds       = 60
  message_retention_duration = var.message_retention
  filter                     = var.example_filter
  labels                     = var.labels
}
