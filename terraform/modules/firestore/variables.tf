variable "project_id" {
  type        = string
  description = "Project that holds the database."
}

variable "location_id" {
  type        = string
  description = "Firestore location (a region such as europe-west1, or a multi-region such as eur3 or nam5). Cannot change after creation."
}

variable "delete_on_destroy" {
  type        = bool
  description = "Whether `terraform destroy` deletes the database and all its data (true) or only forgets it (false)."
}

variable "delete_protection" {
  type        = bool
  description = "Whether Firestore refuses to delete the database (DELETE_PROTECTION_ENABLED). Turn off before destroying."
}

variable "failure_log_collection" {
  type        = string
  description = "Collection of dead-letter entries (docs/storage.md)."
  default     = "failure-log"
}

variable "ttl_collections" {
  type        = set(string)
  description = "Collection ids whose documents expire at their TTL field: failure-log after 30 days, its payload chunk subcollections (collection group payload) with their entry, task-idempotency after 72 h, the notifications outbox and the change feed's 7 days after a notification or row was published (30 days while pending), the predictions' task counts 3 days after their hour and daily statistics 21 days after their day. A TTL deletion of an entry does not delete its subcollections, hence payload's own policy."
  default     = ["failure-log", "payload", "task-idempotency", "notifications", "dlq-changes", "dlq-predict-counts", "dlq-predict-stats"]
}

variable "ttl_field" {
  type        = string
  description = "Timestamp field that the TTL policy deletes documents at."
  default     = "expire_at"

  validation {
    condition     = can(regex("^[A-Za-z_][A-Za-z0-9_]*$", var.ttl_field))
    error_message = "ttl_field must be a simple top-level field name."
  }
}

variable "user_members" {
  type        = map(string)
  description = "IAM members that read and write documents (roles/datastore.user), keyed by a static name (e.g. component) so the keys are known at plan time: { classify = \"serviceAccount:…\" }."
}

variable "restrict_users_to_database" {
  type        = bool
  description = "Add an IAM condition so roles/datastore.user only applies to this database, not to other databases of the project."
  default     = true
}

variable "kms_key_name" {
  type        = string
  description = "Customer-managed key (CMEK) the database is encrypted with, projects/P/locations/L/keyRings/R/cryptoKeys/K in the database's location (nam5: us, eur3: europe); Firestore's service agent must be able to use it. Set at creation only (changing it replaces the database). null: Google-managed encryption."
  default     = null

  validation {
    condition     = var.kms_key_name == null || can(regex("^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$", var.kms_key_name))
    error_message = "kms_key_name must be a CryptoKey's name, projects/P/locations/L/keyRings/R/cryptoKeys/K, or null."
  }
}
