variable "project_id" {
  type        = string
  description = "Project that holds the source bucket."
}

variable "region" {
  type        = string
  description = "Location of the source bucket (the functions' region)."
}

variable "bucket_name" {
  type        = string
  description = "Globally unique name of the bucket that stores function source bundles (the root validates source_bucket_name and derives the default from project_id and name_prefix)."
}

variable "source_dir" {
  type        = string
  description = "Directory to bundle: the repository root, whose package jsdlq is the deploy root (docs/architecture.md)."
}

variable "excludes" {
  type        = list(string)
  description = "Glob patterns (relative to source_dir) left out of the bundle: infrastructure, local tooling, docs, tests."
}

variable "output_dir" {
  type        = string
  description = "Local directory where the zip is written before upload (not committed)."
}

variable "force_destroy" {
  type        = bool
  description = "Whether `terraform destroy` deletes the bucket even though it still holds old source bundles."
}

variable "labels" {
  type        = map(string)
  description = "Labels for the bucket."
  default     = {}
}

variable "reader_members" {
  type        = map(string)
  description = "Members that read the bundles (the function build service account), keyed by a static name."
  default     = {}
}

variable "kms_key_name" {
  type        = string
  description = "Customer-managed key (CMEK) new objects of the bucket (the function bundles) are encrypted with by default, in the bucket's region; Cloud Storage's service agent must be able to use it. null: Google-managed encryption."
  default     = null

  validation {
    condition     = var.kms_key_name == null || can(regex("^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$", var.kms_key_name))
    error_message = "kms_key_name must be a CryptoKey's name, projects/P/locations/L/keyRings/R/cryptoKeys/K, or null."
  }
}
