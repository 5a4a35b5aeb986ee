# dlq-events and its way into classify. A gen2 event trigger cannot carry a
# dead-letter policy, so classify is fed by an explicit push subscription:
# retries with backoff, then the dead-letter topic, whose own subscription
# keeps what lands there (a topic without a subscription drops messages).

# dlq-events and its dead-letter topic keep messages alike (retention, labels).
resource "google_pubsub_topic" "this" {
  for_each = { events = var.topic_name, dead_letter = var.dead_letter_topic_name }

  project                    = var.project_id
  name                       = each.value
  message_retention_duration = var.message_retention
  kms_key_name               = var.kms_key_name
  labels                     = var.labels
}

moved {
  from = google_pubsub_topic.events
  to   = google_pubsub_topic.this["events"]
}

moved {
  from = google_pubsub_topic.dead_letter
  to   = google_pubsub_topic.this["dead_letter"]
}

resource "google_pubsub_subscription" "dead_letter" {
  project                    = var.project_id
  name                       = "${var.dead_letter_topic_name}-hold"
  topic                      = google_pubsub_topic.this["dead_letter"].id
  ack_deadline_seconds       = 600
  message_retention_duration = var.message_retention
  retain_acked_messages      = true
  labels                     = var.labels

  # Never expire for inactivity: nobody may read it for months.
  expiration_policy {
    ttl = ""
  }
}

resource "google_pubsub_subscription" "classify" {
  project              = var.project_id
  name                 = var.classify_subscription_name
  topic                = google_pubsub_topic.this["events"].id
  ack_deadline_seconds = var.push.ack_deadline_seconds
  labels               = var.labels

  push_config {
    push_endpoint = var.classify_push_endpoint

    oidc_token {
      service_account_email = var.push_service_account_email
      audience              = var.classify_audience
    }
  }

  retry_policy {
    minimum_backoff = "${var.push.min_backoff_seconds}s"
    maximum_backoff = "${var.push.max_backoff_seconds}s"
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.this["dead_letter"].id
    max_delivery_attempts = var.push.max_delivery_attempts
  }

  expiration_policy {
    ttl = ""
  }
}
