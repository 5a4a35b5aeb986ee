// Package reconciler is the reconcile engine (docs/reconcile.md) that the
// reconcile function (functions/reconcile, called by Cloud Scheduler) and
// dlqctl audit run: it audits the pipeline end to end, repairs what is safe to
// repair and reports everything in one report (dlq-audits/{run_id}, and the
// response body), logging each alert as a structured ERROR entry.
//
// A run is bounded: every scan pages with a limit and stops at the time
// budget, saving its cursor in dlq-audits/_state so the next run continues
// where this one stopped. Runs are safe to overlap: a run takes a lease
// (dlq-audits/_lease, acquired in a transaction, with an expiry) before it
// repairs anything, and a second run answers 409 without touching anything.
// Every repair is itself a transaction that checks the state it found, so a
// repair never happens twice even across an expired lease.
package reconciler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// By is the actor reconcile writes into entry and breaker history.
const By = store.ByReconcile

// Config is what reconcile reads from its environment, plus thresholds whose
// defaults docs/reconcile.md ("Configuration") lists.
type Config struct {
	AdvisoryStream string // default DLQ_ADVISORIES
	RecordStream   string // default DLQ_RECORDS
	BridgeConsumer string // the bridge's consumer on both; default dlq-bridge
	// CaptureFillAlert is the fill of a capture stream that alerts
	// (default DefaultCaptureFillAlert).
	CaptureFillAlert float64
	// OutcomeTolerance and OutcomeMinGap: acks_without_outcome alerts when
	// an hour's acknowledged tasks exceed its outcomes by more than the
	// larger of OutcomeMinGap and OutcomeTolerance of the acknowledged
	// (defaults DefaultOutcomeTolerance, DefaultOutcomeMinGap).
	OutcomeTolerance float64
	OutcomeMinGap    int
	WorkStreams      []string // sampled for the traffic table; none: no table
	// TimeBudget bounds a run (default 4 min); scans stop at it and resume
	// in the next run.
	TimeBudget time.Duration
	// LeaseTTL is how long a run's lease lasts (default budget + 2 min), so
	// a crashed run blocks the next one only that long.
	LeaseTTL time.Duration
	// PageSize is how many documents a scan reads per query (default 300).
	PageSize int
	// MaxQueueTasks bounds the Cloud Tasks listing per run (default
	// 50 000); past it the missing-task check asks per entry.
	MaxQueueTasks int
	// MaxCaptureMsgs bounds the advisories and records checked per stream
	// per run (default 5 000).
	MaxCaptureMsgs int
	// MaxUnconsumedMsgs bounds the messages read per work stream per run
	// by the consumer-filter audit (default 1 000); the rest are read by
	// the next runs.
	MaxUnconsumedMsgs int
	// Grace leaves entries and tasks changed this recently alone (default
	// 2 min): classify creates a task just after its entry commits, and a
	// replay in flight changes its entry just before its task completes.
	Grace time.Duration
	// CaptureGrace is how old an advisory or record must be before its
	// missing entry is a finding (default 10 min: the bridge and classify
	// need time, and Pub/Sub retries take minutes).
	CaptureGrace time.Duration
	// StuckAfter: an entry replaying this long is stuck (default 30 min:
	// above replay's deadline and Cloud Tasks' first retries).
	StuckAfter time.Duration
	// BreakerCooldown: open this long -> half-open (default 15 min).
	BreakerCooldown time.Duration
	// ProbeTimeout: a half-open breaker's probe whose outcome is unknown
	// this long after it was let through is settled (default
	// store.DefaultProbeTimeout, 30 min: above replay's deadline and
	// Cloud Tasks' first retries, like StuckAfter).
	ProbeTimeout time.Duration
	// Tenant alert thresholds (docs/reconcile.md, "Sections, findings and
	// repairs").
	TenantBreakerAlert time.Duration // default 30 min
	PoisonBurst        int           // more than this many poison entries in the last hour; default 3
	RecoveryTarget     float64       // default 0.8
	RecoveryMinSettled int           // settled entries needed before the rate alerts; default 5
	DominanceShare     float64       // default 0.4
	DominanceMinTotal  int           // entries in the last hour needed before the share alerts; default 10
	// Window is the tenant-health and drift window (default 24 h).
	Window time.Duration
	// IOTimeout bounds each lease, state, report and Cloud Tasks call and
	// each JetStream call of the stream sections (default
	// DefaultIOTimeout, at most the budget), so an unreachable dependency
	// fails the call, not the whole run's time.
	IOTimeout time.Duration
	// Predict is the learner's part of a run (predictions.go).
	Predict PredictConfig
	// MaxBreakers bounds the breakers read per run (default MaxBreakers).
	MaxBreakers int
}

