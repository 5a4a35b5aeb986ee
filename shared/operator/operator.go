// Package operator holds the actions a human takes on failure-log entries
// (dlqctl uses it): Approve a replay (optionally with an edited payload or
// headers), Discard an entry, ReplayNow instead of waiting for the scheduled
// delay, and the two explicit ways past an open tenant breaker, CloseBreaker
// and ProbeNow (docs/runbook.md, "The gates and their overrides").
//
// Every action is scoped to a tenant: an entry of another tenant is
// ErrNotFound, exactly as an id that does not exist, and is neither changed
// nor described. Tenant "" (store.AllTenants) is an operator of every
// tenant. Every action is taken by an actor in a role, which the authority
// rule checks (authority.go: ErrPermissionDenied) and the history records.
// Every status change is a transaction that checks the tenant first, the
// previous status second and the actor's authority third; Cloud Tasks work
// happens after the commit, and is safe to repeat (task names are derived
// from entry and attempt).
package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jsdlq/jsdlq/shared/authority"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// Errors. ErrNotFound and ErrWrongStatus are the store's, so callers test
// either package's.
var (
	ErrNotFound       = store.ErrNotFound
	ErrWrongStatus    = store.ErrWrongStatus
	ErrPayloadMissing = errors.New("operator: the entry has no payload to replay; approve it with one")
	ErrBadEdit        = errors.New("operator: invalid edit")
	ErrNoActor        = errors.New("operator: who acts must be named")
	// ErrTaskNotCreated: the action is recorded (the entry is scheduled),
	// but its replay task could not be created; ReplayNow, or reconcile's
	// next run, creates it. The returned entry is the one recorded.
	ErrTaskNotCreated = errors.New("operator: the action is recorded; its replay task is not created yet")
)

// Statuses each action accepts: its move's in the status table
// (store.MoveApprove, MoveDiscard, MoveRunNow say why).
var (
	// Approvable: waiting for a human (policy), quarantined (poison, fixed
	// payload), escalated (permanent, or the payload was missing: supply
	// it).
	Approvable = store.MoveApprove.From
	// Discardable: everything not recovered, not discarded and not
	// mid-replay.
	Discardable = store.MoveDiscard.From
	// Runnable: a scheduled replay runs now; a held one is released now.
	Runnable = store.MoveRunNow.From
)

// Scheduler creates replay tasks (tasks.Scheduler).
type Scheduler interface {
	Schedule(ctx context.Context, r tasks.Request) (name string, created bool, err error)
	FullName(taskID string) string
}

// Runner runs a task now: the scheduler of its queue (tasks.Scheduler.RunTask).
type Runner interface {
	RunTask(ctx context.Context, req *cloudtaskspb.RunTaskRequest, opts ...gax.CallOption) (*cloudtaskspb.Task, error)
}

// Store is the part of the store the actions use (*store.Store): the
// entry's moves scoped to a tenant, its payload versions, the tenant's
// breaker, the policy in force (who may act) and the store's clock.
type Store interface {
	GetMeta(ctx context.Context, id string) (*store.Entry, error)
	TransitionScoped(ctx context.Context, id, tenant string, c store.Change, edit *store.Edit) (*store.Entry, error)
	VersionPayload(ctx context.Context, e *store.Entry, n int) ([]byte, error)
	BreakerClose(ctx context.Context, tenant string, by authority.Actor, reason string) (*store.Breaker, error)
	BreakerProbeNow(ctx context.Context, tenant, entryID string, by authority.Actor, reason string) (*store.Breaker, error)
	ReleaseProbe(ctx context.Context, e *store.Entry, by string) (released bool, err error)
	PolicyInForce(ctx context.Context) (store.PolicyInForce, error)
	Now() time.Time
}

// Operator performs the actions.
type Operator struct {
	store    Store
	sched    Scheduler
	runner   Runner
	policies *policyCache
}

// Option configures New.
type Option func(*Operator)

// WithRunner lets ReplayNow run an existing task at once (RunTask); without
// it ReplayNow can only create missing tasks, due now.
func WithRunner(r Runner) Option { return func(o *Operator) { o.runner = r } }

