// Package audit is the report of a reconcile run (docs/reconcile.md, "The
// report"): what reconcile stores in dlq-audits/{run_id} and answers with,
// what dlqctl audit and health print. It lives apart from the reconcile
// function so that its readers need not link the function.
package audit

import (
	"sort"
	"time"
)

// Schema names the report format; dlqctl audit prints reports of this schema.
const Schema = "jsdlq.audit.v1"

// Alert names (Terraform's monitoring module has a policy for each; its
// log-based metric reads jsonPayload.alert).
const (
	AlertAdvisoryEntryMismatch = "advisory_entry_mismatch"
	AlertMissingTask           = "missing_task"
	AlertOrphanTask            = "orphan_task"
	AlertStuckReplaying        = "stuck_replaying"
	AlertBreakerOpenTooLong    = "breaker_open_too_long"
	AlertMetricDrift           = "metric_drift"
	AlertTenantPoisonBurst     = "tenant_poison_burst"
	AlertTenantBreakerOpen30m  = "tenant_breaker_open_30m"
	AlertTenantRecoveryBelow80 = "tenant_recovery_below_80"
	AlertTenantDominates       = "tenant_dominates_traffic"
	// AlertUnconsumedMessages: work-stream messages on subjects no
	// consumer's filter matches; nobody will ever run these tasks.
	AlertUnconsumedMessages = "unconsumed_messages"
	// AlertAgentDeadPerHour: one agent had more dead tasks within a clock
	// hour than the policy's threshold for it (alerts.agent_dead_per_hour,
	// alerts_by_agent); one alert per agent (Finding.Agent).
	AlertAgentDeadPerHour = "agent_dead_per_hour"
	// AlertNotificationsUnpublished: notifications (and triage tasks) the
	// run could not publish; they stay in the outbox for the next run.
	AlertNotificationsUnpublished = "notifications_unpublished"
	// AlertInvalidNames: dead tasks whose names (tenant, agent, task type)
	// break the naming rule were recorded in the window under the
	// reserved tenant (event.ReservedTenant), flagged, for an operator.
	AlertInvalidNames = "invalid_names"
	// AlertCaptureStreamFilling: a capture stream (advisories, records) is
	// at least 80 % full; when full it refuses new dead messages.
	AlertCaptureStreamFilling = "capture_stream_filling"
	// AlertConsumerNeverGivesUp: a work consumer with unlimited
	// deliveries; a task that always fails never reaches the DLQ.
	AlertConsumerNeverGivesUp = "consumer_never_gives_up"
	// AlertAcksWithoutOutcome: in the last complete hour the work streams'
	// consumers acknowledged more tasks than completions and deaths were
	// recorded, beyond the tolerance: failures swallowed without a trace.
	AlertAcksWithoutOutcome = "acks_without_outcome"
	// AlertRecoveryBelow80: of the moves that settled entries fleet-wide
	// in the last 24 hours (into recovered or discarded), under 80 %
	// recovered (the resolution counters, store.Outcomes).
	AlertRecoveryBelow80 = "recovery_below_80"
	// AlertReplayDenials: of the replays the replay function claimed in
	// the last 24 hours, more than a fifth were kept back by a gate (the
	// current policy, the tenant breaker).
	AlertReplayDenials = "replay_denial_rate"
	// FindingReplayedCompleted is a repair without an alert: a replayed
	// entry whose task completed is marked recovered.
	FindingReplayedCompleted = "replayed_completed"
	// FindingHeldReleased is a repair without an alert: held entries are
	// scheduled again once their tenant's breaker admits them.
	FindingHeldReleased = "held_released"
	// FindingProbeSettled is a repair without an alert: a half-open
	// breaker whose probe's outcome was unknown past the probe timeout is
	// closed (completion visible) or reopened (counted as died).
	FindingProbeSettled = "probe_settled"
)

// Severities, as Cloud Logging names them.
const (
	SevInfo    = "INFO"
	SevWarning = "WARNING"
	SevError   = "ERROR"
)

// severity is each finding's severity; a finding that is not INFO alerts.
var severity = map[string]string{
	AlertAdvisoryEntryMismatch:    SevError,
	AlertMissingTask:              SevWarning,
	AlertOrphanTask:               SevWarning,
	AlertStuckReplaying:           SevError,
	AlertBreakerOpenTooLong:       SevWarning,
	AlertMetricDrift:              SevWarning,
	AlertTenantPoisonBurst:        SevError,
	AlertTenantBreakerOpen30m:     SevError,
	AlertTenantRecoveryBelow80:    SevWarning,
	AlertTenantDominates:          SevWarning,
	AlertUnconsumedMessages:       SevError,
	AlertAgentDeadPerHour:         SevWarning,
	AlertNotificationsUnpublished: SevWarning,
	AlertInvalidNames:             SevWarning,
	AlertCaptureStreamFilling:     SevError,
	AlertConsumerNeverGivesUp:     SevWarning,
	AlertAcksWithoutOutcome:       SevError,
	AlertRecoveryBelow80:          SevWarning,
	AlertReplayDenials:            SevWarning,
	FindingReplayedCompleted:      SevInfo,
	FindingHeldReleased:           SevInfo,
	FindingProbeSettled:           SevInfo,
}

