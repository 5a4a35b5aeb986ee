variable "project_id" {
  type        = string
  description = "Project of the queue."
}

variable "region" {
  type        = string
  description = "Location of the queue."
}

variable "queue_name" {
  type        = string
  description = "Queue name. Cloud Tasks keeps a deleted queue's name reserved for about 7 days, so a destroy+apply needs a new name or a wait."
  default     = "dlq-replay"

  validation {
    condition     = can(regex("^[A-Za-z0-9-]{1,100}$", var.queue_name))
    error_message = "queue_name must be 1-100 letters, digits or hyphens."
  }
}

variable "max_dispatches_per_second" {
  type        = number
  description = "Rate at which replays are dispatched (Cloud Tasks allows up to 500/s per queue)."
  default     = 10

  validation {
    condition     = var.max_dispatches_per_second > 0 && var.max_dispatches_per_second <= 500
    error_message = "max_dispatches_per_second must be in (0, 500]."
  }
}

variable "max_concurrent_dispatches" {
  type        = number
  description = "Replays in flight at once."
  default     = 20

  validation {
    condition     = var.max_concurrent_dispatches >= 1 && var.max_concurrent_dispatches <= 5000
    error_message = "max_concurrent_dispatches must be between 1 and 5000."
  }
}

variable "max_attempts" {
  type        = number
  description = "Attempts per replay task (replay answers 5xx only for transient errors); -1 means unlimited."
  default     = 10

  validation {
    condition     = var.max_attempts == -1 || (var.max_attempts >= 1 && var.max_attempts <= 100)
    error_message = "max_attempts must be -1 (unlimited) or between 1 and 100."
  }
}

variable "min_backoff" {
  type        = string
  description = "Shortest wait before retrying a failed dispatch, e.g. \"10s\"."
  default     = "10s"

  validation {
    condition     = can(regex("^[0-9]+(\\.[0-9]+)?s$", var.min_backoff))
    error_message = "min_backoff must be a duration in seconds such as \"10s\"."
  }
}

variable "max_backoff" {
  type        = string
  description = "Longest wait before retrying a failed dispatch, e.g. \"600s\"."
  default     = "600s"

  validation {
    condition     = can(regex("^[0-9]+(\\.[0-9]+)?s$", var.max_backoff))
    error_message = "max_backoff must be a duration in seconds such as \"600s\"."
  }
}

variable "max_doublings" {
  type        = number
  description = "Times the retry interval doubles before growing linearly."
  default     = 5

  validation {
    condition     = var.max_doublings >= 0 && var.max_doublings <= 16
    error_message = "max_doublings must be between 0 and 16."
  }
}

variable "max_retry_duration" {
  type        = string
  description = "Give up retrying a task after this long (\"0s\" = no limit)."
  default     = "86400s"

  validation {
    condition     = can(regex("^[0-9]+s$", var.max_retry_duration))
    error_message = "max_retry_duration must be a duration in seconds such as \"86400s\"."
  }
}

variable "log_sampling_ratio" {
  type        = number
  description = "Fraction of task operations Cloud Tasks logs (0 to 1)."
  default     = 1

  validation {
    condition     = var.log_sampling_ratio >= 0 && var.log_sampling_ratio <= 1
    error_message = "log_sampling_ratio must be between 0 and 1."
  }
}

variable "task_service_account_id" {
  type        = string
  description = "Full id (projects/P/serviceAccounts/EMAIL) of the account whose OIDC token the replay tasks carry."
}

variable "enqueuer_members" {
  type        = map(string)
  description = "Members that create replay tasks (classify, reconcile) and therefore act as the task service account, keyed by a static name."
}

variable "auditor_members" {
  type        = map(string)
  description = "Members that list and delete tasks to reconcile them with Firestore (reconcile), keyed by a static name."
}