// New returns an Operator.
func New(s Store, sched Scheduler, opts ...Option) *Operator {
	o := &Operator{store: s, sched: sched}
	for _, f := range opts {
		f(o)
	}
	if o.policies == nil {
		o.policies = &policyCache{read: inForce(s), refresh: DefaultPolicyRefresh}
	}
	return o
}

// Edits are an operator's changes to a replay: a new payload version
// (docs/replay.md, "Payload versions"), based on the one the entry
// replays, which is kept as it is. A nil Payload keeps the base's bytes; a
// non-nil one (even empty) replaces them in the new version.
type Edits struct {
	Payload    []byte
	SetHeaders map[string]string
	// By approves, in their role (the rule must grant it).
	By authority.Actor
	// Asked, when set, narrows the approval to one decision of the entry.
	Asked Asked
	// Base, when set, is the payload version the edit was made on (what a
	// preview showed): the approval is refused (ErrWrongStatus) when the
	// entry replays another by now.
	Base int
	// Confirm are the risks of the edit (Risks) the approver confirmed; an
	// edit with a risk not confirmed is refused (ErrUnconfirmed).
	Confirm []Risk
}

// Asked narrows an action to one decision of the entry: the statuses it
// may be in (all the action allows when Only is empty) and, when EnteredAt
// is set, the moment it entered its status. An answer to a triage task
// applies to the decision it was asked about, never to a later one of the
// same entry, even one into the same status (escalated again after an
// approved replay was refused); a redrive acts on an entry as it listed it.
type Asked struct {
	Only      []store.Status
	EnteredAt time.Time
}

// check refuses, with ErrWrongStatus, an entry that entered its status at
// another moment than a.EnteredAt (its last transition is the move into
// it; Firestore keeps times to the microsecond).
func (a Asked) check(e *store.Entry) error {
	if a.EnteredAt.IsZero() || len(e.History) == 0 {
		return nil
	}
	at := e.History[len(e.History)-1].At
	if !at.Truncate(time.Microsecond).Equal(a.EnteredAt.Truncate(time.Microsecond)) {
		return fmt.Errorf("%w: entry %s is %s since %s, not the decision of %s asked about", ErrWrongStatus, e.ID, e.Status,
			at.Format(time.RFC3339Nano), a.EnteredAt.Format(time.RFC3339Nano))
	}
	return nil
}

// Approve schedules a replay of an entry that waits for a human: a new task
// (attempt n+1, due now) is created and the entry is scheduled. Edits make
// a new payload version in the same transaction, which the replay
// publishes; the history names the version approved, its author, and what
// the edit changed (the size and sha256 of the old and new payload, the
// header names set). An edit with a risk (an empty payload, invalid JSON
// for a JSON one) needs it confirmed in ed.Confirm, else nothing changes.
// The replay it schedules is not re-checked against the policy (the
// approval answers the policy's question) but still meets the tenant
// breaker and the idempotency record: with the breaker open it is held.
// Only an actor whose role the entry's rule grants approves
// (ErrPermissionDenied), checked in the same transaction.
//
// Approving twice is not two versions: the second finds the entry
// scheduled (ErrWrongStatus), and the version is made in the transaction
// that moves it there.
//
// If the task cannot be created after the commit, the entry is scheduled and
// the error says so; ReplayNow (or reconcile) creates the task.
func (o *Operator) Approve(ctx context.Context, tenant, id string, ed Edits) (*store.Entry, error) {
	if strings.TrimSpace(ed.By.Name) == "" {
		return nil, ErrNoActor
	}
	if _, err := checkHeaders(ed.SetHeaders); err != nil {
		return nil, err
	}
	if len(ed.Payload) > store.MaxPayload {
		return nil, fmt.Errorf("operator: approve %s: %w: %d bytes, at most %d", id, store.ErrTooLarge, len(ed.Payload), store.MaxPayload)
	}
	pol, err := o.policies.current(ctx)
	if err != nil {
		return nil, err
	}
	edit := &store.Edit{Payload: ed.Payload, Headers: ed.SetHeaders, By: ed.By.Name, Role: ed.By.Role, Base: ed.Base}
	if ed.Payload != nil {
		// The risks are judged against the version the entry replays now;
		// the transaction refuses the edit if it replays another by then.
		base, confirmed, err := o.checkRisks(ctx, tenant, id, ed)
		if err != nil {
			return nil, fmt.Errorf("operator: approve %s: %w", id, err)
		}
		edit.Base, edit.Confirmed = base, confirmed
	}
	note := store.ApprovalNote + " by " + ed.By.String()
	var attempt int
	e, err := o.store.TransitionScoped(ctx, id, tenant, store.Change{
		From: store.MoveApprove.Only(ed.Asked.Only...),
		To:   store.Scheduled,
		By:   ed.By.Name,
		Role: ed.By.Role,
		Note: note,
		Apply: func(e *store.Entry) error {
			if err := ed.Asked.check(e); err != nil {
				return err
			}
			if err := permit(pol, ed.By, authority.Approve, e); err != nil {
				return err
			}
			if v, err := e.ReplayVersion(); err == nil && v.Missing && ed.Payload == nil {
				return ErrPayloadMissing
			}
			attempt = NextAttempt(e)
			e.TaskName = tasks.Name(e.ID, attempt)
			e.NextRetryAt = o.store.Now()
			e.BreakerProbe = false
			return nil
		},
	}, edit)
	if err != nil {
		return nil, fmt.Errorf("operator: approve %s: %w", id, err)
	}
	if err := o.schedule(ctx, e, attempt); err != nil {
		return e, err
	}
	return e, nil
}