func (c *Config) defaults() {
	if c.AdvisoryStream == "" {
		c.AdvisoryStream = event.DefaultAdvisoryStream
	}
	if c.RecordStream == "" {
		c.RecordStream = event.DefaultRecordStream
	}
	if c.BridgeConsumer == "" {
		c.BridgeConsumer = event.DefaultBridgeConsumer
	}
	if c.CaptureFillAlert <= 0 {
		c.CaptureFillAlert = DefaultCaptureFillAlert
	}
	if c.OutcomeTolerance <= 0 {
		c.OutcomeTolerance = DefaultOutcomeTolerance
	}
	if c.OutcomeMinGap <= 0 {
		c.OutcomeMinGap = DefaultOutcomeMinGap
	}
	orDefault(&c.TimeBudget, 4*time.Minute)
	orDefault(&c.LeaseTTL, c.TimeBudget+2*time.Minute)
	orDefault(&c.IOTimeout, min(DefaultIOTimeout, c.TimeBudget))
	if c.MaxBreakers <= 0 {
		c.MaxBreakers = MaxBreakers
	}
	orDefault(&c.Grace, 2*time.Minute)
	orDefault(&c.CaptureGrace, 10*time.Minute)
	orDefault(&c.StuckAfter, 30*time.Minute)
	orDefault(&c.BreakerCooldown, store.DefaultBreaker.Cooldown)
	orDefault(&c.ProbeTimeout, store.DefaultProbeTimeout)
	orDefault(&c.TenantBreakerAlert, 30*time.Minute)
	orDefault(&c.Window, 24*time.Hour)
	orDefault(&c.PageSize, 300)
	orDefault(&c.MaxQueueTasks, 50_000)
	orDefault(&c.MaxCaptureMsgs, 5_000)
	orDefault(&c.MaxUnconsumedMsgs, 1_000)
	orDefault(&c.PoisonBurst, 3)
	orDefault(&c.RecoveryTarget, 0.8)
	orDefault(&c.RecoveryMinSettled, 5)
	orDefault(&c.DominanceShare, 0.4)
	orDefault(&c.DominanceMinTotal, 10)
}

// orDefault sets an unset (or nonsensical, not positive) limit to its default.
func orDefault[T int | int64 | float64 | time.Duration](p *T, v T) {
	if *p <= 0 {
		*p = v
	}
}

// Tasks is the Cloud Tasks access reconcile needs (tasks.Scheduler).
type Tasks interface {
	Schedule(ctx context.Context, r tasks.Request) (name string, created bool, err error)
	Delete(ctx context.Context, name string) error
	Exists(ctx context.Context, name string) (bool, error)
	Each(ctx context.Context, fn func(name string, scheduled time.Time) bool) error
}

// PolicySource returns the triage policy in force (triage.Loader).
type PolicySource interface {
	Current(ctx context.Context) *triage.Policy
}

// Deps are the clients reconcile uses.
type Deps struct {
	Logger *slog.Logger
	Store  *store.Store
	Tasks  Tasks
	// Policy classifies the entries reconcile records itself (messages no
	// consumer receives); default: the store's policy loader, the policy
	// classify and replay use.
	Policy PolicySource
	// JetStream returns the JetStream context (connecting on first use);
	// nil skips the capture and traffic sections.
	JetStream func(ctx context.Context) (jetstream.JetStream, error)
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Notify publishes the notifications outbox each run; nil skips it.
	Notify notify.Outbox
}

// Handler serves the reconcile function. Put it behind auth.Middleware.
type Handler struct {
	cfg    Config
	log    *slog.Logger
	store  *store.Store
	tasks  Tasks
	pol    PolicySource
	js     func(ctx context.Context) (jetstream.JetStream, error)
	now    func() time.Time
	notify notify.Outbox
}

// New returns a Handler.
func New(cfg Config, deps Deps) *Handler {
	cfg.defaults()
	h := &Handler{cfg: cfg, log: deps.Logger, store: deps.Store, tasks: deps.Tasks, pol: deps.Policy, js: deps.JetStream, now: deps.Now, notify: deps.Notify}
	if h.tasks != nil {
		h.tasks = boundedTasks{t: h.tasks, d: cfg.IOTimeout}
	}
	if js := h.js; js != nil {
		h.js = func(ctx context.Context) (jetstream.JetStream, error) {
			ctx, cancel := context.WithTimeout(ctx, cfg.IOTimeout)
			defer cancel()
			return js(ctx)
		}
	}
	if h.log == nil {
		h.log = obs.Discard()
	}
	if h.pol == nil && h.store != nil {
		h.pol = h.store.PolicyLoader(h.log)
	}
	if h.now == nil {
		h.now = time.Now
	}
	return h
}

