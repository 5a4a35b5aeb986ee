# The warehouse of the change feed (docs/forensics.md): every transition of
# every entry, one jsdlq.change.v1 row, published by the outbox's flushers
# to a topic whose Avro schema (change.avsc) checks each message, and
# written by a BigQuery subscription into a table partitioned by the day of
# the move and clustered by tenant and category. The table keeps its rows
# for retention_days (default 400), far longer than any entry lives in
# Firestore, so the archive outlives the working set. change.avsc and
# table_schema.json are made from the Go columns (event.ChangeColumns) and
# held equal to them by a test; the views' SQL is tested on DuckDB.

locals {
  # The queries name the dataset jsdlq_forensics; in a view it is this
  # project's dataset.
  qualified = "`${var.project_id}`.${var.dataset_id}."
  views = {
    changes_latest = "latest_state.sql"
    daily_outcomes = "daily_outcomes.sql"
  }
}

resource "google_pubsub_schema" "change" {
  project    = var.project_id
  name       = "${var.topic_name}-v1"
  type       = "AVRO"
  definition = file("${path.module}/change.avsc")
}

resource "google_pubsub_topic" "changes" {
  project                    = var.project_id
  name                       = var.topic_name
  message_retention_duration = var.message_retention
  kms_key_name               = var.kms_key_name
  labels                     = var.labels

  schema_settings {
    schema   = google_pubsub_schema.change.id
    encoding = "JSON"
  }
}

resource "google_bigquery_dataset" "forensics" {
  project                    = var.project_id
  dataset_id                 = var.dataset_id
  friendly_name              = "jsdlq forensics"
  description                = "jsdlq's change feed: one row per transition of a failure-log entry (docs/forensics.md)."
  location                   = var.location
  labels                     = var.labels
  delete_contents_on_destroy = false
}

resource "google_bigquery_table" "changes" {
  project             = var.project_id
  dataset_id          = google_bigquery_dataset.forensics.dataset_id
  table_id            = "changes"
  description         = "One row per transition of a jsdlq failure-log entry (jsdlq.change.v1); deduplicate by change_id."
  schema              = file("${path.module}/table_schema.json")
  clustering          = ["tenant", "category"]
  deletion_protection = var.deletion_protection
  labels              = var.labels

  time_partitioning {
    type          = "DAY"
    field         = "moved_at"
    expiration_ms = var.retention_days * 24 * 3600 * 1000
  }
}

resource "google_bigquery_table" "view" {
  for_each = local.views

  project             = var.project_id
  dataset_id          = google_bigquery_dataset.forensics.dataset_id
  table_id            = each.key
  deletion_protection = false
  labels              = var.labels

  view {
    query          = replace(file("${path.module}/views/${each.value}"), "jsdlq_forensics.", local.qualified)
    use_legacy_sql = false
  }

  depends_on = [google_bigquery_table.changes]
}

# The BigQuery subscription writes each message's fields into the table's
# columns of the same names (use_topic_schema); a message the table refuses
# goes to the dead-letter topic rather than blocking the rest.
resource "google_pubsub_subscription" "bigquery" {
  project                    = var.project_id
  name                       = "${var.topic_name}-bigquery"
  topic                      = google_pubsub_topic.changes.id
  ack_deadline_seconds       = 60
  message_retention_duration = var.message_retention
  labels                     = var.labels

  bigquery_config {
    table               = "${var.project_id}.${google_bigquery_dataset.forensics.dataset_id}.${google_bigquery_table.changes.table_id}"
    use_topic_schema    = true
    write_metadata      = false
    drop_unknown_fields = false
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead.id
    max_delivery_attempts = 10
  }

  expiration_policy {
    ttl = ""
  }

  depends_on = [google_bigquery_table_iam_member.writer, google_bigquery_table_iam_member.metadata]
}

# Rows the table refused, kept for an operator (a topic without a
# subscription would lose them).
resource "google_pubsub_topic" "dead" {
  project                    = var.project_id
  name                       = "${var.topic_name}-dead"
  message_retention_duration = var.message_retention
  kms_key_name               = var.kms_key_name
  labels                     = var.labels
}

resource "google_pubsub_subscription" "dead_hold" {
  project                    = var.project_id
  name                       = "${var.topic_name}-dead-hold"
  topic                      = google_pubsub_topic.dead.id
  message_retention_duration = var.message_retention
  labels                     = var.labels

  expiration_policy {
    ttl = ""
  }
}
