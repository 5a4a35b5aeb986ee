variable "project_id" {
  type        = string
  description = "Project of the console services and their service account."
}

variable "project_number" {
  type        = string
  description = "Number of the project: IAP signs its assertions for /projects/NUMBER/locations/REGION/services/NAME, and its service agent is service-NUMBER@gcp-sa-iap.iam.gserviceaccount.com."

  validation {
    condition     = can(regex("^[0-9]+$", var.project_number))
    error_message = "project_number must be the project's number (digits), not its id."
  }
}

variable "region" {
  type        = string
  description = "Region of the Cloud Run services (the region of the replay queue is passed in queue_location)."
}

variable "name" {
  type        = string
  description = "Cloud Run service name of the operator UI; the tenant API is <name>-api (the root's <name_prefix>-console: name_prefix's rule keeps both valid)."
}

variable "service_account_id" {
  type        = string
  description = "account_id of the console's one service account (both services run as it; the root's <name_prefix>-console)."
}

variable "image" {
  type        = string
  description = "Container image of cmd/console (built from cmd/Dockerfile with SERVICE=console), preferably pinned by digest."
}

variable "viewers" {
  type        = set(string)
  description = "Principals of the console's viewer role (CONSOLE_VIEWERS): read every page, act on nothing. user:, group:, domain: or serviceAccount: members of the project's organization; each passes IAP to the UI (roles/iap.httpsResourceAccessor)."
  default     = []
}

variable "operators" {
  type        = set(string)
  description = "Principals of the console's operator role (CONSOLE_OPERATORS): replay now, discard, breakers, bulk redrives, approve where the rule grants operator. Each passes IAP to the UI."
  default     = []
}

variable "approvers" {
  type        = set(string)
  description = "Principals of the console's approver role (CONSOLE_APPROVERS): what operators do, and approve every rule's entries. Each passes IAP to the UI."
  default     = []

  validation {
    condition     = length(var.viewers) + length(var.operators) + length(var.approvers) > 0
    error_message = "viewers, operators or approvers must name someone: the console gives nobody else a role, and IAP lets nobody else in."
  }

  validation {
    condition = alltrue([for m in setunion(var.viewers, var.operators, var.approvers) :
    can(regex("^((user|group|serviceAccount):[^\\s,\"\\\\@]+@[^\\s,\"\\\\@]+|domain:[^\\s,\"\\\\@]+\\.[^\\s,\"\\\\@]+)$", m))])
    error_message = "viewers, operators and approvers must be user:EMAIL, group:EMAIL, serviceAccount:EMAIL or domain:DOMAIN principals."
  }
}

variable "ui_min_instances" {
  type        = number
  description = "Instances of the operator UI service always running, with CPU allocated outside requests: they run the bulk redrives (a run goes on between page views, and a run whose instance stopped is resumed by another once its lease expires)."
  default     = 1

  validation {
    condition     = var.ui_min_instances >= 1 && floor(var.ui_min_instances) == var.ui_min_instances
    error_message = "ui_min_instances must be a whole number of at least 1: with none, a confirmed bulk redrive waits for the next page view."
  }
}

variable "tenant_api_enabled" {
  type        = bool
  description = "Whether to deploy the tenant recovery API (<name>-api). It authenticates every request by a tenant key in code; Cloud Run's invoker check is off for it (invoker_iam_disabled), no allUsers binding is made."
}

variable "triage_agents" {
  type        = set(string)
  description = "Emails of the identities (service accounts) of the triage agents that answer triage tasks through the tenant API service's triage endpoint (CONSOLE_TRIAGE_AGENTS; docs/console.md, \"The triage endpoint\"): the console verifies their Google ID tokens, whose audience is the API's URL, in code. Empty: the endpoint is not served. Needs tenant_api_enabled."
  default     = []

  validation {
    condition     = alltrue([for e in var.triage_agents : can(regex("^[^\\s,\"\\\\@:]+@[^\\s,\"\\\\@]+\\.[^\\s,\"\\\\@]+$", e))])
    error_message = "triage_agents must be bare emails (ceo-agent@PROJECT.iam.gserviceaccount.com), not principals."
  }

  validation {
    condition     = length(var.triage_agents) == 0 || var.tenant_api_enabled
    error_message = "triage_agents needs tenant_api_enabled: the triage endpoint is a route of the tenant API service."
  }
}

