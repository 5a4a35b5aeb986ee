package redrive

import (
	"context"
	"errors"
	"fmt"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
)

// Actions are the operator actions a redrive takes, and the authority rule
// it plans by (*operator.Operator).
type Actions interface {
	Authority
	Approve(ctx context.Context, tenant, id string, ed operator.Edits) (*store.Entry, error)
	ReplayNowIn(ctx context.Context, tenant, id string, by authority.Actor, asked operator.Asked) (*store.Entry, error)
}

// ErrStopped ends a run that stopped before its end with its progress
// saved: its context was cancelled (Ctrl-C, the console shutting down) or
// Save said so (the console run was cancelled). Run it again on the same
// progress to continue.
var ErrStopped = errors.New("redrive: stopped before the end")

// RunStore is what a run reads (*store.Store): the pages it walks and the
// entry a resumed run's write-ahead names.
type RunStore interface {
	Entries(ctx context.Context, q store.Query) (store.Page, error)
	GetMeta(ctx context.Context, id string) (*store.Entry, error)
}

// Run is one redrive's work on its progress.
type Run struct {
	Store   RunStore
	Actions Actions
	// Query is the filter; Run sets its order (newest first, the order of
	// the cursor), view and page size.
	Query store.Query
	// Include are the opt-ins (OptInApproverRules).
	Include []string
	// Scope is the tenant the actor is limited to (store.AllTenants: all).
	Scope string
	// By acts, in their role: every transition is recorded in their name
	// and role, the role decides what they may act on, and the resume
	// check looks for the name.
	By       authority.Actor
	Rate     float64
	Progress *store.RedriveProgress
	// Save keeps Progress where the caller keeps it: before each action
	// (Progress.Pending set: the write-ahead), at each page end and when
	// the run stops. An error wrapping ErrStopped stops the run; any other
	// error ends it with that error.
	Save func(ctx context.Context) error

	// Observers, each optional: BeforeAct after an action's write-ahead,
	// AfterAct once its outcome is counted (seen is Progress.Seen then),
	// Failed for an action that returned an error (one recorded with its
	// task left to reconcile too, counted as done: operator.ErrTaskNotCreated).
	BeforeAct func(seen int)
	AfterAct  func(seen int)
	Failed    func(id string, err error)
}

// CursorOf is an entry's position in a redrive's order (newest first).
func CursorOf(e *store.Entry) store.Cursor { return store.Cursor{At: e.CreatedAt, ID: e.ID} }

// Do runs the redrive from its progress to the end (nil: Progress says
// everything is passed), or until it stops (ErrStopped), or fails.
//
// Each entry is acted on at most once however often the run stops and
// resumes: entries up to the cursor are passed, and the write-ahead names
// the one entry in hand, which the next run settles first (Settle).
func (r *Run) Do(ctx context.Context) error {
	p := r.Progress
	// The actions run to their end even when ctx ends meanwhile, and so
	// do the reads that feed them and the saves that record them.
	actx := context.WithoutCancel(ctx)
	stop := func() error {
		if err := r.Save(actx); err != nil && !errors.Is(err, ErrStopped) {
			return err
		}
		return ErrStopped
	}
	if p.Pending != nil {
		if err := r.settle(actx, true); err != nil {
			return err
		}
		if err := r.Save(actx); err != nil {
			return err
		}
	}
	b := NewBucket(r.Rate)
	q := r.Query
	q.Order, q.View, q.Limit = store.NewestFirst, store.ListView, 100
	for {
		if ctx.Err() != nil {
			return stop()
		}
		q.After = p.Cursor
		page, err := r.Store.Entries(actx, q)
		if err != nil {
			return err
		}
		for _, e := range page.Entries {
			s, err := StepFor(actx, r.Actions, r.By, e, r.Include)
			if err != nil {
				return err
			}
			if s.Action == "" {
				p.LeftAlone++
				p.Seen++
				p.Cursor = CursorOf(e)
				continue
			}
			if err := b.Wait(ctx); err != nil {
				return stop()
			}
			// Write-ahead: the progress names the entry before the
			// action, so a crash in between leaves it decidable.
			p.Pending = &store.RedrivePending{At: CursorOf(e), Action: s.Action, UpdatedAt: e.UpdatedAt}
			if err := r.Save(actx); err != nil {
				return err
			}
			if r.BeforeAct != nil {
				r.BeforeAct(p.Seen)
			}
			r.tally(s.Action, r.act(actx, e.ID, s.Action, e.Status), e.ID)
			p.Pending = nil
			p.Cursor = CursorOf(e)
			p.Seen++
			if r.AfterAct != nil {
				r.AfterAct(p.Seen)
			}
		}
		if page.Next.IsZero() {
			return nil
		}
		// Left-alone entries are not saved one by one; the page end
		// saves them (or the next action's write-ahead does).
		if err := r.Save(actx); err != nil {
			return err
		}
	}
}

