variable "project_id" {
  type        = string
  description = "Project of the topics and subscriptions."
}

variable "project_number" {
  type        = string
  description = "Project number; names the Pub/Sub service agent (service-NUMBER@gcp-sa-pubsub.iam.gserviceaccount.com) that moves messages to the dead-letter topic."
}

variable "topic_name" {
  type        = string
  description = "Topic the bridge publishes dead-letter events to."
}

variable "dead_letter_topic_name" {
  type        = string
  description = "Topic receiving events classify failed to take after push.max_delivery_attempts."
}

variable "classify_subscription_name" {
  type        = string
  description = "Push subscription delivering dlq-events to classify."
}

variable "classify_push_endpoint" {
  type        = string
  description = "HTTPS URL of the classify function."
}

variable "classify_audience" {
  type        = string
  description = "Audience of the OIDC token Pub/Sub attaches to each push (the classify URL)."
}

variable "push_service_account_email" {
  type        = string
  description = "Identity whose OIDC token authenticates pushes to classify (it holds run.invoker on classify)."
}

variable "push" {
  type = object({
    ack_deadline_seconds  = number
    min_backoff_seconds   = number
    max_backoff_seconds   = number
    max_delivery_attempts = number
  })
  description = "The push to classify: how long Pub/Sub waits for classify to answer before redelivering, the shortest and longest delay before a failed push is retried (seconds; Pub/Sub allows 10-600) and the pushes of one event before Pub/Sub moves it to the dead-letter topic (5-100)."
}

variable "message_retention" {
  type        = string
  description = "How long the topics and the dead-letter subscription keep messages (at most 31 days, 2678400s)."
}

variable "publisher_members" {
  type        = map(string)
  description = "Members allowed to publish to the events topic (the bridge), keyed by a static name."
}

variable "labels" {
  type        = map(string)
  description = "Labels for topics and subscriptions."
  default     = {}
}

variable "kms_key_name" {
  type        = string
  description = "Customer-managed key (CMEK) that encrypts the messages of dlq-events and its dead-letter topic; Pub/Sub's service agent must be able to use it. null: Google-managed encryption."
  default     = null

  validation {
    condition     = var.kms_key_name == null || can(regex("^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$", var.kms_key_name))
    error_message = "kms_key_name must be a CryptoKey's name, projects/P/locations/L/keyRings/R/cryptoKeys/K, or null."
  }
}
