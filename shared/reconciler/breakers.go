package reconciler

import (
	"context"
	"fmt"
	"time"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/store"
)

// MaxBreakers bounds the breakers read per run by default (Config.MaxBreakers):
// a breaker is per tenant and only open or half-open ones are read.
const MaxBreakers = 1000

// breakers settles half-open probes whose outcome is overdue, half-opens
// breakers open past their cooldown and raises the tenant alert for
// breakers that have not been closed for too long.
func (r *run) breakers(ctx context.Context, sec *audit.Section) error {
	limit := r.h.cfg.MaxBreakers
	list, err := r.h.store.ListBreakers(ctx, store.BreakerStatesNotClosed(), limit+1)
	if err != nil {
		return err
	}
	if len(list) > limit {
		// Partial, not complete: the alerts of the breakers not read are
		// kept as they were, not cleared as if they had closed.
		list = list[:limit]
		sec.Status = audit.StatusPartial
		sec.Note = fmt.Sprintf("more than %d open breakers; the first %d checked", limit, limit)
	}
	now := r.now()
	var stale, settled *audit.Finding
	for _, b := range list {
		sec.Add(b.State, 1)
		r.breakerState[b.Tenant] = b.State
		if r.probeOverdue(b, now) {
			settled = r.repairing(settled, audit.FindingProbeSettled, SectionBreakers,
				fmt.Sprintf("half-open breakers whose probe's outcome was still unknown %s after it was let through", r.h.cfg.ProbeTimeout), "settle_probe")
			if r.plan(settled, b.Tenant) {
				r.settle(ctx, settled.Repair, b)
			}
			if r.breakerState[b.Tenant] == store.BreakerClosed {
				delete(r.breakerState, b.Tenant)
				continue // closed now: nothing more to check
			}
		}
		if since := notClosedSince(b); now.Sub(since) > r.h.cfg.TenantBreakerAlert {
			f := r.finding(audit.AlertTenantBreakerOpen30m, SectionBreakers, b.Tenant,
				fmt.Sprintf("tenant %s's breaker has not closed since %s (%s)", b.Tenant, since.Format(time.RFC3339), b.State))
			f.Example(b.Tenant)
			f.Value, f.Threshold = now.Sub(since).Minutes(), r.h.cfg.TenantBreakerAlert.Minutes()
		}
		if b.State != store.BreakerOpen || now.Sub(b.OpenedAt) <= r.h.cfg.BreakerCooldown {
			continue
		}
		stale = r.repairing(stale, audit.AlertBreakerOpenTooLong, SectionBreakers,
			fmt.Sprintf("breakers open longer than %s without going half-open", r.h.cfg.BreakerCooldown), "half_open")
		if !r.plan(stale, b.Tenant) {
			continue
		}
		nb, err := r.h.store.BreakerAdvance(ctx, b.Tenant, By)
		switch {
		case err != nil:
			stale.Repair.Fail(err)
		case nb.State == store.BreakerHalfOpen:
			stale.Repair.Done++
			r.breakerState[b.Tenant] = nb.State
			r.h.log.InfoContext(ctx, "reconcile: breaker half-opened", "run_id", r.rep.RunID, "tenant", b.Tenant, "opened_at", b.OpenedAt)
		default:
			stale.Repair.Skipped++
			stale.Repair.Note(fmt.Sprintf("%s is %s now", b.Tenant, nb.State))
		}
	}
	return nil
}

// probeOverdue reports whether b is half-open with a probe let through at
// least ProbeTimeout ago: its outcome should have been known long since (a
// probe that died reopens the breaker through classify, one that recovered
// closes it through reconcile's replayed check), so it is lost, or its
// replay never ran.
func (r *run) probeOverdue(b *store.Breaker, now time.Time) bool {
	return b.State == store.BreakerHalfOpen && b.ProbeEntry != "" && !b.ProbeAt.IsZero() && now.Sub(b.ProbeAt) >= r.h.cfg.ProbeTimeout
}

// settle decides an overdue probe (store.SettleProbe): the breaker closes
// when the probe's completion is visible (or a probe without idempotency
// key did not die) and reopens otherwise, so a breaker is never stuck
// half-open waiting for an outcome that is not coming.
func (r *run) settle(ctx context.Context, rp *audit.Repair, b *store.Breaker) {
	outcome, err := r.h.store.SettleProbe(ctx, b.Tenant, r.h.cfg.ProbeTimeout, By)
	switch {
	case err != nil:
		rp.Fail(fmt.Errorf("settle probe of %s: %w", b.Tenant, err))
		return
	case outcome == "":
		rp.Skipped++
		rp.Note(fmt.Sprintf("%s: the probe's outcome arrived or the breaker changed meanwhile", b.Tenant))
		return
	}
	rp.Done++
	state := store.BreakerOpen
	if outcome == store.ProbeRecovered {
		state = store.BreakerClosed
	}
	r.breakerState[b.Tenant] = state
	rp.Note(fmt.Sprintf("%s: probe %s %s, breaker %s", b.Tenant, b.ProbeEntry, outcome, state))
	r.h.log.InfoContext(ctx, "reconcile: breaker probe settled", "run_id", r.rep.RunID, "tenant", b.Tenant,
		"probe_entry", b.ProbeEntry, "probe_at", b.ProbeAt, "outcome", outcome, "breaker", state)
}

// notClosedSince is when the breaker last left closed: half-open probes that
// died reopen it, and the tenant has been impaired all along.
func notClosedSince(b *store.Breaker) time.Time {
	for i := len(b.History) - 1; i >= 0; i-- {
		if b.History[i].From == store.BreakerClosed || b.History[i].From == "" {
			return b.History[i].At
		}
	}
	if len(b.History) > 0 {
		return b.History[0].At // trimmed history: at least that long
	}
	if !b.OpenedAt.IsZero() {
		return b.OpenedAt
	}
	return b.HalfOpenAt
}
