package reconciler

import (
	"context"
	"fmt"
	"time"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// held releases entries held back by their tenant's breaker once the
// breaker lets them through: all of them when it is closed again, exactly
// one (the probe) when it is half-open. Nothing else releases them when the
// tenant sends no new failures.
func (r *run) held(ctx context.Context, sec *audit.Section) error {
	if r.h.tasks == nil {
		return fmt.Errorf("%w: no Cloud Tasks client", errSkipped)
	}
	var f *audit.Finding
	refused := map[string]bool{} // tenants whose breaker admits nothing more this run
	return r.eachEntry(ctx, sec, store.Held, &r.state.Held, func(e *store.Entry, _ time.Time) error {
		if refused[e.Tenant] {
			return nil
		}
		ok, probe, fresh, err := r.admit(ctx, e)
		if err != nil {
			return err
		}
		if !ok {
			refused[e.Tenant] = true
			return nil
		}
		if probe {
			// Half-open: one probe, then the breaker waits for it.
			refused[e.Tenant] = true
		}
		f = r.repairing(f, audit.FindingHeldReleased, SectionHeld, "held entries whose tenant breaker lets them through again", "release")
		released := r.plan(f, e.ID) && r.release(ctx, f.Repair, e, probe)
		if fresh && !released && !r.dry {
			// This run made it the probe, but it is not sent (it moved
			// on since the page was read, or this run plans no more):
			// give the probe back, or the tenant's other held entries
			// wait until the probe is settled as died. A probe someone
			// else made (an operator's probe now) stays theirs.
			if err := r.h.store.ReturnProbe(ctx, e.Tenant, e.ID); err != nil {
				f.Repair.Note(fmt.Sprintf("%s: probe not given back (reconcile settles it): %v", e.ID, err))
				return nil
			}
			refused[e.Tenant] = false
		}
		return nil
	})
}

// admit asks the tenant's breaker (fresh: this call made e its probe); a
// dry run only reads it.
func (r *run) admit(ctx context.Context, e *store.Entry) (ok, probe, fresh bool, err error) {
	if !r.dry {
		return r.h.store.BreakerAdmitNew(ctx, e.Tenant, e.ID, By)
	}
	b, err := r.h.store.GetBreaker(ctx, e.Tenant)
	if err != nil {
		return false, false, false, err
	}
	switch {
	case b.State == store.BreakerClosed:
		return true, false, false, nil
	case b.State == store.BreakerHalfOpen && (b.ProbeEntry == "" || b.ProbeEntry == e.ID):
		return true, true, false, nil
	}
	return false, false, false, nil
}

// release schedules a held entry under its next unused task name and
// creates the task (recreate handles a name that turns out to be spent); it
// reports whether the entry moved.
func (r *run) release(ctx context.Context, rp *audit.Repair, e *store.Entry, probe bool) bool {
	attempt := e.Replays + 1
	if _, n, err := tasks.ParseName(shortTask(e.TaskName)); err == nil {
		attempt = max(attempt, n+1) // a held entry's old task was consumed
	}
	now := r.now()
	cur, err := r.h.store.Transition(ctx, e.ID, store.Change{
		From: store.MoveRelease.From, To: store.Scheduled, By: By,
		Note: "tenant breaker admits it again",
		Apply: func(c *store.Entry) error {
			c.TaskName, c.NextRetryAt, c.BreakerProbe = tasks.Name(c.ID, attempt), now, probe
			return nil
		},
	})
	if !applied(rp, e.ID, err) {
		return false
	}
	r.recreate(ctx, rp, cur)
	return true
}
