# Log-based metrics, alert policies and the dashboard. Everything here reads
# structured logs the components already write (obs JSON on stdout), so no
# component needs a metrics client:
#   reconcile: severity ERROR, jsonPayload.alert = <alert name>
#   classify:  jsonPayload.event = entry_created, with category/reason_code/action
#   replay:    jsonPayload.event = replay_outcome, with outcome
#   bridge:    jsonPayload.event = bridge_stats, with lag (pending advisories)

locals {
  run = "resource.type=\"cloud_run_revision\""

  # The log lines of each component's Cloud Run service (the bridge's when
  # it is deployed); the metrics below narrow them down.
  service_logs = { for k, s in merge(var.function_services, { bridge = var.bridge_service }) :
    k => "${local.run} AND resource.labels.service_name=\"${s}\"" if s != null
  }

  # The time series of each log-based metric, by metric key; the alerts and
  # the dashboard all read them through this.
  metric_filter = { for k, m in merge(google_logging_metric.counter, { for m in google_logging_metric.bridge_lag : "bridge_lag" => m }) :
    k => "metric.type=\"logging.googleapis.com/user/${m.name}\" AND ${local.run}"
  }

  # The counters: log lines of one kind, by the labels extracted from them
  # (label => [field, description]). Each is the metric <prefix>_<key>.
  counters = {
    reconcile_alerts = {
      description = "Alerts raised by reconcile, by alert name."
      filter      = "${local.service_logs.reconcile} AND severity>=ERROR AND jsonPayload.alert:*"
      labels = {
        alert = ["jsonPayload.alert", "Stable alert name (jsonPayload.alert)."]
      }
    }
    function_errors = {
      description = "ERROR log entries of the jsdlq functions other than reconcile alerts, by function."
      filter      = "${local.run} AND resource.labels.service_name=(${join(" OR ", [for s in values(var.function_services) : "\"${s}\""])}) AND severity>=ERROR AND NOT jsonPayload.alert:*"
      labels = {
        service = ["resource.labels.service_name", "Function (Cloud Run service) name."]
      }
    }
    entries = {
      description = "New failure-log entries, by category, reason code, action and agent."
      filter      = "${local.service_logs.classify} AND jsonPayload.event=\"${var.log_events.entry_created}\""
      labels = {
        category    = ["jsonPayload.category", "Failure category (docs/policy.md)."]
        reason_code = ["jsonPayload.reason_code", "Reason code (docs/policy.md)."]
        action      = ["jsonPayload.action", "Triage action."]
        agent       = ["jsonPayload.agent", "The agent whose task died (the entry's agent)."]
      }
    }
    replay_outcomes = {
      description = "Replay attempts, by outcome."
      filter      = "${local.service_logs.replay} AND jsonPayload.event=\"${var.log_events.replay_outcome}\""
      labels = {
        outcome = ["jsonPayload.outcome", "replayed, recovered, held, awaiting_approval, skipped, failed, …"]
      }
    }
  }
}

resource "google_logging_metric" "counter" {
  for_each = local.counters

  project     = var.project_id
  name        = "${var.name_prefix}_${each.key}"
  description = each.value.description
  filter      = each.value.filter

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"
    dynamic "labels" {
      for_each = each.value.labels
      content {
        key         = labels.key
        value_type  = "STRING"
        description = labels.value[1]
      }
    }
  }

  label_extractors = { for k, l in each.value.labels : k => "EXTRACT(${l[0]})" }
}

moved {
  from = google_logging_metric.reconcile_alerts
  to   = google_logging_metric.counter["reconcile_alerts"]
}

moved {
  from = google_logging_metric.function_errors
  to   = google_logging_metric.counter["function_errors"]
}

moved {
  from = google_logging_metric.entries
  to   = google_logging_metric.counter["entries"]
}

moved {
  from = google_logging_metric.replay_outcomes
  to   = google_logging_metric.counter["replay_outcomes"]
}

