variable "project_id" {
  type        = string
  description = "Project whose logs and metrics are watched."
}

variable "name_prefix" {
  type        = string
  description = "Prefix of metric, policy and dashboard names."
}

variable "function_services" {
  type        = map(string)
  description = "Cloud Run service name of each function, by function (classify, replay, reconcile, deliver: the webhook deliveries). Every function's ERROR lines count in function_errors, so a function added to the root reaches the alert without a change here."

  validation {
    condition     = alltrue([for k in ["classify", "replay", "reconcile"] : contains(keys(var.function_services), k)])
    error_message = "function_services must name the classify, replay and reconcile services (their log lines feed the metrics)."
  }
}

variable "bridge_service" {
  type        = string
  description = "Cloud Run service name of the bridge; null when the bridge is not deployed (no bridge alert)."
  default     = null
}

variable "classify_subscription" {
  type        = string
  description = "Push subscription feeding classify (backlog on the dashboard)."
}

variable "dead_letter_subscription" {
  type        = string
  description = "Subscription of the dead-letter topic (its backlog means events classify never took)."
}

variable "queue_name" {
  type        = string
  description = "Cloud Tasks replay queue (depth on the dashboard)."
}

variable "reconcile_alerts" {
  type = map(object({
    severity      = string
    documentation = string
  }))
  description = "Alerts reconcile logs as ERROR entries with jsonPayload.alert = <key> (docs/reconcile.md); one alert policy each, named after the key."
  default = {
    advisory_entry_mismatch   = { severity = "ERROR", documentation = "Advisories/records captured in JetStream and entries in failure-log disagree: a dead message may be lost between the bridge and classify. Check the bridge, the classify subscription backlog and its dead-letter subscription." }
    missing_task              = { severity = "WARNING", documentation = "A scheduled entry had no Cloud Tasks task; reconcile recreated it. Repeated alerts point at classify failing after the Firestore transaction." }
    orphan_task               = { severity = "WARNING", documentation = "A replay task exists without a scheduled entry; reconcile deleted it." }
    stuck_replaying           = { severity = "ERROR", documentation = "Entries stayed in status replaying too long: a replay died between claim and publish. Inspect with dlqctl and the replay logs." }
    breaker_open_too_long     = { severity = "WARNING", documentation = "A tenant circuit breaker stayed open past its cool-down; reconcile moved it to half-open." }
    metric_drift              = { severity = "WARNING", documentation = "Hourly dlq-metrics totals disagreed with the entries; reconcile recomputed the hour." }
    tenant_poison_burst       = { severity = "ERROR", documentation = "A tenant produced more than 3 poison entries within an hour: its payloads or mappings are broken." }
    tenant_breaker_open_30m   = { severity = "ERROR", documentation = "A tenant's breaker has been open for more than 30 minutes; its replays are held." }
    tenant_recovery_below_80  = { severity = "WARNING", documentation = "A tenant's 24 h recovery rate is under 80 %." }
    tenant_dominates_traffic  = { severity = "WARNING", documentation = "One tenant produced more than 40 % of all entries in the last hour." }
    notifications_unpublished = { severity = "WARNING", documentation = "reconcile could not publish notifications to dlq-notifications or triage tasks to the work stream; they stay in the notifications outbox and the next run retries them. See the report's notifications section for the causes (topic IAM, JetStream reachability)." }
    agent_dead_per_hour       = { severity = "WARNING", documentation = "One agent had more dead tasks within a clock hour than the triage policy's threshold for it (alerts.agent_dead_per_hour, default 50; alerts_by_agent overrides it per agent). The log entry's jsonPayload.agent names the agent. Check its recent entries (dlqctl ls --agent A --since 1h) for one dominant reason code." }
    invalid_names             = { severity = "WARNING", documentation = "Dead tasks whose tenant, agent or task type breaks the naming rule (docs/contracts.md, Names) were recorded under the reserved tenant (invalid), flagged, with the names they carried. Nothing is lost: list them (dlqctl ls --tenant '(invalid)'), fix the publisher's headers, and approve or discard each entry (docs/runbook.md)." }
    capture_stream_filling    = { severity = "ERROR", documentation = "A capture stream (DLQ_ADVISORIES or DLQ_RECORDS) is at least 80 % full. When full it refuses new dead messages: agentkit's copy fails and the task is NAKed and kept in its work stream, but a server advisory is lost. The report's capture_streams section shows the fill, the bridge's backlog and the age of its oldest unforwarded message, and what reconcile trimmed. Check the bridge (running? lagging?), that reconcile may purge the streams ($JS.API.STREAM.PURGE), then raise the limits (advisory_stream_limits, record_stream_limits; nats stream edit for an existing stream) if the traffic outgrew them (docs/runbook.md)." }
    consumer_never_gives_up   = { severity = "WARNING", documentation = "A work stream's consumer has unlimited deliveries (max_deliver -1): a task that keeps failing is redelivered forever, never exhausts its deliveries, and never reaches the DLQ, so no entry, replay or alert ever reports it. The finding's examples name stream/consumer. Set max_deliver (3 in the field) and a backoff: nats consumer edit <stream> <consumer> --max-deliver 3 --backoff ... (docs/runbook.md)." }
    acks_without_outcome      = { severity = "ERROR", documentation = "In the last complete hour the work streams' consumers acknowledged more tasks than completions (agentkit.Once) and deaths (entries) were recorded, beyond the tolerance (RECONCILE_OUTCOME_TOLERANCE_PERCENT, RECONCILE_OUTCOME_MIN_GAP): tasks were acked without a recorded outcome, usually an agent that swallows an error and acks, or acks without Once. The report's traffic section has the hour's counts (hour_acked, hour_completed, hour_dead). Find the agent that acks on error (docs/runbook.md); the alert clears in the hour after it is fixed." }
    recovery_below_80         = { severity = "WARNING", documentation = "Fleet-wide, under 80 % of the entries settled in the last 24 hours recovered (the rest were discarded), from the resolution counters. The report's outcomes section has the figures per category and strategy (dlqctl stats, the console's overview); look for a category or strategy whose share fell." }
    replay_denial_rate        = { severity = "WARNING", documentation = "Of the replays claimed in the last 24 hours, more than 20 % were kept back by a gate (the current policy sent them to a human, or a tenant breaker held them). A policy change or a breaker storm is the usual cause: dlqctl breaker ls, dlqctl policy show." }
    unconsumed_messages       = { severity = "ERROR", documentation = "Work-stream messages sit on subjects no consumer's filter matches: nobody will ever run these tasks (reason consumer_filter_rejection). reconcile recorded each as an entry (payload kept) and left the message in the stream. Fix the publisher's subject or add a consumer for it; purge the subject once the entries are handled." }
  }

  validation {
    condition     = alltrue([for k, v in var.reconcile_alerts : can(regex("^[a-z][a-z0-9_]*$", k)) && contains(["CRITICAL", "ERROR", "WARNING"], v.severity)])
    error_message = "reconcile_alerts keys must be snake_case alert names and severities CRITICAL, ERROR or WARNING."
  }
}

variable "function_error_threshold" {
  type        = number
  description = "ERROR log entries per function within 5 minutes above which the function-errors alert fires."
}

variable "bridge_silence_minutes" {
  type        = number
  description = "Minutes without a bridge stats log line before the bridge_silent alert fires."
  default     = 15

  validation {
    condition     = var.bridge_silence_minutes >= 5 && var.bridge_silence_minutes <= 1440
    error_message = "bridge_silence_minutes must be between 5 and 1440."
  }
}

variable "notification_channels" {
  type        = list(string)
  description = "Monitoring notification channel ids (projects/P/notificationChannels/N) every alert notifies."
}

variable "log_events" {
  type = object({
    entry_created  = string
    replay_outcome = string
    bridge_stats   = string
  })
  description = "Values of jsonPayload.event that the components log: classify once per new entry (with category, reason_code, action), replay once per attempt (with outcome), the bridge periodically (with numeric lag). Log-based metrics count these lines."
  default = {
    entry_created  = "entry_created"
    replay_outcome = "replay_outcome"
    bridge_stats   = "bridge_stats"
  }
}
