variable "project_id" {
  type        = string
  description = "Project of the service."
}

variable "region" {
  type        = string
  description = "Region of the service."
}

variable "name" {
  type        = string
  description = "Cloud Run service name (the root's <name_prefix>-bridge: name_prefix's rule keeps it valid)."
}

variable "image" {
  type        = string
  description = "Container image of cmd/bridge (built from cmd/Dockerfile with SERVICE=bridge), preferably pinned by digest."
}

variable "service_account_email" {
  type        = string
  description = "Runtime identity of the bridge (publisher on dlq-events, accessor of the NATS credentials)."
}

variable "environment" {
  type        = map(string)
  description = "Environment variables of the bridge (docs/configuration.md). PORT is set by Cloud Run from the container port."
  default     = {}

  validation {
    condition     = !contains(keys(var.environment), "PORT")
    error_message = "PORT is reserved by Cloud Run; set container_port instead."
  }
}

variable "container_port" {
  type        = number
  description = "Port of /healthz and /metrics; Cloud Run passes it to the bridge as PORT."
  default     = 8090
}

variable "secret_files" {
  type = map(object({
    secret  = string
    version = string
    path    = string
  }))
  description = "Secrets mounted read-only as files, keyed by mount directory, as for the function module: { \"/etc/secrets/nats\" = { secret = \"jsdlq-nats-creds\", version = \"latest\", path = \"nats.creds\" } }. Empty when NATS needs no credentials; the environment names the file (NATS_CREDS)."
}

variable "min_instances" {
  type        = number
  description = "Instances always running: the bridge is a long-running consumer, never scale it to zero."
}

variable "max_instances" {
  type        = number
  description = "Upper bound on instances (they share the durable pull consumer)."
}

variable "cpu" {
  type        = string
  description = "CPU limit per instance."
}

variable "memory" {
  type        = string
  description = "Memory limit per instance."
}

variable "deletion_protection" {
  type        = bool
  description = "Whether Terraform refuses to delete the service."
}

variable "labels" {
  type        = map(string)
  description = "Labels for the service."
  default     = {}
}