resource "google_logging_metric" "bridge_lag" {
  count = var.bridge_service == null ? 0 : 1

  project         = var.project_id
  name            = "${var.name_prefix}_bridge_lag"
  description     = "Advisories and records waiting in JetStream for the bridge."
  filter          = "${local.service_logs.bridge} AND jsonPayload.event=\"${var.log_events.bridge_stats}\""
  value_extractor = "EXTRACT(jsonPayload.lag)"

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "DISTRIBUTION"
    unit        = "1"
  }

  bucket_options {
    exponential_buckets {
      num_finite_buckets = 20
      growth_factor      = 2
      scale              = 1
    }
  }
}

locals {
  # Alerts on a counter's sum over 5 minutes: one per reconcile alert (a
  # single line fires it), and function_errors (more than the threshold
  # errors of one function).
  threshold_alerts = merge(
    { for k, a in var.reconcile_alerts : k => {
      severity  = a.severity
      labels    = { component = "reconcile", alert = k }
      condition = k
      filter    = "${local.metric_filter.reconcile_alerts} AND metric.label.alert=\"${k}\""
      threshold = 0
      group_by  = null
      subject   = "jsdlq reconcile alert ${k}"
      content   = "${a.documentation}\n\nThe full report is the latest document in Firestore `dlq-audits`; the log entry with `jsonPayload.alert=\"${k}\"` names the tenant or entry."
    } },
    {
      function_errors = {
        severity  = "ERROR"
        labels    = { alert = "function_errors" }
        condition = "function ERROR log entries"
        filter    = local.metric_filter.function_errors
        threshold = var.function_error_threshold
        group_by  = ["metric.label.service"]
        subject   = "jsdlq function errors"
        content   = "A jsdlq function logged more than ${var.function_error_threshold} errors in 5 minutes. Classify errors mean Pub/Sub redelivers and, after the configured attempts, dead-letters events; replay errors mean Cloud Tasks retries."
      }
    },
  )
}

