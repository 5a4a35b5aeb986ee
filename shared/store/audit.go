package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
)

// This file holds dlq-audits (docs/reconcile.md): reconcile's run lease, its
// resumable scan state and its reports.

// Documents of dlq-audits that are not reports. Report ids never start with
// '_', so listing reports skips these.
const (
	AuditLease  = "_lease"
	AuditState  = "_state"
	AuditAlerts = "_alerts"
)

// ErrLeaseHeld is returned by AcquireLease while another run holds the lease.
var ErrLeaseHeld = errors.New("store: another reconcile run holds the lease")

// Lease is the dlq-audits/_lease document.
type Lease struct {
	Holder     string    `firestore:"holder" json:"holder"`
	AcquiredAt time.Time `firestore:"acquired_at" json:"acquired_at"`
	Until      time.Time `firestore:"until" json:"until"`
}

func (s *Store) auditRef(id string) *firestore.DocumentRef { return s.fs.Collection(Audits).Doc(id) }

// leaseFree reports whether owner may take a lease that holder holds until
// until: no one holds it, owner does already, or it has expired. Reconcile's
// run lease and a bulk run's follow it; a notification's claim does not
// (Outbox.claimFor: one flusher's concurrent calls share its owner).
func leaseFree(holder string, until time.Time, owner string, now time.Time) bool {
	return holder == "" || holder == owner || !until.After(now)
}

// AcquireLease takes the run lease for holder until now+ttl, in a
// transaction: an unexpired lease of another holder makes it fail with
// ErrLeaseHeld and returns that lease.
func (s *Store) AcquireLease(ctx context.Context, holder string, ttl time.Duration) (Lease, error) {
	var out Lease
	err := s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		var cur Lease
		if _, err := txReadOptional(s, tx, s.auditRef(AuditLease), &cur); err != nil {
			return err
		}
		now := s.Now()
		if !leaseFree(cur.Holder, cur.Until, holder, now) {
			out = cur
			return ErrLeaseHeld
		}
		out = Lease{Holder: holder, AcquiredAt: now, Until: now.Add(ttl)}
		s.wrote(1)
		return tx.Set(s.auditRef(AuditLease), out)
	})
	if errors.Is(err, ErrLeaseHeld) {
		return out, fmt.Errorf("%w: %s until %s", ErrLeaseHeld, out.Holder, out.Until.Format(time.RFC3339))
	}
	if err != nil {
		return Lease{}, txError("acquire lease", err)
	}
	return out, nil
}

// ReleaseLease ends holder's lease (another holder's is left alone).
func (s *Store) ReleaseLease(ctx context.Context, holder string) error {
	err := s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		var cur Lease
		found, err := txReadOptional(s, tx, s.auditRef(AuditLease), &cur)
		if err != nil || !found || cur.Holder != holder {
			return err
		}
		s.wrote(1)
		return tx.Delete(s.auditRef(AuditLease))
	})
	if err != nil {
		return txError("release lease", err)
	}
	return nil
}

// ReadAuditState decodes dlq-audits/_state into v; found is false (and v
// untouched) when there is none.
func (s *Store) ReadAuditState(ctx context.Context, v any) (found bool, err error) {
	return readOptional(ctx, s, s.auditRef(AuditState), v)
}

// WriteAuditState replaces dlq-audits/_state with v, but only while holder
// still holds the lease: a run that lost its lease (it overran) must not
// overwrite the cursors of the run that took over.
func (s *Store) WriteAuditState(ctx context.Context, holder string, v any) error {
	err := s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		var cur Lease
		if _, err := txReadOptional(s, tx, s.auditRef(AuditLease), &cur); err != nil {
			return err
		}
		if cur.Holder != holder {
			return fmt.Errorf("%w: %s holds it now", ErrLeaseHeld, cur.Holder)
		}
		s.wrote(1)
		return tx.Set(s.auditRef(AuditState), v)
	})
	if errors.Is(err, ErrLeaseHeld) {
		return err
	}
	if err != nil {
		return txError("write audit state", err)
	}
	return nil
}