// NewFinding starts a finding of a kind, with the kind's severity; every
// kind but the INFO ones alerts.
func NewFinding(name, section, tenant, message string) *Finding {
	return &Finding{Name: name, Severity: severity[name], Alert: severity[name] != SevInfo, Section: section, Tenant: tenant, Message: message}
}

// MaxExamples bounds the ids a finding lists.
const MaxExamples = 10

// Report is one run's result: stored as dlq-audits/{run_id} and returned as
// the response body. Its JSON is the contract dlqctl audit prints.
type Report struct {
	Schema     string    `json:"schema"`
	RunID      string    `json:"run_id"`
	DryRun     bool      `json:"dry_run"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	Budget     string    `json:"budget"`
	// Complete is true when every section ran to its end in this run.
	Complete bool `json:"complete"`
	// BudgetExhausted is true when the run stopped for its time budget;
	// Resume then says where the next run continues.
	BudgetExhausted bool       `json:"budget_exhausted"`
	Resume          *Resume    `json:"resume,omitempty"`
	Sections        []*Section `json:"sections"`
	Findings        []*Finding `json:"findings"`
	// Alerts are the names of the alerting findings, sorted.
	Alerts  []string        `json:"alerts"`
	Repairs RepairTotals    `json:"repairs"`
	Tenants []*TenantHealth `json:"tenants,omitempty"`
	Traffic *Traffic        `json:"traffic,omitempty"`
	Errors  []string        `json:"errors,omitempty"`
}

// Resume is where the next run continues: the section it starts with and
// every section's cursor.
type Resume struct {
	Section string            `json:"section"`
	Cursors map[string]string `json:"cursors"`
}

// Section statuses.
const (
	StatusComplete   = "complete"
	StatusPartial    = "partial"     // stopped for the budget; its cursor is saved
	StatusNotReached = "not_reached" // the budget ran out before it started
	StatusSkipped    = "skipped"     // not configured (for example no NATS)
	StatusError      = "error"
)

// Section is one audit's summary.
type Section struct {
	Name   string           `json:"name"`
	Status string           `json:"status"`
	Counts map[string]int64 `json:"counts"`
	Cursor string           `json:"cursor,omitempty"`
	Note   string           `json:"note,omitempty"`
	Error  string           `json:"error,omitempty"`
	// FirestoreReads and FirestoreWrites are the documents the section
	// read and wrote: what it costs, run after run.
	FirestoreReads  int64 `json:"firestore_reads"`
	FirestoreWrites int64 `json:"firestore_writes"`
}

// Add adds n to the section's counter name.
func (s *Section) Add(name string, n int64) {
	if s.Counts == nil {
		s.Counts = map[string]int64{}
	}
	s.Counts[name] += n
}

// Finding is one kind of problem found by a section.
type Finding struct {
	Name     string `json:"name"`
	Severity string `json:"severity"`
	Alert    bool   `json:"alert"`
	Section  string `json:"section"`
	Tenant   string `json:"tenant,omitempty"`
	// Agent names the agent of a per-agent alert; with the name and the
	// tenant it keys the alert across audits.
	Agent    string   `json:"agent,omitempty"`
	Count    int      `json:"count"`
	Examples []string `json:"examples"`
	Message  string   `json:"message"`
	// Value is the measured quantity of a threshold alert (a rate, a
	// share, minutes open), next to the threshold it crossed.
	Value     float64 `json:"value,omitempty"`
	Threshold float64 `json:"threshold,omitempty"`
	Repair    *Repair `json:"repair,omitempty"`
}

// Example counts one case of the finding, keeping its id among the first
// MaxExamples.
func (f *Finding) Example(id string) {
	f.Count++
	f.Examples = keepFirst(f.Examples, id)
}

// keepFirst appends v to list while it holds fewer than MaxExamples: a
// report shows the first cases and counts the rest.
func keepFirst(list []string, v string) []string {
	if len(list) < MaxExamples {
		list = append(list, v)
	}
	return list
}

// Repair is what was (or, in a dry run, would be) done about a finding.
type Repair struct {
	Action string `json:"action"`
	// The finding's counts, which a run's Repairs add up.
	RepairTotals
	Errors []string `json:"errors,omitempty"`
	Notes  []string `json:"notes,omitempty"`
}

// Fail counts a repair that failed, keeping the first errors.
func (r *Repair) Fail(err error) {
	r.Failed++
	r.Errors = keepFirst(r.Errors, err.Error())
}

// Note keeps a remark on the repairs (the first MaxExamples).
func (r *Repair) Note(s string) { r.Notes = keepFirst(r.Notes, s) }

// RepairTotals counts repairs: those of a finding (Repair) or, summed, of
// a run (Report.Repairs).
type RepairTotals struct {
	// Planned counts the repairs decided on; in a dry run nothing more.
	Planned int `json:"planned"`
	Done    int `json:"done"`
	// Skipped: the state changed before the repair (a replay, an
	// operator or another run got there first); nothing was done.
	Skipped int `json:"skipped"`
	Failed  int `json:"failed"`
}

// Add adds the counts of o to t.
func (t *RepairTotals) Add(o RepairTotals) {
	t.Planned += o.Planned
	t.Done += o.Done
	t.Skipped += o.Skipped
	t.Failed += o.Failed
}

// TenantHealth is a tenant's last 24 hours (docs/reconcile.md, "Tenant
// health").
type TenantHealth struct {
	Tenant         string    `json:"tenant" firestore:"tenant"`
	Entries        int64     `json:"entries" firestore:"entries"`
	EntriesLastHr  int64     `json:"entries_last_hour" firestore:"entries_last_hour"`
	PendingRetries int64     `json:"pending_retries" firestore:"pending_retries"`
	ActivePoison   int64     `json:"active_poison" firestore:"active_poison"`
	PoisonLastHr   int64     `json:"poison_last_hour" firestore:"poison_last_hour"`
	Escalated      int64     `json:"escalated" firestore:"escalated"`
	Recovered      int64     `json:"recovered" firestore:"recovered"`
	Settled        int64     `json:"settled" firestore:"settled"`
	Duplicates     int64     `json:"duplicates" firestore:"duplicates"`
	LastFailure    time.Time `json:"last_failure" firestore:"last_failure"`
	// RecoveryRate is recovered / settled; -1 when nothing settled yet.
	RecoveryRate float64 `json:"recovery_rate" firestore:"-"`
	Breaker      string  `json:"breaker,omitempty" firestore:"-"`
}

// Traffic is the published / completed / duplicates table (docs/reconcile.md,
// "Traffic") over the window, from the samples reconcile stores each run.
type Traffic struct {
	From    time.Time       `json:"from"`
	To      time.Time       `json:"to"`
	Streams []StreamTraffic `json:"streams"`
	// Published sums the work streams' sequence deltas.
	Published int64 `json:"published"`
	// Completed counts task-idempotency completions in the window.
	Completed int64 `json:"completed"`
	// Dead counts failure-log entries created in the window.
	Dead int64 `json:"dead"`
	// Duplicates counts dead tasks found completed before their replay
	// was published (see docs/reconcile.md); from the last complete pass
	// over the entries.
	Duplicates int64 `json:"duplicates"`
	// DLQRate is Dead / Published; -1 when nothing was published (the
	// rule of store.DeadRate, which dlqctl stats and the console use too)
	// and when a work stream has no current sample (its row's Error):
	// Published lacks that stream's messages while Dead counts its deaths.
	DLQRate float64 `json:"dlq_rate"`
}

// StreamTraffic is one work stream's row.
type StreamTraffic struct {
	Stream    string           `json:"stream"`
	LastSeq   int64            `json:"last_seq"`
	Published int64            `json:"published"`
	Acked     map[string]int64 `json:"acked"`
	Pending   map[string]int64 `json:"pending"`
	Error     string           `json:"error,omitempty"`
}

// Finish sorts the findings (by section, name, tenant), totals the repairs
// and lists the alerting findings' names, sorted.
func (r *Report) Finish() {
	sort.SliceStable(r.Findings, func(i, j int) bool {
		a, b := r.Findings[i], r.Findings[j]
		if a.Section != b.Section {
			return a.Section < b.Section
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Tenant < b.Tenant
	})
	seen := map[string]bool{}
	r.Alerts = []string{}
	for _, f := range r.Findings {
		if f.Examples == nil {
			f.Examples = []string{}
		}
		if rp := f.Repair; rp != nil {
			r.Repairs.Add(rp.RepairTotals)
		}
		if f.Alert && !seen[f.Name] {
			seen[f.Name] = true
			r.Alerts = append(r.Alerts, f.Name)
		}
	}
	sort.Strings(r.Alerts)
}
