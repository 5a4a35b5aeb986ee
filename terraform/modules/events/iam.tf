locals {
  pubsub_service_agent = "serviceAccount:service-${var.project_number}@gcp-sa-pubsub.iam.gserviceaccount.com"
}

resource "google_pubsub_topic_iam_member" "publisher" {
  for_each = var.publisher_members

  project = var.project_id
  topic   = google_pubsub_topic.this["events"].name
  role    = "roles/pubsub.publisher"
  member  = each.value
}

# Dead-lettering is done by the Pub/Sub service agent: it must publish to the
# dead-letter topic and acknowledge (subscriber) on the source subscription.
resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  project = var.project_id
  topic   = google_pubsub_topic.this["dead_letter"].name
  role    = "roles/pubsub.publisher"
  member  = local.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_subscriber" {
  project      = var.project_id
  subscription = google_pubsub_subscription.classify.name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
}