// SaveAudit stores a report as dlq-audits/{run id}. The document is the
// report's JSON shape (times as RFC 3339 strings), so the stored report and
// the function's response are one format (audit.Schema).
//
// A real run's report is saved in a transaction with the alert state
// (dlq-audits/_alerts): each alert the report raises that was not active
// stages an alert_raised notification, each active alert whose section
// completed in this run without raising it again stages alert_cleared, in
// the same transaction, under ids derived from the alert and the report.
// So a transition is notified exactly once however often reconcile runs,
// and a save retried with the same report stages the same documents or
// none. An alert of a section that did not complete (out of budget, failed,
// skipped) stays active: the run could not see it go. A dry run's report
// and one older than the state leave the alerts alone.
func (s *Store) SaveAudit(ctx context.Context, r *audit.Report) error {
	doc, err := auditDocument(r)
	if err != nil {
		return fmt.Errorf("encode %s/%s: %w", Audits, r.RunID, err)
	}
	if r.DryRun {
		_, err = s.auditRef(r.RunID).Set(ctx, doc)
		s.wrote(1)
		if err != nil {
			return fmt.Errorf("firestore set %s/%s: %w", Audits, r.RunID, err)
		}
		return nil
	}
	err = s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		var st AlertState
		if _, err := txReadOptional(s, tx, s.auditRef(AuditAlerts), &st); err != nil {
			return err
		}
		if !r.FinishedAt.Before(st.UpdatedAt) {
			next, changes := alertChanges(st.Active, r)
			for _, n := range changes {
				if _, err := s.stage(tx, n, "", ""); err != nil {
					return err
				}
			}
			s.wrote(1)
			if err := tx.Set(s.auditRef(AuditAlerts), AlertState{Active: next, RunID: r.RunID, UpdatedAt: r.FinishedAt}); err != nil {
				return err
			}
		}
		s.wrote(1)
		return tx.Set(s.auditRef(r.RunID), doc)
	})
	if err != nil {
		return txError("save audit "+r.RunID, err)
	}
	return nil
}

// ActiveAlerts reads the alerts active after the latest real audit.
func (s *Store) ActiveAlerts(ctx context.Context) (AlertState, error) {
	var st AlertState
	_, err := readOptional(ctx, s, s.auditRef(AuditAlerts), &st)
	return st, err
}

// LatestAudit reads the newest report (by finished_at), or nil when there
// is none. The lease and state documents have no finished_at, so the query
// never returns them.
func (s *Store) LatestAudit(ctx context.Context) (*audit.Report, error) {
	reports, err := queryDocs(ctx, s, s.fs.Collection(Audits).OrderBy("finished_at", firestore.Desc).Limit(1), Audits, decodeAudit)
	if err != nil || len(reports) == 0 {
		return nil, err
	}
	return reports[0], nil
}

// auditDocument turns a report into the map Firestore stores, through its
// JSON.
func auditDocument(r *audit.Report) (map[string]any, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return jsonNumbers(m).(map[string]any), nil
}

// jsonNumbers replaces json.Number with int64 or float64, which Firestore
// knows.
func jsonNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = jsonNumbers(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}

// auditListFields are what a listing of reports reads: the run's summary,
// not its findings, tenants or traffic.
var auditListFields = []string{"schema", "run_id", "dry_run", "started_at", "finished_at", "budget", "complete",
	"budget_exhausted", "alerts", "repairs", "errors"}

// validRunID reports whether id can name a report: a Firestore document id
// of at most 128 bytes that is not one of the run's own documents ('_').
func validRunID(id string) bool {
	return id != "" && len(id) <= 128 && utf8.ValidString(id) && !strings.ContainsAny(id, "/\x00") && id[0] != '_' && id != "." && id != ".."
}

// ListAudits returns a page of reports, newest first (by finished_at, then
// run id), as summaries: no findings, tenants or traffic (GetAudit reads
// those). after is the run id of the previous page's last report ("" for
// the first page); next is the run id to continue after, "" when no report
// follows. An after that names no report is ErrBadCursor.
func (s *Store) ListAudits(ctx context.Context, limit int, after string) (reports []*audit.Report, next string, err error) {
	if limit < 1 {
		return nil, "", fmt.Errorf("%w: limit %d, want at least 1", ErrBadQuery, limit)
	}
	q := s.fs.Collection(Audits).Select(auditListFields...).OrderBy("finished_at", firestore.Desc).OrderBy(firestore.DocumentID, firestore.Desc)
	if after != "" {
		if !validRunID(after) {
			return nil, "", fmt.Errorf("%w: %q is not a run id", ErrBadCursor, after)
		}
		snap, err := fetch(ctx, s, s.auditRef(after))
		if err != nil {
			return nil, "", err
		}
		if snap == nil {
			return nil, "", fmt.Errorf("%w: no report %q", ErrBadCursor, after)
		}
		if _, ok := snap.Data()["finished_at"]; !ok {
			return nil, "", fmt.Errorf("%w: %q is not a report", ErrBadCursor, after)
		}
		q = q.StartAfter(snap)
	}
	reports, more, err := pageDocs(ctx, s, q, limit, Audits, decodeAudit)
	if err != nil {
		return nil, "", err
	}
	if more {
		next = reports[len(reports)-1].RunID
	}
	return reports, next, nil
}