variable "environment" {
  type        = map(string)
  description = "Environment both services share (docs/configuration.md): GOOGLE_CLOUD_PROJECT, TASKS_QUEUE, REPLAY_URL, TASKS_SERVICE_ACCOUNT. CONSOLE_SERVE, CONSOLE_AUTH, CONSOLE_IAP_AUDIENCE, CONSOLE_URLS and the role variables (CONSOLE_VIEWERS, CONSOLE_OPERATORS, CONSOLE_APPROVERS) are set by the module."

  validation {
    condition     = alltrue([for k in ["GOOGLE_CLOUD_PROJECT", "TASKS_QUEUE", "REPLAY_URL", "TASKS_SERVICE_ACCOUNT"] : contains(keys(var.environment), k)])
    error_message = "environment must set GOOGLE_CLOUD_PROJECT, TASKS_QUEUE, REPLAY_URL and TASKS_SERVICE_ACCOUNT."
  }

  validation {
    condition     = length(setintersection(keys(var.environment), ["PORT", "CONSOLE_SERVE", "CONSOLE_AUTH", "CONSOLE_IAP_AUDIENCE", "CONSOLE_URLS", "CONSOLE_VIEWERS", "CONSOLE_OPERATORS", "CONSOLE_APPROVERS", "CONSOLE_OPERATOR", "CONSOLE_ROLE", "CONSOLE_TRIAGE_AGENTS", "CONSOLE_TRIAGE_AUDIENCE", "CONSOLE_TRIAGE_AUTH", "FIRESTORE_EMULATOR_HOST", "CLOUD_TASKS_EMULATOR_HOST"])) == 0
    error_message = "environment must not set PORT (Cloud Run's), the CONSOLE_SERVE/CONSOLE_AUTH/CONSOLE_IAP_AUDIENCE/CONSOLE_URLS, role and triage agent variables the module sets (viewers, operators, approvers, triage_agents), CONSOLE_OPERATOR/CONSOLE_ROLE (local mode only) or emulator hosts."
  }
}

variable "urls" {
  type        = map(string)
  description = "The URL each service is reached at, by role (ui; api when tenant_api_enabled): its deterministic run.app URL. The service answers requests for this host only (CONSOLE_URLS; docs/console.md) and the outputs are these URLs."

  validation {
    condition     = contains(keys(var.urls), "ui") && alltrue([for u in values(var.urls) : can(regex("^https://[a-z0-9.-]+(:[0-9]+)?/?$", u))])
    error_message = "urls must name the ui service's URL (and the api's when it is deployed), each https://HOST[:PORT]."
  }
}

variable "queue_name" {
  type        = string
  description = "Short name of the replay queue (dlq-replay): the console runs (cloudtasks.taskRunner) and reads (cloudtasks.viewer) its tasks. Creating tasks (enqueuer + actAs) is granted by the tasks module."
}

variable "queue_location" {
  type        = string
  description = "Location of the replay queue."
}

variable "container_port" {
  type        = number
  description = "Port the console listens on; Cloud Run passes it as PORT."
  default     = 8070

  validation {
    condition     = var.container_port >= 1 && var.container_port <= 65535
    error_message = "container_port must be a port number."
  }
}

variable "max_instances" {
  type        = number
  description = "Upper bound on instances of each service. The console keeps no state of its own (Firestore and Cloud Tasks hold it), so any number serves."
}

variable "cpu" {
  type        = string
  description = "CPU limit per instance (allocated during requests only)."
  default     = "1"

  validation {
    condition     = contains(["1", "2", "4"], var.cpu)
    error_message = "cpu must be 1, 2 or 4."
  }
}

variable "memory" {
  type        = string
  description = "Memory limit per instance, e.g. 512Mi."
  default     = "512Mi"

  validation {
    condition     = can(regex("^[0-9]+(Mi|Gi)$", var.memory))
    error_message = "memory must look like 512Mi or 1Gi."
  }
}

variable "deletion_protection" {
  type        = bool
  description = "Whether Terraform refuses to delete the services."
}

variable "labels" {
  type        = map(string)
  description = "Labels for the services."
  default     = {}
}
