package console

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/redrive"
	"github.com/jsdlq/jsdlq/shared/store"
)

// This file is the console's bulk redrive: a filter's plan (counts and what
// each gate will do, the shared/redrive engine's as dlqctl prints it), a
// confirmed run stored in Firestore (store.BulkRun), a runner in the
// console process that works on runs under a lease (bulkrunner.go), live
// progress and cancel. A run does not live in a browser tab or in one console instance:
// whichever instance holds its lease works on it, and when that instance
// stops, another (or the restarted one) claims it once the lease expires
// and continues after its cursor.

// Velocity caps of a bulk run, in actions per second.
const (
	// DefaultBulkRate is the form's default.
	DefaultBulkRate = 5.0
	// MaxBulkRate is the highest the console accepts: every action is a
	// Firestore transaction on its entry, a Cloud Tasks call and a write of
	// the run document (the write-ahead), and one document takes a
	// sustained burst of writes only so fast; a faster bulk replay would
	// also hit the agents harder than a human should from a form.
	MaxBulkRate = 20.0
)

// Runner timing defaults (WithBulkTiming).
const (
	// DefaultBulkLease is how long a claim lasts unless renewed: a run
	// whose instance died waits at most this long for another.
	DefaultBulkLease = 30 * time.Second
	// DefaultBulkPoll is how often an idle runner looks for runs to claim.
	DefaultBulkPoll = 5 * time.Second
)

// bulkRunner is the runner's configuration (Server.bulk).
type bulkRunner struct {
	instance    string
	lease, poll time.Duration
}

// WithBulkTiming sets the runner's lease and poll interval (defaults
// DefaultBulkLease, DefaultBulkPoll); the lease is renewed every third of
// it while a run works.
func WithBulkTiming(lease, poll time.Duration) Option {
	return func(s *Server) { s.bulk.lease, s.bulk.poll = lease, poll }
}

// WithInstance names this console instance in the leases it takes
// (default: the host name and a random suffix, unique per process).
func WithInstance(name string) Option { return func(s *Server) { s.bulk.instance = name } }

func (b *bulkRunner) defaults() {
	if b.instance == "" {
		host, _ := os.Hostname()
		r := make([]byte, 4)
		_, _ = rand.Read(r)
		b.instance = cmp.Or(host, "console") + "-" + hex.EncodeToString(r)
	}
	b.lease = cmp.Or(b.lease, DefaultBulkLease)
	b.poll = cmp.Or(b.poll, DefaultBulkPoll)
}

func (s *Server) routeBulk(mux *http.ServeMux) {
	cop := http.NewCrossOriginProtection()
	mux.Handle("GET /bulk", s.page(s.bulkPlan))
	mux.Handle("POST /bulk", cop.Handler(s.form(s.bulkConfirm)))
	mux.Handle("GET /bulk/runs", s.livePage(s.bulkRuns))
	mux.Handle("GET /bulk/{run}", s.page(s.bulkRun))
	mux.Handle("GET /bulk/{run}/progress", http.HandlerFunc(s.bulkProgress))
	mux.Handle("POST /bulk/{run}/cancel", cop.Handler(s.form(s.bulkCancel)))
}

// bulkForm is a bulk redrive as asked: filter, opt-in, rate.
type bulkForm struct {
	F       map[string]string // the filters as given
	Filter  store.BulkFilter
	Include []string
	Rate    float64
	RateS   string
}

