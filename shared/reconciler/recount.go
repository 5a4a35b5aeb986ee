package reconciler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jsdlq/jsdlq/shared/store"
)

// RecountOptions bound a full recount (Handler.Recount).
type RecountOptions struct {
	// From and To: the hours recounted (whole hours covering [From, To));
	// zero To is now, zero From is To minus the window (Config.Window plus
	// the hour in progress).
	From, To time.Time
	// Budget stops the recount before the next hour once spent (default:
	// the configured time budget); the hours not reached are reported, and
	// a recount from the first of them continues.
	Budget time.Duration
	// PageSize is how many entries one query reads (default: the
	// configured page size).
	PageSize int
	// DryRun reports the disagreeing hours without rewriting them.
	DryRun bool
	// Progress, when set, is called after each hour.
	Progress func(store.HourRecount)
}

// RecountResult is what a recount found and did.
type RecountResult struct {
	From, To time.Time
	DryRun   bool
	// Hours are the hours recounted, oldest first.
	Hours []store.HourRecount
	// Entries is the number of entries read.
	Entries int64
	// Disagreed and Rewritten count the hours whose metrics disagreed with
	// their entries and those rewritten.
	Disagreed, Rewritten int
	// NotReached are the hours the budget left (oldest first); empty when
	// the recount is complete.
	NotReached []string
}

// ErrRecountScope: a recount's window is empty or reversed.
var ErrRecountScope = errors.New("reconcile: recount window is empty")

// Recount is the explicit, bounded full recount of the aggregates: hour
// by hour it reads every entry created in the hour and the hour's metrics
// in one transaction (store.RecountHour) and rewrites the hours whose
// metrics, tenant counters included, disagree with the entries, reporting
// each. Reconcile's runs never read the entries for tenant health; this is
// the repair for what they cannot see (a counter written outside the
// transactions, an entry deleted by hand, replays published or recovered
// whose counts were lost before the counts moved into the transitions).
// It takes the run lease unless dry, so it never races a reconcile run's
// own repairs.
func (h *Handler) Recount(ctx context.Context, o RecountOptions) (*RecountResult, error) {
	now := h.now().UTC()
	if o.To.IsZero() {
		o.To = now
	}
	if o.From.IsZero() {
		o.From = o.To.Truncate(time.Hour).Add(-h.cfg.Window)
	}
	orDefault(&o.Budget, h.cfg.TimeBudget)
	orDefault(&o.PageSize, h.cfg.PageSize)
	rc := store.NewRecount(o.From, o.To)
	res := &RecountResult{From: rc.From, To: rc.To, DryRun: o.DryRun}
	hours := rc.HourIDs()
	if len(hours) == 0 {
		return res, fmt.Errorf("%w: %s..%s", ErrRecountScope, o.From.Format(time.RFC3339), o.To.Format(time.RFC3339))
	}
	if !o.DryRun {
		release, err := h.takeLease(ctx, h.log, "recount-"+NewRunID(now), o.Budget+2*time.Minute)
		if err != nil {
			return res, err
		}
		defer release()
	}
	deadline := now.Add(o.Budget)
	for i, id := range hours {
		if !h.now().Before(deadline) {
			res.NotReached = hours[i:]
			break
		}
		hour, err := time.Parse(store.HourLayout, id)
		if err != nil {
			return res, fmt.Errorf("reconcile: recount hour %q: %w", id, err)
		}
		hr, err := h.store.RecountHour(ctx, hour, o.PageSize, o.DryRun)
		if err != nil {
			return res, err
		}
		res.Hours = append(res.Hours, hr)
		res.Entries += hr.Entries
		if !hr.Agreed {
			res.Disagreed++
		}
		if hr.Rewritten {
			res.Rewritten++
			h.log.InfoContext(ctx, "reconcile: recount rewrote an hour", "hour", id, "entries", hr.Entries, "was", hr.Stored.Total, "now", hr.Recount.Total)
		}
		if o.Progress != nil {
			o.Progress(hr)
		}
	}
	return res, nil
}