// LeaseHeld is the 409 answer of a run that found another run's lease.
type LeaseHeld struct {
	Schema  string    `json:"schema"`
	RunID   string    `json:"run_id"`
	DryRun  bool      `json:"dry_run"`
	Status  string    `json:"status"` // "lease_held"
	Message string    `json:"message"`
	Holder  string    `json:"holder"`
	Until   time.Time `json:"until"`
}

// ErrLeaseHeld is returned by Run while another run holds the lease.
var ErrLeaseHeld = errors.New("reconcile: another run holds the lease")

// ServeHTTP runs one audit. Query: dry_run=true reports without repairing
// (and without moving the cursors). 200 with the report; 409 when another
// run holds the lease; 500 with the report when a section failed.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "reconcile: GET or POST only", http.StatusMethodNotAllowed)
		return
	}
	dry := false
	if v := r.URL.Query().Get("dry_run"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			http.Error(w, fmt.Sprintf("reconcile: dry_run=%q is not a boolean", v), http.StatusBadRequest)
			return
		}
		dry = b
	}
	rep, err := h.Run(r.Context(), dry)
	w.Header().Set("Content-Type", "application/json")
	var held *leaseError
	switch {
	case errors.As(err, &held):
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(LeaseHeld{Schema: audit.Schema, RunID: rep.RunID, DryRun: dry, Status: "lease_held",
			Message: fmt.Sprintf("another run (%s) holds the lease until %s; this run did nothing", held.lease.Holder, held.lease.Until.Format(time.RFC3339)),
			Holder:  held.lease.Holder, Until: held.lease.Until})
		return
	case err != nil && rep == nil:
		h.log.ErrorContext(r.Context(), "reconcile: run failed", "error", err.Error())
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	case err != nil || len(rep.Errors) > 0:
		w.WriteHeader(http.StatusInternalServerError)
	}
	_ = json.NewEncoder(w).Encode(rep)
}

type leaseError struct{ lease store.Lease }

func (e *leaseError) Error() string {
	return fmt.Sprintf("%s: %s until %s", ErrLeaseHeld, e.lease.Holder, e.lease.Until.Format(time.RFC3339))
}
func (e *leaseError) Unwrap() error { return ErrLeaseHeld }

// takeLease takes the run lease for holder, valid for ttl, so that audit
// runs and recounts never repair at the same time, and returns what
// releases it. A lease another holder has is a *leaseError. Release runs
// even when ctx is cancelled, since the run that ends is done with it; a
// lease it could not release expires by itself.
func (h *Handler) takeLease(ctx context.Context, log *slog.Logger, holder string, ttl time.Duration) (release func(), err error) {
	lctx, cancel := h.ioCtx(ctx)
	lease, err := h.store.AcquireLease(lctx, holder, ttl)
	cancel()
	if errors.Is(err, store.ErrLeaseHeld) {
		log.InfoContext(ctx, "reconcile: another run holds the lease; nothing done", "holder", lease.Holder, "until", lease.Until)
		return nil, &leaseError{lease: lease}
	}
	if err != nil {
		return nil, fmt.Errorf("reconcile: lease: %w", err)
	}
	return func() {
		rctx, cancel := h.ioCtx(context.WithoutCancel(ctx))
		defer cancel()
		if err := h.store.ReleaseLease(rctx, holder); err != nil {
			log.WarnContext(ctx, "reconcile: lease not released; it expires by itself", "holder", holder, "error", err.Error())
		}
	}, nil
}

// NewRunID returns a time-ordered, unique run id (also a Firestore id).
func NewRunID(t time.Time) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return t.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b)
}

// run is one audit in progress.
type run struct {
	h        *Handler
	rep      *audit.Report
	state    *State
	dry      bool
	start    time.Time
	deadline time.Time
	// breakerState is each tenant's breaker as the breakers section left
	// it, for the tenant health table.
	breakerState map[string]string
}

func (r *run) now() time.Time { return r.h.now().UTC() }

// over reports whether the time budget is spent.
func (r *run) over() bool { return !r.h.now().Before(r.deadline) }

// scanStatus returns a page of the entries q selects (a status, and with
// DueBy only those due) after the cursor, in the order they fall due, and
// the cursor of the next page (zero after the last).
func (r *run) scanStatus(ctx context.Context, q store.Query, after store.Cursor) ([]*store.Entry, store.Cursor, error) {
	q.Order, q.View, q.After, q.Limit = store.DueFirst, store.ScanView, after, r.h.cfg.PageSize
	p, err := r.h.store.Entries(ctx, q)
	return p.Entries, p.Next, err
}

