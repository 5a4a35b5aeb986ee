# One Cloud Run function (gen2). The same module deploys classify, replay,
# reconcile and deliver: they share the source bundle and differ in entry point,
# identity, environment and who may invoke them.

resource "google_cloudfunctions2_function" "this" {
  project     = var.project_id
  location    = var.region
  name        = var.name
  description = var.description
  labels      = var.labels

  build_config {
    runtime           = var.runtime
    entry_point       = var.entry_point
    service_account   = var.build_service_account_id
    docker_repository = var.docker_repository

    source {
      storage_source {
        bucket = var.source_bucket
        object = var.source_object
      }
    }
  }

  service_config {
    service_account_email            = var.service_account_email
    available_memory                 = var.settings.memory
    timeout_seconds                  = var.settings.timeout_seconds
    min_instance_count               = var.settings.min_instances
    max_instance_count               = var.settings.max_instances
    max_instance_request_concurrency = var.settings.concurrency
    ingress_settings                 = var.ingress
    all_traffic_on_latest_revision   = true
    environment_variables            = var.environment

    dynamic "secret_volumes" {
      for_each = var.secret_files
      content {
        mount_path = secret_volumes.key
        project_id = var.project_id
        secret     = secret_volumes.value.secret

        versions {
          version = secret_volumes.value.version
          path    = secret_volumes.value.path
        }
      }
    }
  }
}
