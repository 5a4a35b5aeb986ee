# The jsdlq store (docs/storage.md): one native-mode database, the composite indexes
# the dlqctl, reconcile and console queries need, and TTL policies so expired entries
# and idempotency records disappear without a sweeper.

locals {
  # Composite indexes on failure-log: (equality field, range/order field).
  failure_log_indexes = {
    status_next_retry_at = [{ field = "status", order = "ASCENDING" }, { field = "next_retry_at", order = "ASCENDING" }]
    tenant_created_at    = [{ field = "tenant", order = "ASCENDING" }, { field = "created_at", order = "DESCENDING" }]
    category_created_at  = [{ field = "category", order = "ASCENDING" }, { field = "created_at", order = "DESCENDING" }]
    agent_created_at     = [{ field = "agent", order = "ASCENDING" }, { field = "created_at", order = "DESCENDING" }]
    # The console's case-insensitive tenant and agent filters (store.Query.FoldCase).
    tenant_fold_created_at = [{ field = "tenant_fold", order = "ASCENDING" }, { field = "created_at", order = "DESCENDING" }]
    agent_fold_created_at  = [{ field = "agent_fold", order = "ASCENDING" }, { field = "created_at", order = "DESCENDING" }]
    # dlqctl ls / redrive filter on these too, newest first; Firestore merges
    # the (field, created_at) indexes for several equality filters at once.
    status_created_at      = [{ field = "status", order = "ASCENDING" }, { field = "created_at", order = "DESCENDING" }]
    reason_code_created_at = [{ field = "reason_code", order = "ASCENDING" }, { field = "created_at", order = "DESCENDING" }]
    # The rest of store.Query's equality filters: a replay chain (dlqctl
    # show's lineage, root_id) and an agent's task by id or type.
    root_id_created_at   = [{ field = "root_id", order = "ASCENDING" }, { field = "created_at", order = "DESCENDING" }]
    task_id_created_at   = [{ field = "task_id", order = "ASCENDING" }, { field = "created_at", order = "DESCENDING" }]
    task_type_created_at = [{ field = "task_type", order = "ASCENDING" }, { field = "created_at", order = "DESCENDING" }]
    # The console's overview lists the entries of each waiting status
    # oldest first (store.OldestFirst with a status filter); merged indexes
    # need one direction, so the DESC index above cannot serve it.
    status_created_at_asc = [{ field = "status", order = "ASCENDING" }, { field = "created_at", order = "ASCENDING" }]
  }

  # store.Query allows every equality filter with every order: newest first
  # (the DESC indexes above), oldest first and a created_at range (Count with
  # a range orders by created_at ascending), and due first (next_retry_at).
  # One (field, created_at ASC) and one (field, next_retry_at ASC) index per
  # filter field lets Firestore merge them for any combination of filters;
  # internal/deploycheck checks every combination against this list.
  query_filter_fields = ["tenant", "status", "category", "reason_code", "agent", "task_type", "task_id", "root_id", "tenant_fold", "agent_fold"]
  failure_log_filter_indexes = merge(
    { for f in local.query_filter_fields : "${f}_created_at_asc" => [{ field = f, order = "ASCENDING" }, { field = "created_at", order = "ASCENDING" }] if f != "status" },
    { for f in local.query_filter_fields : "${f}_next_retry_at" => [{ field = f, order = "ASCENDING" }, { field = "next_retry_at", order = "ASCENDING" }] if f != "status" },
  )
}

resource "google_firestore_database" "this" {
  project                     = var.project_id
  name                        = "(default)"
  location_id                 = var.location_id
  type                        = "FIRESTORE_NATIVE"
  app_engine_integration_mode = "DISABLED"
  delete_protection_state     = var.delete_protection ? "DELETE_PROTECTION_ENABLED" : "DELETE_PROTECTION_DISABLED"
  deletion_policy             = var.delete_on_destroy ? "DELETE" : "ABANDON"

  dynamic "cmek_config" {
    for_each = var.kms_key_name == null ? [] : [var.kms_key_name]
    content {
      kms_key_name = cmek_config.value
    }
  }
}

resource "google_firestore_index" "failure_log" {
  for_each = merge(local.failure_log_indexes, local.failure_log_filter_indexes)

  project     = var.project_id
  database    = google_firestore_database.this.name
  collection  = var.failure_log_collection
  query_scope = "COLLECTION"

  dynamic "fields" {
    for_each = each.value
    content {
      field_path = fields.value.field
      order      = fields.value.order
    }
  }
}

resource "google_firestore_field" "ttl" {
  for_each = var.ttl_collections

  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = each.value
  field      = var.ttl_field

  # Nothing queries by the expiry time; an index on a monotonically
  # increasing timestamp would only add a write hot spot.
  index_config {}

  ttl_config {}
}

# Fields of the hourly metrics shards (dlq-metrics/{hour}/shards/{n};
# docs/storage.md) that are read whole and never queried: the tenant
# counters (tenants.<tenant>.…, read by reconcile) and the predictions'
# death cells (predict_deaths.<day>/<cell>.<reason>, read by the learner).
# Indexed, every tenant would add about twenty index entries to each shard
# (towards Firestore's 40 000 per document) and every cell a death counts
# in more, each to every write. The day rollups' shards
# (dlq-rollups/{day}/shards/{n}) are read whole too: their hourly rows
# (hours.<hh>.…, some 500 fields a day) would be as many index entries.
resource "google_firestore_field" "shards_unindexed" {
  for_each = toset(["tenants", "predict_deaths", "outcomes", "hours"])

  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "shards"
  field      = each.key

  index_config {}
}

moved {
  from = google_firestore_field.metrics_tenants
  to   = google_firestore_field.shards_unindexed["tenants"]
}