func (r *run) finding(name, section, tenant, message string) *audit.Finding {
	f := audit.NewFinding(name, section, tenant, message)
	r.rep.Findings = append(r.rep.Findings, f)
	return f
}

// addNote adds note to the section's note, after those already there.
func addNote(sec *audit.Section, note string) {
	sec.Note = strings.TrimPrefix(sec.Note+"; "+note, "; ")
}

// repairing returns f, or, for a section's first case (f nil), a new finding
// whose repair of action is still to be counted.
func (r *run) repairing(f *audit.Finding, name, section, message, action string) *audit.Finding {
	if f == nil {
		f = r.finding(name, section, "", message)
		f.Repair = &audit.Repair{Action: action}
	}
	return f
}

// plan counts one case and its repair under f and reports whether to carry
// the repair out: not in a dry run, which only counts.
func (r *run) plan(f *audit.Finding, example string) bool {
	f.Example(example)
	f.Repair.Planned++
	return !r.dry
}

// ring is the order of the resumable sections; a run starts with the one
// the previous run stopped in, so every section is eventually reached.
var ring = []string{SectionCapture, SectionTasks, SectionReplaying, SectionReplayed, SectionHeld, SectionEntries}

// Sections.
const (
	SectionTraffic   = "traffic"
	SectionConsumers = "consumers"
	SectionCapture   = "capture"
	SectionTasks     = "tasks"
	SectionReplaying = "replaying"
	SectionReplayed  = "replayed"
	SectionBreakers  = "breakers"
	SectionHeld      = "held"
	SectionEntries   = "entries"
)

// FinishPage is how long past the budget a run's sections may take to
// finish the page or repair in hand; the rest of the minute Terraform
// leaves before the function's timeout is the state's and the report's.
const FinishPage = 40 * time.Second

// errBudget stops a section at the time budget; its cursor is saved.
var errBudget = errors.New("reconcile: time budget spent")