resource "google_monitoring_alert_policy" "threshold" {
  for_each = local.threshold_alerts

  project               = var.project_id
  display_name          = "${var.name_prefix}: ${each.key}"
  combiner              = "OR"
  severity              = each.value.severity
  notification_channels = var.notification_channels
  user_labels           = each.value.labels

  conditions {
    display_name = each.value.condition
    condition_threshold {
      filter          = each.value.filter
      comparison      = "COMPARISON_GT"
      threshold_value = each.value.threshold
      duration        = "0s"

      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_SUM"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = each.value.group_by
      }

      trigger {
        count = 1
      }
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  documentation {
    subject   = each.value.subject
    content   = each.value.content
    mime_type = "text/markdown"
  }
}

moved {
  from = google_monitoring_alert_policy.reconcile
  to   = google_monitoring_alert_policy.threshold
}

moved {
  from = google_monitoring_alert_policy.function_errors
  to   = google_monitoring_alert_policy.threshold["function_errors"]
}

resource "google_monitoring_alert_policy" "bridge_silent" {
  count = var.bridge_service == null ? 0 : 1

  project               = var.project_id
  display_name          = "${var.name_prefix}: bridge_silent"
  combiner              = "OR"
  severity              = "CRITICAL"
  notification_channels = var.notification_channels
  user_labels = {
    component = "bridge"
    alert     = "bridge_silent"
  }

  conditions {
    display_name = "no bridge stats for ${var.bridge_silence_minutes} minutes"
    condition_absent {
      filter   = local.metric_filter.bridge_lag
      duration = "${var.bridge_silence_minutes * 60}s"

      aggregations {
        alignment_period   = "300s"
        per_series_aligner = "ALIGN_COUNT"
      }
    }
  }

  documentation {
    subject   = "jsdlq bridge silent"
    content   = "The bridge has not reported for ${var.bridge_silence_minutes} minutes: dead messages are piling up in JetStream (nothing is lost while the advisory stream holds them). Check the Cloud Run service and its NATS connection."
    mime_type = "text/markdown"
  }
}

locals {
  # The counters summed per period: the hourly counts stacked by the label
  # that says what they are, the function errors as a line per function.
  counter_tiles = [
    for t in [
      { title = "Dead-letter entries per category (per hour)", counter = "entries", label = "category", plot = "STACKED_BAR", period = "3600s" },
      { title = "Dead tasks per agent (per hour)", counter = "entries", label = "agent", plot = "STACKED_BAR", period = "3600s" },
      { title = "Replay outcomes (per hour)", counter = "replay_outcomes", label = "outcome", plot = "STACKED_BAR", period = "3600s" },
      { title = "Reconcile alerts (per hour)", counter = "reconcile_alerts", label = "alert", plot = "STACKED_BAR", period = "3600s" },
      { title = "Function errors (per 5 minutes)", counter = "function_errors", label = "service", plot = "LINE", period = "300s" },
      ] : {
      title = t.title
      dataSets = [{
        plotType = t.plot
        timeSeriesQuery = {
          timeSeriesFilter = {
            filter = local.metric_filter[t.counter]
            aggregation = {
              alignmentPeriod    = t.period
              perSeriesAligner   = "ALIGN_SUM"
              crossSeriesReducer = "REDUCE_SUM"
              groupByFields      = ["metric.label.${t.label}"]
            }
          }
        }
      }]
    }
  ]

  tiles = concat(
    local.counter_tiles,
    [
      {
        title = "Pub/Sub backlog: classify and dead-letter subscriptions"
        dataSets = [{
          plotType = "LINE"
          timeSeriesQuery = {
            timeSeriesFilter = {
              filter = "metric.type=\"pubsub.googleapis.com/subscription/num_undelivered_messages\" AND resource.type=\"pubsub_subscription\" AND resource.labels.subscription_id=(\"${var.classify_subscription}\" OR \"${var.dead_letter_subscription}\")"
              aggregation = {
                alignmentPeriod    = "60s"
                perSeriesAligner   = "ALIGN_MAX"
                crossSeriesReducer = "REDUCE_MAX"
                groupByFields      = ["resource.label.subscription_id"]
              }
            }
          }
        }]
      },
      {
        title = "Replay queue depth"
        dataSets = [{
          plotType = "LINE"
          timeSeriesQuery = {
            timeSeriesFilter = {
              filter = "metric.type=\"cloudtasks.googleapis.com/queue/depth\" AND resource.type=\"cloud_tasks_queue\" AND resource.labels.queue_id=\"${var.queue_name}\""
              aggregation = {
                alignmentPeriod  = "60s"
                perSeriesAligner = "ALIGN_MAX"
              }
            }
          }
        }]
      },
    ],
    var.bridge_service == null ? [] : [
      {
        title = "Bridge lag (advisories and records waiting, p50 / p99)"
        dataSets = [for p in ["50", "99"] : {
          plotType       = "LINE"
          legendTemplate = "p${p}"
          timeSeriesQuery = {
            timeSeriesFilter = {
              filter = local.metric_filter.bridge_lag
              aggregation = {
                alignmentPeriod  = "60s"
                perSeriesAligner = "ALIGN_PERCENTILE_${p}"
              }
            }
          }
        }]
      },
    ],
  )
}

resource "google_monitoring_dashboard" "jsdlq" {
  project = var.project_id
  dashboard_json = jsonencode({
    displayName = "${var.name_prefix}: dead-letter triage and replay"
    mosaicLayout = {
      columns = 12
      tiles = [for i, t in local.tiles : {
        xPos   = (i % 2) * 6
        yPos   = floor(i / 2) * 4
        width  = 6
        height = 4
        widget = {
          title   = t.title
          xyChart = { dataSets = t.dataSets }
        }
      }]
    }
  })
}