// Discard ends an entry: discarded, resolved now, the reason in its
// history. A pending task finds the entry discarded and does nothing.
func (o *Operator) Discard(ctx context.Context, tenant, id, reason string, by authority.Actor) (*store.Entry, error) {
	return o.DiscardIn(ctx, tenant, id, reason, by, Asked{})
}

// DiscardIn is Discard of the decision asked about.
func (o *Operator) DiscardIn(ctx context.Context, tenant, id, reason string, by authority.Actor, asked Asked) (*store.Entry, error) {
	if strings.TrimSpace(by.Name) == "" {
		return nil, ErrNoActor
	}
	reason, err := Reason("a discard", reason)
	if err != nil {
		return nil, err
	}
	pol, err := o.policies.current(ctx)
	if err != nil {
		return nil, err
	}
	e, err := o.store.TransitionScoped(ctx, id, tenant, store.Change{
		From: store.MoveDiscard.Only(asked.Only...), To: store.Discarded, By: by.Name, Role: by.Role, Note: "discarded: " + reason,
		Apply: func(e *store.Entry) error {
			if err := asked.check(e); err != nil {
				return err
			}
			return permit(pol, by, authority.Discard, e)
		},
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("operator: discard %s: %w", id, err)
	}
	// A discarded half-open probe will never report back: reopen the
	// breaker so it picks another probe after its cooldown.
	if _, err := o.store.ReleaseProbe(ctx, e, by.Name); err != nil {
		return e, fmt.Errorf("operator: entry %s discarded; its breaker probe was not released: %w", id, err)
	}
	return e, nil
}

// ReplayNow runs a scheduled replay at once (RunTask) instead of after its
// delay, or releases a held entry with a new task due now. A scheduled
// entry whose task is gone gets it recreated. Unlike Approve it does not
// bypass the policy or the breaker: the replay meets both when it runs.
func (o *Operator) ReplayNow(ctx context.Context, tenant, id string, by authority.Actor) (*store.Entry, error) {
	return o.ReplayNowIn(ctx, tenant, id, by, Asked{})
}

// ReplayNowIn is ReplayNow of the decision asked about: a redrive that
// listed the entry scheduled does not release it once a breaker has held it
// meanwhile.
func (o *Operator) ReplayNowIn(ctx context.Context, tenant, id string, by authority.Actor, asked Asked) (*store.Entry, error) {
	if strings.TrimSpace(by.Name) == "" {
		return nil, ErrNoActor
	}
	pol, err := o.policies.current(ctx)
	if err != nil {
		return nil, err
	}
	attempt, fresh := 0, false
	e, err := o.store.TransitionScoped(ctx, id, tenant, store.Change{
		From: store.MoveRunNow.Only(asked.Only...), To: store.Scheduled, By: by.Name, Role: by.Role, Note: "replay now requested by " + by.String(),
		Apply: func(e *store.Entry) error {
			if err := asked.check(e); err != nil {
				return err
			}
			if err := permit(pol, by, authority.ReplayNow, e); err != nil {
				return err
			}
			attempt, fresh = attemptOf(e.TaskName), false
			if e.Status == store.Held || e.TaskName == "" || attempt == 0 {
				attempt, fresh = NextAttempt(e), true
				e.TaskName = tasks.Name(e.ID, attempt)
			}
			e.NextRetryAt = o.store.Now()
			return nil
		},
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("operator: replay now %s: %w", id, err)
	}
	if fresh || o.runner == nil {
		return e, o.schedule(ctx, e, attempt)
	}
	_, err = o.runner.RunTask(ctx, &cloudtaskspb.RunTaskRequest{Name: o.sched.FullName(e.TaskName)})
	switch status.Code(err) {
	case codes.OK:
		return e, nil
	case codes.NotFound:
		// The task was lost; create it (due now) under its own name.
		name, created, err := o.sched.Schedule(ctx, tasks.Request{EntryID: e.ID, Attempt: attempt, At: o.store.Now()})
		if err != nil {
			return e, fmt.Errorf("%w: entry %s is scheduled but its task %s is gone and could not be recreated: %w", ErrTaskNotCreated, id, e.TaskName, err)
		}
		if created {
			return e, nil
		}
		// The name exists again or is still reserved after it ran: a
		// task of that name cannot run again, so move to the next attempt.
		return o.renew(ctx, tenant, e, name, by)
	default:
		return e, fmt.Errorf("operator: run task %s of entry %s: %w", e.TaskName, id, err)
	}
}

// ProbeNow sends entry id as its tenant breaker's one probe now: the
// breaker turns half-open with this entry as the probe (whatever its
// cooldown), and the entry, held or scheduled, gets a task due now. The
// replay still meets the policy and the idempotency record. Who and why are
// recorded in the breaker's and the entry's history. Breaker overrides are
// for operators and approvers.
func (o *Operator) ProbeNow(ctx context.Context, tenant, id string, by authority.Actor, reason string) (*store.Entry, error) {
	if strings.TrimSpace(by.Name) == "" {
		return nil, ErrNoActor
	}
	reason, err := Reason("a breaker probe", reason)
	if err != nil {
		return nil, err
	}
	if err := authority.May(by, authority.Breaker, authority.Grant{}); err != nil {
		return nil, fmt.Errorf("operator: probe %s: %w", id, err)
	}
	cur, err := o.store.GetMeta(ctx, id)
	if err == nil && tenant != store.AllTenants && cur.Tenant != tenant {
		err = fmt.Errorf("%w: entry %q", ErrNotFound, id)
	}
	if err == nil && !slices.Contains(store.MoveProbe.From, cur.Status) {
		err = fmt.Errorf("%w: entry %s is %s; only a held or scheduled entry can be the probe", ErrWrongStatus, id, cur.Status)
	}
	if err != nil {
		return nil, fmt.Errorf("operator: probe %s: %w", id, err)
	}
	if _, err := o.store.BreakerProbeNow(ctx, cur.Tenant, id, by, reason); err != nil {
		return nil, fmt.Errorf("operator: probe %s: %w", id, err)
	}
	attempt := 0
	e, err := o.store.TransitionScoped(ctx, id, tenant, store.Change{
		From: store.MoveProbe.From, To: store.Scheduled, By: by.Name, Role: by.Role,
		Note: "breaker probe sent by " + by.String() + ": " + reason,
		Apply: func(e *store.Entry) error {
			attempt = NextAttempt(e)
			e.TaskName = tasks.Name(e.ID, attempt)
			e.NextRetryAt = o.store.Now()
			e.BreakerProbe = true
			return nil
		},
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("operator: probe %s: the breaker waits for it, but the entry was not scheduled: %w", id, err)
	}
	return e, o.schedule(ctx, e, attempt)
}

// CloseBreaker closes tenant's open or half-open breaker now; held entries
// of the tenant are released by reconcile's next run (or ReplayNow). Who
// and why are recorded in the breaker's history. Breaker overrides are for
// operators and approvers.
func (o *Operator) CloseBreaker(ctx context.Context, tenant string, by authority.Actor, reason string) (*store.Breaker, error) {
	if strings.TrimSpace(by.Name) == "" {
		return nil, ErrNoActor
	}
	reason, err := Reason("a breaker close", reason)
	if err != nil {
		return nil, err
	}
	if err := authority.May(by, authority.Breaker, authority.Grant{}); err != nil {
		return nil, fmt.Errorf("operator: close breaker of %s: %w", tenant, err)
	}
	b, err := o.store.BreakerClose(ctx, tenant, by, reason)
	if err != nil {
		return nil, fmt.Errorf("operator: close breaker of %s: %w", tenant, err)
	}
	return b, nil
}

// renew gives a scheduled entry whose task name is spent a new attempt.
func (o *Operator) renew(ctx context.Context, tenant string, e *store.Entry, spent string, by authority.Actor) (*store.Entry, error) {
	old := e.TaskName
	attempt := 0
	e, err := o.store.TransitionScoped(ctx, e.ID, tenant, store.Change{
		From: store.MoveNewAttempt.From, To: store.Scheduled, By: by.Name, Role: by.Role, Note: "task " + old + " is spent; new attempt",
		Apply: func(cur *store.Entry) error {
			if cur.TaskName != old {
				return fmt.Errorf("%w: entry %s was rescheduled meanwhile (task %s)", ErrWrongStatus, cur.ID, cur.TaskName)
			}
			attempt = NextAttempt(cur)
			cur.TaskName = tasks.Name(cur.ID, attempt)
			return nil
		},
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("operator: replay now %s (task %s spent): %w", old, spent, err)
	}
	return e, o.schedule(ctx, e, attempt)
}

func (o *Operator) schedule(ctx context.Context, e *store.Entry, attempt int) error {
	if _, _, err := o.sched.Schedule(ctx, tasks.Request{EntryID: e.ID, Attempt: attempt, At: e.NextRetryAt}); err != nil {
		return fmt.Errorf("%w: entry %s is scheduled, but task %s was not created (ReplayNow or reconcile creates it): %w", ErrTaskNotCreated, e.ID, e.TaskName, err)
	}
	return nil
}

// NextAttempt is the replay attempt a new task of e gets: one more than any
// attempt already used, so a task name is never reused (Cloud Tasks refuses
// a name for about an hour after its task ran).
func NextAttempt(e *store.Entry) int {
	n := max(e.Replays, attemptOf(e.TaskName))
	claims := 0
	for _, t := range e.History {
		if t.To == string(store.Replaying) && t.From != string(store.Replaying) {
			claims++
		}
	}
	return max(n, claims) + 1
}

func attemptOf(taskName string) int {
	if taskName == "" {
		return 0
	}
	_, n, err := tasks.ParseName(taskName)
	if err != nil {
		return 0
	}
	return n
}

// checkHeaders validates header edits and returns their names, sorted.
// Names replay owns (Nats-*, Jsdlq-*) are refused: replay drops them.
func checkHeaders(h map[string]string) ([]string, error) {
	names := make([]string, 0, len(h))
	for name, v := range h {
		switch {
		case name == "" || strings.ContainsAny(name, ": \t\r\n") || !printable(name):
			return nil, fmt.Errorf("%w: header name %q", ErrBadEdit, name)
		case jevent.IsControlHeader(name):
			return nil, fmt.Errorf("%w: header %q is set by JetStream or jsdlq, not by an edit", ErrBadEdit, name)
		case jevent.DefaultConventions.IsIdentityHeader(name):
			return nil, fmt.Errorf("%w: header %q names the task's tenant or identity, which the breaker and the completion record were checked against; it cannot be edited", ErrBadEdit, name)
		case strings.ContainsAny(v, "\r\n"):
			return nil, fmt.Errorf("%w: header %q: value contains a line break", ErrBadEdit, name)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