// parseBulkForm reads a bulk redrive's parameters (the query of the plan
// page, the form of its confirmation); extra names the other fields the
// request may carry. Anything else, or a bad value, is a 400.
func parseBulkForm(vals url.Values, extra ...string) (*bulkForm, error) {
	f := &bulkForm{F: map[string]string{}, RateS: fmt.Sprint(DefaultBulkRate)}
	for name, v := range vals {
		switch {
		case slices.Contains(queryFilters, name):
			s, err := filterValue(name, v)
			if err != nil {
				return nil, err
			}
			if s != "" {
				f.F[name] = s
			}
		case name == "include":
			for _, c := range v {
				if c != redrive.OptInApproverRules {
					return nil, uiBad("include %q: the one opt-in is %s (the entries whose rule keeps approval for approvers)", c, redrive.OptInApproverRules)
				}
				if !slices.Contains(f.Include, c) {
					f.Include = append(f.Include, c)
				}
			}
		case name == "rate":
			if len(v) != 1 {
				return nil, uiBad("rate: one value")
			}
			if s := strings.TrimSpace(v[0]); s != "" {
				f.RateS = s
			}
		case slices.Contains(extra, name):
		default:
			return nil, uiBad("unknown filter %q", name)
		}
	}
	if len(f.F) == 0 {
		return nil, uiBad("a bulk redrive needs a filter: a bulk replay of every entry is not a default")
	}
	rate, err := redrive.ParseRate(f.RateS)
	if err != nil {
		return nil, uiBad("rate %q: a number of actions per second, at least one an hour (%g) and at most %g", f.RateS, redrive.MinRate, MaxBulkRate)
	}
	if rate > MaxBulkRate {
		return nil, uiBad("rate %q: at most %g actions per second", f.RateS, MaxBulkRate)
	}
	f.Rate = rate
	q, err := filterQuery(f.F)
	if err != nil {
		return nil, err
	}
	f.Filter = store.BulkFilterOf(q)
	slices.Sort(f.Include)
	return f, nil
}

// planView is a plan as the pages show it.
type planView struct {
	P        store.RedrivePlan
	ByTenant []count
	ByCat    []count
	ByStatus []count
	Stops    []count
	Breakers []count
	// Excluded and Denied are by rule; OptedIn: the redrive takes in the
	// entries whose rule keeps approval for approvers.
	Excluded  []count
	Denied    []count
	OptedIn   bool
	LeftAlone int
	Stopped   int
	HeldByBrk int
}

type count struct {
	Name string
	N    int
}

func viewPlan(p store.RedrivePlan, include []string) planView {
	v := planView{P: p, ByTenant: counts(p.ByTenant), ByCat: counts(p.ByCategory), ByStatus: counts(p.ByStatus),
		Stops: counts(p.PolicyStops), Breakers: counts(p.BreakerHeld), Excluded: counts(p.Excluded), Denied: counts(p.Denied),
		OptedIn: slices.Contains(include, redrive.OptInApproverRules)}
	v.Stopped, v.HeldByBrk, v.LeftAlone = p.PolicyStopped(), p.BreakerHolds(), p.LeftAlone()
	return v
}

// counts is m largest first.
func counts(m map[string]int) []count {
	out := make([]count, 0, len(m))
	for _, k := range store.Ranked(m) {
		out = append(out, count{cmp.Or(k, "—"), m[k]})
	}
	return out
}

// maxPlanTenants bounds the tenants a stored plan names (a run document
// stays far below Firestore's 1 MiB with thousands of tenants); the rest
// are summed under "(others)".
const maxPlanTenants = 50

func trimTenants(p *store.RedrivePlan) {
	if len(p.ByTenant) <= maxPlanTenants {
		return
	}
	all := counts(p.ByTenant)
	p.ByTenant = map[string]int{}
	for i, c := range all {
		if i < maxPlanTenants {
			p.ByTenant[c.Name] = c.N
		} else {
			p.ByTenant["(others)"] += c.N
		}
	}
}

// bulkPlanData is the plan page.
type bulkPlanData struct {
	Form      *bulkForm
	Plan      planView
	Filter    string
	MaxRate   float64
	Query     string
	ConfirmOK bool
	// MayRedrive: the operator's role may confirm a redrive; MayOptIn: it
	// may take in the entries whose rule keeps approval for approvers,
	// with the opt-in OptIn.
	MayRedrive, MayOptIn bool
	OptIn                string
	// First are the first entries the redrive acts on (of Acts); ETA is
	// how long it takes at the form's rate.
	First []string
	ETA   string
}

// mayOptIn is nil when who may opt a redrive into the entries whose rule
// keeps approval for approvers: a role that may approve them (the
// authority rule over such a rule's grant).
func mayOptIn(who authority.Actor) error {
	if authority.May(who, authority.Approve, authority.Grant{Approvers: []authority.Role{authority.Approver}}) != nil {
		return &uiError{http.StatusForbidden, fmt.Sprintf("permission denied: only an approver may take into a bulk redrive the entries whose rule keeps approval for approvers; the %s role may not", who.Role)}
	}
	return nil
}