// Run performs one audit and returns its report (stored unless the store
// fails). A run that finds the lease held returns an error wrapping
// ErrLeaseHeld and a report with only its run id.
func (h *Handler) Run(ctx context.Context, dry bool) (*audit.Report, error) {
	start := h.now().UTC()
	rep := &audit.Report{Schema: audit.Schema, RunID: NewRunID(start), DryRun: dry, StartedAt: start, Budget: h.cfg.TimeBudget.String(),
		Sections: []*audit.Section{}, Findings: []*audit.Finding{}}
	// I/O gets the budget plus room to finish the page or repair in hand;
	// the sections themselves stop at the budget. The saves come after,
	// under deadlines of their own, inside the minute Terraform leaves
	// between the budget and the function's timeout (RECONCILE_TIME_BUDGET
	// = timeout - 60 s): the page's share ends FinishPage in.
	ctx, cancel := context.WithTimeout(ctx, h.cfg.TimeBudget+FinishPage)
	defer cancel()
	log := h.log.With("run_id", rep.RunID, "dry_run", dry)

	if !dry {
		release, err := h.takeLease(ctx, log, rep.RunID, h.cfg.LeaseTTL)
		if errors.Is(err, ErrLeaseHeld) {
			return rep, err
		}
		if err != nil {
			return nil, err
		}
		defer release()
	}
	st := &State{}
	sctx, cancel := h.ioCtx(ctx)
	_, err := h.store.ReadAuditState(sctx, st)
	cancel()
	if err != nil {
		// Cursors only save work: without them every scan starts over,
		// which is slower but complete. An unreadable state must not stop
		// the audits; a real run overwrites it.
		log.WarnContext(ctx, "reconcile: audit state unreadable; scans start from the beginning", "error", err.Error())
		rep.Errors = append(rep.Errors, "state unreadable, scans restarted: "+err.Error())
		st = &State{}
	}
	r := &run{h: h, rep: rep, state: st, dry: dry, start: start, deadline: start.Add(h.cfg.TimeBudget), breakerState: map[string]string{}}

	// Cheap, fixed-size sections run every time (consumers reads at most
	// MaxUnconsumedMsgs per work stream).
	r.section(ctx, SectionTraffic, r.traffic)
	r.section(ctx, SectionBreakers, r.breakers)
	r.section(ctx, SectionConsumers, r.consumers)
	r.section(ctx, SectionStreams, r.captureStreams)
	r.section(ctx, SectionOutcomes, r.outcomes)
	order := ring
	if i := slices.Index(ring, st.Resume); i > 0 {
		order = append(append([]string{}, ring[i:]...), ring[:i]...)
	}
	funcs := map[string]func(context.Context, *audit.Section) error{
		SectionCapture: r.capture, SectionTasks: r.tasksAudit, SectionReplaying: r.replaying,
		SectionReplayed: r.replayed, SectionHeld: r.held, SectionEntries: r.entries,
	}
	st.Resume = ""
	for _, name := range order {
		if r.over() {
			rep.BudgetExhausted = true
			rep.Sections = append(rep.Sections, &audit.Section{Name: name, Status: audit.StatusNotReached})
			if st.Resume == "" {
				st.Resume = name
			}
			continue
		}
		sec := r.section(ctx, name, funcs[name])
		if sec.Status == audit.StatusPartial {
			rep.BudgetExhausted = true
			st.Resume = name
		}
	}
	// Learning waits for a run with time left: its reads and the fold
	// must not eat the headroom the report and the notifications need.
	if r.over() {
		rep.BudgetExhausted = true
		rep.Sections = append(rep.Sections, &audit.Section{Name: SectionPredictions, Status: audit.StatusNotReached})
	} else {
		r.section(ctx, SectionPredictions, r.learn)
	}
	// Last, so this run's own transitions leave with it.
	r.section(ctx, SectionNotifications, r.notifications)
	rep.Complete = true
	for _, s := range rep.Sections {
		rep.Complete = rep.Complete && (s.Status == audit.StatusComplete || s.Status == audit.StatusSkipped)
	}
	rep.Resume = &audit.Resume{Section: st.Resume, Cursors: st.cursors()}
	rep.FinishedAt = h.now().UTC()
	finish(ctx, log, rep)

	// The state and the report are saved even when a slow page used up
	// the run's deadline: the repairs are applied, and without them the
	// alerts would not move and the next run would repeat the scans. The
	// state write is conditioned on the lease still being this run's,
	// which outlives the deadline by a minute.
	save := context.WithoutCancel(ctx)
	if !dry {
		st.RunID, st.UpdatedAt = rep.RunID, rep.FinishedAt
		wctx, cancel := h.ioCtx(save)
		err := h.store.WriteAuditState(wctx, rep.RunID, st)
		cancel()
		if err != nil {
			rep.Errors = append(rep.Errors, "state not saved (the next run repeats this one's scans): "+err.Error())
		}
	}
	actx, cancel := h.ioCtx(save)
	err = h.store.SaveAudit(actx, rep)
	cancel()
	if err != nil {
		rep.Errors = append(rep.Errors, "report not stored: "+err.Error())
	}
	r.flushAlerts(save, log)
	log.InfoContext(ctx, "reconcile: run finished", "complete", rep.Complete, "budget_exhausted", rep.BudgetExhausted,
		"alerts", rep.Alerts, "repairs_done", rep.Repairs.Done, "repairs_failed", rep.Repairs.Failed, "resume", st.Resume,
		"duration_ms", rep.FinishedAt.Sub(start).Milliseconds())
	return rep, nil
}

// section runs one section and records its outcome.
func (r *run) section(ctx context.Context, name string, f func(context.Context, *audit.Section) error) *audit.Section {
	sec := &audit.Section{Name: name, Status: audit.StatusComplete, Counts: map[string]int64{}}
	r.rep.Sections = append(r.rep.Sections, sec)
	// The run's store serves only this run (the lease keeps runs apart;
	// a request the lease refuses meanwhile adds its one read).
	before := r.h.store.Ops()
	err := f(ctx, sec)
	after := r.h.store.Ops()
	sec.FirestoreReads, sec.FirestoreWrites = after.Reads-before.Reads, after.Writes-before.Writes
	switch {
	case errors.Is(err, errBudget):
		sec.Status = audit.StatusPartial
	case errors.Is(err, errSkipped):
		sec.Status = audit.StatusSkipped
		sec.Note = err.Error()
	case err != nil:
		sec.Status, sec.Error = audit.StatusError, err.Error()
		r.rep.Errors = append(r.rep.Errors, name+": "+err.Error())
		r.h.log.ErrorContext(ctx, "reconcile: section failed", "run_id", r.rep.RunID, "section", name, "error", err.Error())
	}
	if c := r.state.cursor(name); c != "" && sec.Status != audit.StatusComplete {
		sec.Cursor = c
	}
	return sec
}

var errSkipped = errors.New("not configured")

// shortTask is a task name without its queue path.
func shortTask(name string) string { return name[strings.LastIndexByte(name, '/')+1:] }
