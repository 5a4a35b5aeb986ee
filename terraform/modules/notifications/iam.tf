# The components that flush the outbox publish to the topic; nobody else.
resource "google_pubsub_topic_iam_member" "publisher" {
  for_each = var.publisher_members

  project = var.project_id
  topic   = google_pubsub_topic.notifications.name
  role    = "roles/pubsub.publisher"
  member  = each.value
}