func (s *Server) bulkPlan(r *http.Request) (string, string, any, error) {
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return "", "", nil, uiBad("malformed query string")
	}
	f, err := parseBulkForm(vals)
	if err != nil {
		return "", "", nil, err
	}
	who := actorOf(r)
	p, err := redrive.NewPlan(r.Context(), s.store, s.actions, who, f.Filter.Query(), f.Include, "")
	if err != nil {
		return "", "", nil, err
	}
	d := bulkPlanData{Form: f, Plan: viewPlan(p.RedrivePlan, f.Include), Filter: filterText(f.F), MaxRate: MaxBulkRate,
		ConfirmOK: p.Acts() > 0, MayRedrive: authority.May(who, authority.Redrive, authority.Grant{}) == nil, MayOptIn: mayOptIn(who) == nil,
		OptIn: redrive.OptInApproverRules, First: p.First, ETA: humanDuration(time.Duration(float64(p.Acts()) / f.Rate * float64(time.Second)))}
	return "bulkplan", "Bulk redrive: plan", d, nil
}

// filterText is the filter in words, in the form's order.
func filterText(f map[string]string) string {
	var parts []string
	for _, k := range queryFilters {
		if v := f[k]; v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, ", ")
}

// bulkConfirm stores a confirmed run for the runner, with the plan as it
// stands now, and shows its page.
func (s *Server) bulkConfirm(_ http.ResponseWriter, r *http.Request, who authority.Actor) (string, error) {
	if err := r.ParseForm(); err != nil {
		return "", uiBad("malformed form")
	}
	f, err := parseBulkForm(r.PostForm, csrfField, "why")
	if err != nil {
		return "", err
	}
	if len(f.Include) > 0 {
		if err := mayOptIn(who); err != nil {
			return "", err
		}
	}
	why, err := reasonOf(r.PostForm.Get("why"), "a bulk redrive")
	if err != nil {
		return "", err
	}
	run, err := s.startBulkRun(r.Context(), who, f.Filter, f.Include, f.Rate, why, filterText(f.F))
	if err != nil {
		return "", err
	}
	if run == nil {
		return "", uiBad("nothing to do: the plan acts on no entry")
	}
	next, err := consolePath("bulk", run.ID)
	return next + "?done=bulk-confirmed", err
}

// startBulkRun plans a redrive of filter by who, as things stand now, and
// stores it as a run for the runner (nil when the plan acts on nothing):
// a confirmed bulk redrive, and the release of a closed breaker's held
// entries. filterText names the filter in the log.
func (s *Server) startBulkRun(ctx context.Context, who authority.Actor, filter store.BulkFilter, include []string, rate float64, why, filterText string) (*store.BulkRun, error) {
	p, err := redrive.NewPlan(ctx, s.store, s.actions, who, filter.Query(), include, "")
	if err != nil {
		return nil, err
	}
	if p.Acts() == 0 {
		return nil, nil
	}
	// The run acts on what the operator confirmed: a runner may get to it
	// much later, and its filter must not take in the failures recorded
	// meanwhile (among them its own replays' deaths).
	filter = p.Until(filter)
	trimTenants(&p.RedrivePlan)
	run := &store.BulkRun{Filter: filter, Include: include, Rate: rate, Actor: who.Name, Role: who.Role, Reason: why, Plan: p.RedrivePlan, Total: p.Matched}
	if err := s.store.CreateBulkRun(ctx, run); err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "bulk redrive confirmed", "run", run.ID, "operator", who.Name, "role", string(who.Role), "filter", filterText,
		"acts", p.Acts(), "rate", rate, "include", strings.Join(include, ","))
	return run, nil
}

// bulkRunData is a run's page.
type bulkRunData struct {
	R       *store.BulkRun
	Plan    planView
	Filter  string
	Percent int
	Live    bool
	Refresh int // seconds between reloads while live
	// MayCancel: the operator's role may cancel it.
	MayCancel bool
}

