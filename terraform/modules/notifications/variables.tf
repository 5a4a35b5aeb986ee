variable "project_id" {
  type        = string
  description = "Project of the topic and subscription."
}

variable "topic_name" {
  type        = string
  description = "Topic the notifications outbox is published to (NOTIFICATIONS_TOPIC)."
}

variable "publisher_members" {
  type        = map(string)
  description = "Members (serviceAccount:...) that publish notifications, keyed by component."
  default     = {}

  validation {
    condition     = alltrue([for m in values(var.publisher_members) : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "publisher_members must name service accounts, never allUsers or allAuthenticatedUsers."
  }
}

variable "example_subscription" {
  type        = bool
  description = "Create the example subscription <topic>-operators with example_filter."
  default     = true
}

variable "example_filter" {
  type        = string
  description = "Filter of the example subscription, on the attributes kind, tenant and severity."
  default     = "attributes.severity = \"critical\" OR attributes.kind = \"escalated\""
}

variable "message_retention" {
  type        = string
  description = "How long the topic and subscription keep messages (at most 31 days, 2678400s)."
}

variable "labels" {
  type        = map(string)
  description = "Labels on the topic and subscription."
  default     = {}
}

variable "kms_key_name" {
  type        = string
  description = "Customer-managed key (CMEK) that encrypts the topic's messages; Pub/Sub's service agent must be able to use it. null: Google-managed encryption."
  default     = null

  validation {
    condition     = var.kms_key_name == null || can(regex("^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$", var.kms_key_name))
    error_message = "kms_key_name must be a CryptoKey's name, projects/P/locations/L/keyRings/R/cryptoKeys/K, or null."
  }
}