// act performs one action on an entry, provided it is still in the status
// it was listed in (the plan's step was decided for that status; a page is
// listed once and acted on at the rate, so long after for a slow one): an
// entry moved on meanwhile is ErrWrongStatus, counted as skipped.
func (r *Run) act(ctx context.Context, id, action string, listed store.Status) error {
	return Act(ctx, r.Actions, r.Scope, r.By, id, action, listed)
}

// Act performs one redrive action (a Step's) on entry id of scope by by,
// provided the entry is still in the status listed it was decided for: the
// one way a redrive acts, for a run and for the console's selected rows.
func Act(ctx context.Context, a Actions, scope string, by authority.Actor, id, action string, listed store.Status) error {
	asked := operator.Asked{Only: []store.Status{listed}}
	var err error
	switch action {
	case Approve:
		_, err = a.Approve(ctx, scope, id, operator.Edits{By: by, Asked: asked})
	case RunNow:
		_, err = a.ReplayNowIn(ctx, scope, id, by, asked)
	default:
		err = fmt.Errorf("redrive: unknown action %q", action)
	}
	return err
}

func (r *Run) tally(action string, err error, id string) {
	if Tally(r.Progress, action, err) && r.Failed != nil {
		r.Failed(id, err)
	}
}

// SettleUnacted decides the pending entry of a run that is not going on
// (cancelled) without acting: counted if the action happened, otherwise
// left as it is (the cursor stays before it).
func (r *Run) SettleUnacted(ctx context.Context) error {
	if r.Progress.Pending == nil {
		return nil
	}
	return r.settle(ctx, false)
}

// settle decides the entry a previous run named in its write-ahead and may
// or may not have acted on before it stopped. Unchanged since it was
// listed (same updated_at): the action did not happen; do it now (act).
// Changed, with a transition by this redrive's actor after that: the
// action happened; count it. Changed otherwise: someone else moved it;
// skip it. Either way it is acted on at most once.
func (r *Run) settle(ctx context.Context, act bool) error {
	p, pd := r.Progress, r.Progress.Pending
	cur, err := r.Store.GetMeta(ctx, pd.At.ID)
	if err == nil && r.Scope != store.AllTenants && cur.Tenant != r.Scope {
		err = fmt.Errorf("%w: entry %q", store.ErrNotFound, pd.At.ID)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		p.Skipped++
	case err != nil:
		return err
	case cur.UpdatedAt.Equal(pd.UpdatedAt):
		if !act {
			p.Pending = nil
			return nil
		}
		r.tally(pd.Action, r.act(ctx, pd.At.ID, pd.Action, cur.Status), pd.At.ID)
	case ActedSince(cur, r.By.Name, pd.UpdatedAt):
		if pd.Action == Approve {
			p.Approved++
		} else {
			p.RunNow++
		}
	default:
		p.Skipped++
	}
	p.Pending = nil
	p.Cursor = pd.At
	p.Seen++
	return nil
}
