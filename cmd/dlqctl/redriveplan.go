package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/redrive"
	"github.com/jsdlq/jsdlq/shared/store"
)

// plan works out what the rest of the redrive (after its checkpoint's
// cursor, without the entry in hand, which is settled first on its own)
// will do.
func (a *app) plan(ctx context.Context, st *store.Store, cp *checkpoint) (*redrive.Plan, error) {
	q := cp.Filter.query(store.ScanView)
	q.After = cp.Cursor
	skip := ""
	if cp.Pending != nil {
		skip = cp.Pending.At.ID
	}
	// The plan asks the authority rule, which needs the policy only: no
	// scheduler, so a dry run needs no Cloud Tasks configuration.
	return redrive.NewPlan(ctx, st, operator.New(st, nil), cp.actor(), q, cp.Include, skip)
}

// printPlan writes the plan for a person deciding whether to run it: the
// entries it meets, what it does with each, and what each of the three
// gates will then do with the replays it asks for, as things stand now (a
// breaker or the policy may change during the run).
func printPlan(w io.Writer, p *redrive.Plan, cp *checkpoint, resumed bool) {
	scope := "all tenants"
	if cp.Scope != "" {
		scope = "tenant " + cp.Scope + " only"
	}
	outf(w, "redrive plan: filter %s (%s), %.3g/s, by %s\n", cp.Filter, scope, cp.Rate, cp.actor())
	if resumed {
		outf(w, "resuming: %d entries passed already (%s); the plan covers the rest\n", cp.Seen, redrive.Summary(&cp.RedriveProgress))
		if cp.Pending != nil {
			outf(w, "the entry in hand when the run stopped, %s (%s), is settled first: acted on only if unchanged since it was listed\n",
				cp.Pending.At.ID, cp.Pending.Action)
		}
	}
	outf(w, "entries matching: %d\n", p.Matched)
	if p.Matched > 0 {
		outf(w, "  by status    %s\n", countsText(p.ByStatus, 0))
		outf(w, "  by category  %s\n", countsText(p.ByCategory, 0))
		outf(w, "  by tenant    %s\n", countsText(p.ByTenant, 20))
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	outf(tw, "\nredrive acts on %d:\n", p.Acts())
	outf(tw, "  approve\t%d\tawaiting_approval, quarantined, escalated: the approval answers the policy, not the breaker\n", p.Approve)
	outf(tw, "  run now\t%d\tscheduled: the task runs now and meets the policy and the breaker\n", p.RunNow)
	outf(tw, "and leaves alone %d:\n", p.LeftAlone())
	outf(tw, "  held\t%d\tstay held: redrive never releases them; reconcile does once their breaker admits, or dlqctl breaker probe|close\n", p.Held)
	// Excluded and not permitted, by rule (an entry that names none: by
	// its category).
	if len(cp.Include) > 0 {
		outf(tw, "  excluded\t0\t--%s given: the entries whose rule keeps approval for approvers are taken in\n", redrive.OptInFlag)
	} else if len(p.Excluded) == 0 {
		outf(tw, "  excluded\t0\tno entry whose rule keeps approval for approvers (those need --%s)\n", redrive.OptInFlag)
	}
	for _, rule := range store.Ranked(p.Excluded) {
		outf(tw, "  excluded: %s\t%d\tthe rule keeps approval for approvers: needs --%s\n", rule, p.Excluded[rule], redrive.OptInFlag)
	}
	for _, rule := range store.Ranked(p.Denied) {
		outf(tw, "  not permitted: %s\t%d\tthe %s role may not act on them\n", rule, p.Denied[rule], cp.actor().Role)
	}
	outf(tw, "  nothing to do\t%d\treplaying, replayed, recovered, discarded\n", p.Nothing)
	if p.Acts() > 0 {
		outf(tw, "what the gates will do with the %d, as things stand now:\n", p.Acts())
		outf(tw, "  already completed\t%d\tidempotency record: marked recovered, not published\n", p.Completed)
		outf(tw, "  stopped by the policy\t%d\tthe current policy no longer replays them%s: they would need approval\n", p.PolicyStopped(),
			ifSet(len(p.PolicyStops) > 0, " (→ "+countsText(p.PolicyStops, 0)+")"))
		outf(tw, "  held by a breaker\t%d\t%s\n", p.BreakerHolds(), breakerText(p))
		if p.Probes > 0 {
			outf(tw, "  half-open probe\t%d\tthe one replay a half-open breaker lets through\n", p.Probes)
		}
		outf(tw, "  replayed\t%d\tpublished to their work stream\n", p.Replays)
	}
	tw.Flush()
}

// breakerText names the breakers that hold replays of this plan.
func breakerText(p *redrive.Plan) string {
	if len(p.BreakerHeld) == 0 {
		return "no breaker of these tenants is open"
	}
	var parts []string
	for _, t := range slices.Sorted(maps.Keys(p.BreakerHeld)) {
		b := p.Breakers[t]
		since := b.OpenedAt
		if b.State == store.BreakerHalfOpen {
			since = b.HalfOpenAt
		}
		parts = append(parts, fmt.Sprintf("%s %s since %s: %d", t, b.State, since.Format(time.RFC3339), p.BreakerHeld[t]))
	}
	return strings.Join(parts, "; ") + " (they wait held for the breaker)"
}

// countsText is "a 3, b 1", largest first, at most limit names (0: all).
func countsText(m map[string]int, limit int) string {
	keys := store.Ranked(m)
	var parts []string
	for i, k := range keys {
		if limit > 0 && i == limit {
			parts = append(parts, fmt.Sprintf("… %d more", len(keys)-limit))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %d", orDash(k), m[k]))
	}
	return strings.Join(parts, ", ")
}
