output "topic_id" {
  description = "The change feed's topic (projects/P/topics/T)."
  value       = google_pubsub_topic.changes.id
}

output "topic_name" {
  description = "The change feed's topic's name (CHANGES_TOPIC)."
  value       = google_pubsub_topic.changes.name
}

output "schema_id" {
  description = "The topic's Avro schema."
  value       = google_pubsub_schema.change.id
}

output "dataset_id" {
  description = "The warehouse's dataset."
  value       = google_bigquery_dataset.forensics.dataset_id
}

output "table" {
  description = "The change feed's table, PROJECT.DATASET.TABLE."
  value       = "${var.project_id}.${google_bigquery_dataset.forensics.dataset_id}.${google_bigquery_table.changes.table_id}"
}

output "views" {
  description = "The views over the table (latest state per entry, daily outcomes per category), by name."
  value       = { for k, v in google_bigquery_table.view : k => "${var.project_id}.${v.dataset_id}.${v.table_id}" }
}

output "subscription" {
  description = "The BigQuery subscription's name."
  value       = google_pubsub_subscription.bigquery.name
}
