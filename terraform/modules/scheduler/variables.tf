variable "project_id" {
  type        = string
  description = "Project of the job."
}

variable "region" {
  type        = string
  description = "Region of the job."
}

variable "job_name" {
  type        = string
  description = "Scheduler job name (the root's <name_prefix>-reconcile)."
}

variable "schedule" {
  type        = string
  description = "Cron schedule of the reconcile audit (unix-cron, five fields)."
}

variable "time_zone" {
  type        = string
  description = "Time zone the schedule is read in (tz database name)."
}

variable "target_uri" {
  type        = string
  description = "URL of the reconcile function."
}

variable "audience" {
  type        = string
  description = "Audience of the OIDC token (the reconcile URL; reconcile checks it as AUTH_AUDIENCE)."
}

variable "service_account_email" {
  type        = string
  description = "Identity whose OIDC token the job sends; it alone holds run.invoker on reconcile."
}

variable "attempt_deadline" {
  type        = string
  description = "How long one run may take before the scheduler counts it failed (15s-1800s: the root clamps reconcile's timeout into that range)."
}

variable "retry_count" {
  type        = number
  description = "Retries of a failed run (reconcile is idempotent; the next scheduled run also catches up)."
  default     = 1

  validation {
    condition     = var.retry_count >= 0 && var.retry_count <= 5
    error_message = "retry_count must be between 0 and 5."
  }
}
