terraform {
  # Ephemeral input variables and write-only attributes (the NATS
  # credentials never reach the state) need Terraform 1.11.
  required_version = ">= 1.11.0"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 7.0"
    }
    archive = {
      source  = "hashicorp/archive"
      version = "~> 2.8"
    }
  }
}

provider "google" {
  project        = var.project_id
  region         = var.region
  default_labels = local.labels
}
