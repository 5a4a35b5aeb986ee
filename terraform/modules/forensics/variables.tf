variable "project_id" {
  type        = string
  description = "Project of the topic, the dataset and the subscription."
}

variable "topic_name" {
  type        = string
  description = "Topic the change feed is published to (CHANGES_TOPIC)."

  validation {
    condition     = can(regex("^[A-Za-z][A-Za-z0-9._~%+-]{2,254}$", var.topic_name)) && !startswith(var.topic_name, "goog")
    error_message = "topic_name must be a valid Pub/Sub topic name."
  }
}

variable "dataset_id" {
  type        = string
  description = "BigQuery dataset of the warehouse; the documented queries name it jsdlq_forensics."
  default     = "jsdlq_forensics"

  validation {
    condition     = can(regex("^[A-Za-z_][A-Za-z0-9_]*$", var.dataset_id)) && length(var.dataset_id) <= 1024
    error_message = "dataset_id must be letters, digits and underscores, starting with a letter or underscore."
  }
}

variable "location" {
  type        = string
  description = "BigQuery location of the dataset (a region such as europe-west1, or a multi-region such as EU)."
}

variable "retention_days" {
  type        = number
  description = "Days a row is kept (the table's partition expiration): longer than any entry's retention, so the archive outlives the working set."
  default     = 400

  validation {
    condition     = var.retention_days >= 31 && var.retention_days == floor(var.retention_days)
    error_message = "retention_days must be a whole number of days, at least 31 (the entries live 30 days by default)."
  }
}

variable "message_retention" {
  type        = string
  description = "How long the topics and subscriptions keep messages (at most 31 days, 2678400s): how long the table may be unwritable without losing rows."
}

variable "publisher_members" {
  type        = map(string)
  description = "Members (serviceAccount:...) that publish the feed (the outbox's flushers), keyed by component."
  default     = {}

  validation {
    condition     = alltrue([for m in values(var.publisher_members) : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "publisher_members must name service accounts, never allUsers or allAuthenticatedUsers."
  }
}

variable "reader_members" {
  type        = map(string)
  description = "Members (user:, group:, serviceAccount:) that read the warehouse (roles/bigquery.dataViewer on the dataset), keyed by a name."
  default     = {}

  validation {
    condition     = alltrue([for m in values(var.reader_members) : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "reader_members must name identities, never allUsers or allAuthenticatedUsers."
  }
}

variable "pubsub_service_agent" {
  type        = string
  description = "Pub/Sub's service agent (serviceAccount:service-NUMBER@gcp-sa-pubsub.iam.gserviceaccount.com), which writes the BigQuery subscription's rows."

  validation {
    condition     = can(regex("^serviceAccount:service-[0-9]+@gcp-sa-pubsub\\.iam\\.gserviceaccount\\.com$", var.pubsub_service_agent))
    error_message = "pubsub_service_agent must be the project's Pub/Sub service agent."
  }
}

variable "deletion_protection" {
  type        = bool
  description = "Whether Terraform refuses to delete the table (and with it the archive)."
  default     = true
}

variable "labels" {
  type        = map(string)
  description = "Labels on the topics, subscriptions, dataset and tables."
  default     = {}
}

variable "kms_key_name" {
  type        = string
  description = "Customer-managed key (CMEK) that encrypts the topics' messages; Pub/Sub's service agent must be able to use it. null: Google-managed encryption."
  default     = null

  validation {
    condition     = var.kms_key_name == null || can(regex("^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$", var.kms_key_name))
    error_message = "kms_key_name must be a CryptoKey's name, projects/P/locations/L/keyRings/R/cryptoKeys/K, or null."
  }
}
