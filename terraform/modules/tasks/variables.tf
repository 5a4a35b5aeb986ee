variable "project_id" {
  type        = string
  description = "Project of the queue."
}

variable "region" {
  type        = string
  description = "Location of the queue."
}

variable "queue" {
  type = object({
    name                      = string
    max_dispatches_per_second = number
    max_concurrent_dispatches = number
    max_attempts              = number
    min_backoff               = string
    max_backoff               = string
    max_doublings             = number
    max_retry_duration        = string
  })
  description = "The queue: its name (Cloud Tasks keeps a deleted queue's name reserved for about 7 days, so a destroy+apply needs a new name or a wait), its rate (dispatches per second, at most 500; in flight at once) and its retry config (attempts per task, -1 unlimited; backoffs and the retry span as durations in seconds such as \"10s\", a span of \"0s\" meaning no limit)."

  validation {
    condition     = can(regex("^[A-Za-z0-9-]{1,100}$", var.queue.name))
    error_message = "queue.name must be 1-100 letters, digits or hyphens."
  }
  validation {
    condition     = var.queue.max_dispatches_per_second > 0 && var.queue.max_dispatches_per_second <= 500
    error_message = "queue.max_dispatches_per_second must be in (0, 500]."
  }
  validation {
    condition     = var.queue.max_concurrent_dispatches >= 1 && var.queue.max_concurrent_dispatches <= 5000
    error_message = "queue.max_concurrent_dispatches must be between 1 and 5000."
  }
  validation {
    condition     = var.queue.max_attempts == -1 || (var.queue.max_attempts >= 1 && var.queue.max_attempts <= 100)
    error_message = "queue.max_attempts must be -1 (unlimited) or between 1 and 100."
  }
  validation {
    condition     = alltrue([for d in [var.queue.min_backoff, var.queue.max_backoff] : can(regex("^[0-9]+(\\.[0-9]+)?s$", d))])
    error_message = "queue.min_backoff and queue.max_backoff must be durations in seconds such as \"10s\"."
  }
  validation {
    condition     = var.queue.max_doublings >= 0 && var.queue.max_doublings <= 16
    error_message = "queue.max_doublings must be between 0 and 16."
  }
  validation {
    condition     = can(regex("^[0-9]+s$", var.queue.max_retry_duration))
    error_message = "queue.max_retry_duration must be a duration in whole seconds such as \"86400s\"."
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