// GetAudit reads the report of a run: ErrNotFound when there is none,
// ErrBadID for an id no report can have.
func (s *Store) GetAudit(ctx context.Context, runID string) (*audit.Report, error) {
	if !validRunID(runID) {
		return nil, fmt.Errorf("%w: run id %q", ErrBadID, runID)
	}
	return getDoc(ctx, s, s.auditRef(runID), "report", decodeAudit)
}

// decodeAudit reads a stored report back through its JSON shape.
func decodeAudit(snap *firestore.DocumentSnapshot) (*audit.Report, error) {
	var r audit.Report
	b, err := json.Marshal(snap.Data())
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		return nil, fmt.Errorf("decode %s/%s: %w", Audits, snap.Ref.ID, err)
	}
	if r.RunID == "" {
		r.RunID = snap.Ref.ID
	}
	return &r, nil
}

// AlertState is dlq-audits/_alerts: the alerts active after the real
// audit that saved it (RunID, at UpdatedAt, its finished_at).
type AlertState struct {
	Active    []ActiveAlert `firestore:"active"`
	RunID     string        `firestore:"run_id"`
	UpdatedAt time.Time     `firestore:"updated_at"`
}

// ActiveAlert is an alert an audit raised that no later audit cleared: one
// per alert name and tenant ("" for an alert about the whole pipeline).
type ActiveAlert struct {
	Name     string    `firestore:"name"`
	Tenant   string    `firestore:"tenant,omitempty"`
	Agent    string    `firestore:"agent,omitempty"` // of a per-agent alert
	Section  string    `firestore:"section"`
	Severity string    `firestore:"severity"`
	Message  string    `firestore:"message"`
	RaisedAt time.Time `firestore:"raised_at"`
	RaisedBy string    `firestore:"raised_by"` // the run id
}

// Key names the alert across audits. A per-agent alert's key adds the
// agent; the others keep the keys they always had.
func (a ActiveAlert) Key() string {
	if a.Agent != "" {
		return a.Name + "/" + a.Tenant + "/" + a.Agent
	}
	return a.Name + "/" + a.Tenant
}

// alertChanges compares r's alerts with those active before it: next is
// the active set after r, changes the notifications of what was raised or
// cleared. An active alert of a section that did not complete in r is
// carried over, neither cleared nor raised again.
func alertChanges(prev []ActiveAlert, r *audit.Report) (next []ActiveAlert, changes []event.Notification) {
	complete := map[string]bool{}
	for _, sec := range r.Sections {
		complete[sec.Name] = sec.Status == audit.StatusComplete
	}
	current := map[string]ActiveAlert{}
	var order []string
	for _, f := range r.Findings {
		if !f.Alert {
			continue
		}
		a := ActiveAlert{Name: f.Name, Tenant: f.Tenant, Agent: f.Agent, Section: f.Section, Severity: f.Severity, Message: f.Message,
			RaisedAt: r.FinishedAt, RaisedBy: r.RunID}
		if _, ok := current[a.Key()]; !ok {
			order = append(order, a.Key())
			current[a.Key()] = a
		}
	}
	was := map[string]bool{}
	for _, a := range prev {
		was[a.Key()] = true
		switch {
		case current[a.Key()] != (ActiveAlert{}):
			next = append(next, a) // still raised: since when it first was
		case !complete[a.Section]:
			next = append(next, a)
		default:
			changes = append(changes, alertNotification(event.NotifyAlertCleared, a, r))
		}
	}
	for _, k := range order {
		if a := current[k]; !was[k] {
			next = append(next, a)
			changes = append(changes, alertNotification(event.NotifyAlertRaised, a, r))
		}
	}
	slices.SortFunc(next, func(a, b ActiveAlert) int { return strings.Compare(a.Key(), b.Key()) })
	return next, changes
}
