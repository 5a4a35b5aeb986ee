variable "project_id" {
  type        = string
  description = "Project of the function."
}

variable "region" {
  type        = string
  description = "Region of the function."
}

variable "name" {
  type        = string
  description = "Function name; also the name of its Cloud Run service and the first label of its run.app URL (the root's <name_prefix>-<function>: name_prefix's rule keeps it valid)."
}

variable "description" {
  type        = string
  description = "What the function does."
}

variable "entry_point" {
  type        = string
  description = "Name registered with the Functions Framework in the deploy root (Classify, Replay, Reconcile or Deliver)."
}

variable "runtime" {
  type        = string
  description = "Cloud Run functions Go runtime id."
}

variable "source_bucket" {
  type        = string
  description = "Bucket holding the source bundle."
}

variable "source_object" {
  type        = string
  description = "Object name of the source bundle; a new name redeploys."
}

variable "build_service_account_id" {
  type        = string
  description = "Full id (projects/P/serviceAccounts/EMAIL) of the service account Cloud Build runs as."
}

variable "docker_repository" {
  type        = string
  description = "Artifact Registry repository (projects/P/locations/L/repositories/R) that receives the built image."
}

variable "service_account_email" {
  type        = string
  description = "Runtime identity of the function."
}

variable "environment" {
  type        = map(string)
  description = "Runtime environment variables (docs/configuration.md)."
  default     = {}
}

variable "secret_files" {
  type = map(object({
    secret  = string
    version = string
    path    = string
  }))
  description = "Secrets mounted as files, keyed by mount directory: { \"/etc/secrets/nats\" = { secret = \"jsdlq-nats-creds\", version = \"latest\", path = \"nats.creds\" } }."
  default     = {}
}

variable "settings" {
  type = object({
    memory          = optional(string, "256Mi")
    timeout_seconds = optional(number, 60)
    min_instances   = optional(number, 0)
    max_instances   = optional(number, 10)
    concurrency     = optional(number, 1)
  })
  description = "Sizing: memory per instance (e.g. 256Mi), request timeout in seconds, instances kept warm, upper bound on instances, concurrent requests per instance. Fields left out or null take the defaults here (256Mi, 60 s, 0-10 instances, concurrency 1)."
  default     = {}
  nullable    = false
}

variable "ingress" {
  type        = string
  description = "Ingress setting: ALLOW_ALL, ALLOW_INTERNAL_ONLY or ALLOW_INTERNAL_AND_GCLB. Authentication is always required; no binding grants allUsers."
}

variable "invoker_members" {
  type        = map(string)
  description = "The only identities allowed to call the function (roles/run.invoker on its Cloud Run service), keyed by a static name."
}

variable "labels" {
  type        = map(string)
  description = "Labels for the function."
  default     = {}
}
