# The bridge: a long-running JetStream consumer, so at least one instance
# with CPU allocated all the time (cpu_idle = false) — with request-based
# CPU it would starve between health checks. Only Cloud Run's own probes
# reach it: ingress is internal and nobody holds run.invoker.

resource "google_cloud_run_v2_service" "bridge" {
  project             = var.project_id
  location            = var.region
  name                = var.name
  ingress             = "INGRESS_TRAFFIC_INTERNAL_ONLY"
  deletion_protection = var.deletion_protection
  labels              = var.labels

  template {
    service_account                  = var.service_account_email
    max_instance_request_concurrency = 10

    scaling {
      min_instance_count = var.min_instances
      max_instance_count = var.max_instances
    }

    containers {
      name  = "bridge"
      image = var.image

      ports {
        container_port = var.container_port
      }

      resources {
        cpu_idle          = false
        startup_cpu_boost = true
        limits = {
          cpu    = var.cpu
          memory = var.memory
        }
      }

      dynamic "env" {
        for_each = var.environment
        content {
          name  = env.key
          value = env.value
        }
      }

      # A volume is named after its file (nats.creds: nats-creds).
      dynamic "volume_mounts" {
        for_each = var.secret_files
        content {
          name       = replace(volume_mounts.value.path, ".", "-")
          mount_path = volume_mounts.key
        }
      }

      # /healthz is ready only while connected to NATS and able to publish.
      startup_probe {
        period_seconds    = 5
        timeout_seconds   = 3
        failure_threshold = 24
        http_get {
          path = "/healthz"
          port = var.container_port
        }
      }

      liveness_probe {
        period_seconds    = 30
        timeout_seconds   = 5
        failure_threshold = 4
        http_get {
          path = "/healthz"
          port = var.container_port
        }
      }
    }

    dynamic "volumes" {
      for_each = var.secret_files
      content {
        name = replace(volumes.value.path, ".", "-")
        secret {
          secret       = volumes.value.secret
          default_mode = 292 # 0444
          items {
            path    = volumes.value.path
            version = volumes.value.version
          }
        }
      }
    }
  }
}
