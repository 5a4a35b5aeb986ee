# The components that flush the outbox publish the feed; nobody else.
resource "google_pubsub_topic_iam_member" "publisher" {
  for_each = var.publisher_members

  project = var.project_id
  topic   = google_pubsub_topic.changes.name
  role    = "roles/pubsub.publisher"
  member  = each.value
}

# Pub/Sub's service agent writes the subscription's rows into the table,
# and reads its metadata; nothing else in the dataset.
resource "google_bigquery_table_iam_member" "writer" {
  project    = var.project_id
  dataset_id = google_bigquery_dataset.forensics.dataset_id
  table_id   = google_bigquery_table.changes.table_id
  role       = "roles/bigquery.dataEditor"
  member     = var.pubsub_service_agent
}

resource "google_bigquery_table_iam_member" "metadata" {
  project    = var.project_id
  dataset_id = google_bigquery_dataset.forensics.dataset_id
  table_id   = google_bigquery_table.changes.table_id
  role       = "roles/bigquery.metadataViewer"
  member     = var.pubsub_service_agent
}

# It forwards what the table refuses to the dead-letter topic, and
# acknowledges it on the subscription.
resource "google_pubsub_topic_iam_member" "dead_publisher" {
  project = var.project_id
  topic   = google_pubsub_topic.dead.name
  role    = "roles/pubsub.publisher"
  member  = var.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "dead_subscriber" {
  project      = var.project_id
  subscription = google_pubsub_subscription.bigquery.name
  role         = "roles/pubsub.subscriber"
  member       = var.pubsub_service_agent
}

# Who reads the warehouse (the weekly questions): the dataset's tables and
# views.
resource "google_bigquery_dataset_iam_member" "reader" {
  for_each = var.reader_members

  project    = var.project_id
  dataset_id = google_bigquery_dataset.forensics.dataset_id
  role       = "roles/bigquery.dataViewer"
  member     = each.value
}