func (s *Server) runOf(r *http.Request) (*store.BulkRun, error) {
	id := r.PathValue("run")
	if err := store.CheckBulkRunID(id); err != nil {
		return nil, uiBad("malformed bulk run id")
	}
	return s.store.GetBulkRun(r.Context(), id)
}

func (s *Server) bulkRun(r *http.Request) (string, string, any, error) {
	run, err := s.runOf(r)
	if err != nil {
		return "", "", nil, err
	}
	d := bulkRunData{R: run, Plan: viewPlan(run.Plan, run.Include), Filter: bulkFilterText(run.Filter), Live: run.State.Live(), Refresh: 2,
		MayCancel: authority.May(actorOf(r), authority.Redrive, authority.Grant{}) == nil}
	if run.Total > 0 {
		d.Percent = min(100, run.Progress.Seen*100/run.Total)
	}
	return "bulkrun", "Bulk redrive " + run.ID, d, nil
}

func bulkFilterText(f store.BulkFilter) string {
	m := map[string]string{"tenant": f.Tenant, "status": string(f.Status), "category": f.Category, "reason": f.Reason,
		"agent": f.Agent, "task_type": f.TaskType}
	if !f.CreatedFrom.IsZero() {
		m["from"] = f.CreatedFrom.Format(time.RFC3339)
	}
	if !f.CreatedTo.IsZero() {
		m["to"] = f.CreatedTo.Format(time.RFC3339)
	}
	return filterText(m)
}

// bulkProgressJSON is GET /bulk/{run}/progress.
type bulkProgressJSON struct {
	ID        string                `json:"id"`
	State     store.BulkState       `json:"state"`
	Total     int                   `json:"total"`
	Progress  store.RedriveProgress `json:"progress"`
	Actor     string                `json:"actor"`
	Role      authority.Role        `json:"role,omitempty"`
	Error     string                `json:"error,omitempty"`
	UpdatedAt time.Time             `json:"updated_at"`
}

// bulkProgress answers a run's progress as JSON (for scripts; the run
// page reloads itself).
func (s *Server) bulkProgress(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.operator(w, r); !ok {
		return
	}
	run, err := s.runOf(r)
	var ue *uiError
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, bulkProgressJSON{ID: run.ID, State: run.State, Total: run.Total, Progress: run.Progress,
			Actor: run.Actor, Role: run.Role, Error: run.Error, UpdatedAt: run.UpdatedAt})
	case errors.As(err, &ue):
		writeAPIError(w, badRequest("%s", ue.msg))
	case errors.Is(err, store.ErrNotFound):
		writeAPIError(w, &apiError{http.StatusNotFound, "not_found", "no such bulk run"})
	default:
		s.log.ErrorContext(r.Context(), "bulk progress", "error", err.Error())
		writeAPIError(w, &apiError{http.StatusInternalServerError, "internal", "internal error"})
	}
}

func (s *Server) bulkCancel(_ http.ResponseWriter, r *http.Request, who authority.Actor) (string, error) {
	id := r.PathValue("run")
	if err := store.CheckBulkRunID(id); err != nil {
		return "", uiBad("malformed bulk run id")
	}
	if _, err := s.store.CancelBulkRun(r.Context(), id, who.Name); err != nil {
		return "", err
	}
	s.log.InfoContext(r.Context(), "bulk redrive cancel asked", "run", id, "operator", who.Name, "role", string(who.Role))
	next, err := consolePath("bulk", id)
	return next + "?done=cancel-asked", err
}

// bulkRunsData is the list of recent runs.
type bulkRunsData struct{ Runs []bulkRunLine }

// bulkRunLine is a run as the list shows it, its filter in words.
type bulkRunLine struct {
	*store.BulkRun
	Filter string
}

func (s *Server) bulkRuns(r *http.Request) (string, string, any, error) {
	runs, err := s.store.ListBulkRuns(r.Context(), 50)
	if err != nil {
		return "", "", nil, err
	}
	d := bulkRunsData{}
	for _, run := range runs {
		d.Runs = append(d.Runs, bulkRunLine{run, bulkFilterText(run.Filter)})
	}
	return "bulkruns", "Bulk redrives", d, nil
}
