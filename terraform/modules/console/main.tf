# The console (cmd/console, docs/console.md): one image, two Cloud Run
# services, one service account.
#
# - <name>: the operator UI (CONSOLE_SERVE=ui). IAP is enabled on the
#   service itself, so the run.app URL is reachable only through IAP, by
#   the viewers, operators and approvers; the console verifies IAP's signed
#   header in code as well (CONSOLE_AUTH=iap, CONSOLE_IAP_AUDIENCE) and
#   gives each identity its role from the same lists (CONSOLE_VIEWERS,
#   CONSOLE_OPERATORS, CONSOLE_APPROVERS).
# - <name>-api: the tenant recovery API (CONSOLE_SERVE=api). Tenants are
#   not Google identities: each request carries a tenant key the console
#   checks against Firestore (or, on the triage endpoint, a triage agent's
#   Google ID token it verifies: triage_agents), so Cloud Run's invoker
#   check is turned off for this service (invoker_iam_disabled) instead of
#   granting run.invoker
#   to allUsers. It serves no operator page.
#
# Each service answers requests for its own URL only (CONSOLE_URLS, the
# deterministic run.app URL the root passes in urls): a request for another
# Host, the generated *.a.run.app one included, is answered 421.
#
# The console keeps no state of its own: approvals live in Firestore and
# Cloud Tasks, and so does every bulk redrive (its filter, plan, cursor,
# counters and lease). But the UI service runs the bulk runner, which works
# between requests (one action per 1/rate seconds, for minutes), so it
# keeps CPU allocated all the time (cpu_idle = false) and at least
# ui_min_instances instance warm: with request-based CPU an idle instance
# is throttled to nearly nothing and a run would crawl until the next page
# view. Another instance (or a restarted one) takes a run over once its
# lease expires. The tenant API runs no runner and scales to zero.

locals {
  services = merge(
    {
      ui = {
        name = var.name
        env = {
          CONSOLE_SERVE        = "ui"
          CONSOLE_AUTH         = "iap"
          CONSOLE_IAP_AUDIENCE = "/projects/${var.project_number}/locations/${var.region}/services/${var.name}"
          CONSOLE_VIEWERS      = join(",", sort(var.viewers))
          CONSOLE_OPERATORS    = join(",", sort(var.operators))
          CONSOLE_APPROVERS    = join(",", sort(var.approvers))
          CONSOLE_URLS         = var.urls.ui
        }
        iap           = true
        cpu_idle      = false
        min_instances = var.ui_min_instances
      }
    },
    var.tenant_api_enabled ? {
      api = {
        name = "${var.name}-api"
        # The triage endpoint's callers (docs/console.md): their ID tokens'
        # audience defaults to the API's URL, CONSOLE_URLS.
        env = merge({ CONSOLE_SERVE = "api", CONSOLE_URLS = var.urls.api },
        length(var.triage_agents) > 0 ? { CONSOLE_TRIAGE_AGENTS = join(",", sort(var.triage_agents)) } : {})
        iap           = false
        cpu_idle      = true
        min_instances = 0
      }
    } : {},
  )
}

resource "google_service_account" "console" {
  project      = var.project_id
  account_id   = var.service_account_id
  display_name = "jsdlq console (operator UI and tenant API)"
  description  = "Runtime identity of the jsdlq console services: Firestore user, schedules and runs replay tasks on the replay queue."
}

resource "google_cloud_run_v2_service" "console" {
  for_each = local.services

  project             = var.project_id
  location            = var.region
  name                = each.value.name
  ingress             = "INGRESS_TRAFFIC_ALL"
  deletion_protection = var.deletion_protection
  labels              = var.labels

  # IAP directly on a Cloud Run service is a preview feature of the Cloud
  # Run Admin API; the tenant API uses GA features only.
  launch_stage         = each.value.iap ? "BETA" : null
  iap_enabled          = each.value.iap
  invoker_iam_disabled = !each.value.iap

  template {
    service_account                  = google_service_account.console.email
    max_instance_request_concurrency = 40
    timeout                          = "60s"

    scaling {
      min_instance_count = each.value.min_instances
      max_instance_count = var.max_instances
    }

    containers {
      name  = "console"
      image = var.image

      ports {
        container_port = var.container_port
      }

      resources {
        cpu_idle          = each.value.cpu_idle
        startup_cpu_boost = true
        limits = {
          cpu    = var.cpu
          memory = var.memory
        }
      }

      dynamic "env" {
        for_each = merge(var.environment, each.value.env)
        content {
          name  = env.key
          value = env.value
        }
      }

      startup_probe {
        period_seconds    = 3
        timeout_seconds   = 2
        failure_threshold = 20
        http_get {
          path = "/healthz"
          port = var.container_port
        }
      }
    }
  }
}
