package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// redrivePlan is what a redrive will do, worked out before it does
// anything: the entries it meets, what it does with each, and what each of
// the three gates (SPEC §15) will then do with the replays it asks for, as
// things stand now (a breaker or the policy may change during the run).
type redrivePlan struct {
	Matched    int
	ByTenant   map[string]int
	ByCategory map[string]int
	ByStatus   map[string]int

	Approve, RunNow int            // the actions
	Held            int            // left alone: held by their breaker
	Excluded        map[string]int // left alone: category -> entries (needs its flag)
	Nothing         int            // left alone: nothing to do in their status

	// The gates, for the entries acted on, in the order replay asks them.
	Completed   int            // idempotency record: recovered, not published
	PolicyStops map[string]int // status the current policy sends them to
	BreakerHeld map[string]int // tenant -> replays its open breaker holds
	Probes      int            // replays a half-open breaker lets through as its probe
	Replays     int            // published, as things stand

	policy   *triage.Policy
	breakers map[string]*store.Breaker
}

// acts is how many entries the redrive acts on.
func (p *redrivePlan) acts() int { return p.Approve + p.RunNow }

// plan pages through the redrive's query (after its checkpoint's cursor)
// and works out its plan.
func (a *app) plan(ctx context.Context, st *store.Store, cp *checkpoint) (*redrivePlan, error) {
	p := &redrivePlan{ByTenant: map[string]int{}, ByCategory: map[string]int{}, ByStatus: map[string]int{},
		Excluded: map[string]int{}, PolicyStops: map[string]int{}, BreakerHeld: map[string]int{}, breakers: map[string]*store.Breaker{}}
	q := cp.Filter.query(store.ScanView)
	q.After, q.Limit = cp.Cursor, 300
	for {
		page, err := st.Entries(ctx, q)
		if err != nil {
			return nil, err
		}
		var acts []*store.Entry
		for _, e := range page.Entries {
			if cp.Pending != nil && e.ID == cp.Pending.At.ID {
				continue // settled first, on its own (settlePending)
			}
			p.Matched++
			p.ByTenant[e.Tenant]++
			p.ByCategory[e.Category]++
			p.ByStatus[string(e.Status)]++
			s := cp.step(e)
			switch {
			case s.action == actApprove:
				p.Approve++
			case s.action == actRunNow:
				p.RunNow++
			case s.leave == leaveHeld:
				p.Held++
			case s.leave == leaveExcluded:
				p.Excluded[e.Category]++
			default:
				p.Nothing++
			}
			if s.action != "" {
				acts = append(acts, e)
			}
		}
		if err := a.planGates(ctx, st, p, acts); err != nil {
			return nil, err
		}
		if page.Next.IsZero() {
			return p, nil
		}
		q.After = page.Next
	}
}

// planGates asks, for each entry acted on, the gates in replay's order:
// the idempotency record, the policy (not for an approval: it answers the
// policy), the breaker.
func (a *app) planGates(ctx context.Context, st *store.Store, p *redrivePlan, acts []*store.Entry) error {
	if len(acts) == 0 {
		return nil
	}
	keys := make([]string, 0, len(acts))
	for _, e := range acts {
		keys = append(keys, e.IdempotencyKey)
	}
	done, err := st.CompletedKeys(ctx, keys)
	if err != nil {
		return err
	}
	var ask []string
	for _, e := range acts {
		switch {
		case e.IdempotencyKey != "" && done[e.IdempotencyKey]:
			p.Completed++
		case e.Status == store.Scheduled && !e.Approved():
			ask = append(ask, e.ID)
		default:
			if err := a.planBreaker(ctx, st, p, e); err != nil {
				return err
			}
		}
	}
	if len(ask) == 0 {
		return nil
	}
	// The policy reads headers and the failure record, which a scan does
	// not carry: read the entries it must judge.
	full, err := st.EntriesByID(ctx, ask)
	if err != nil {
		return err
	}
	if p.policy == nil {
		if p.policy, err = a.policyInForce(ctx); err != nil {
			return err
		}
	}
	for _, id := range ask {
		e, ok := full[id]
		if !ok {
			continue // expired meanwhile: the action will skip it
		}
		in, err := e.PolicyInput()
		if err != nil {
			p.PolicyStops[string(store.Escalated)]++ // replay escalates unreadable headers
			continue
		}
		if d := p.policy.Evaluate(in, e.PolicyChain()); d.Action != triage.AutoReplay {
			p.PolicyStops[string(store.StatusFor(d.Action))]++
			continue
		}
		if err := a.planBreaker(ctx, st, p, e); err != nil {
			return err
		}
	}
	return nil
}

// planBreaker is the breaker's answer for e: closed lets it through, open
// holds it, half-open lets one probe through and holds the rest.
func (a *app) planBreaker(ctx context.Context, st *store.Store, p *redrivePlan, e *store.Entry) error {
	b, ok := p.breakers[e.Tenant]
	if !ok {
		var err error
		if b, err = st.GetBreaker(ctx, e.Tenant); err != nil {
			return err
		}
		p.breakers[e.Tenant] = b
	}
	switch {
	case b.State == store.BreakerClosed:
		p.Replays++
	case b.State == store.BreakerHalfOpen && (b.ProbeEntry == "" || b.ProbeEntry == e.ID):
		b.ProbeEntry = e.ID // this plan's copy: the probe's slot is taken
		p.Probes++
	default:
		p.BreakerHeld[e.Tenant]++
	}
	return nil
}

// policyInForce is the triage policy replay evaluates now: the override if
// valid, else the embedded default.
func (a *app) policyInForce(ctx context.Context) (*triage.Policy, error) {
	cur, err := a.currentPolicy(ctx)
	if err != nil {
		return nil, err
	}
	if !cur.Valid {
		return triage.Default(), nil
	}
	p, err := triage.Parse([]byte(cur.YAML))
	if err != nil {
		return nil, fmt.Errorf("parse the policy in force: %w", err)
	}
	return p, nil
}

// print writes the plan for a person deciding whether to run it.
func (p *redrivePlan) print(w io.Writer, cp *checkpoint, resumed bool) {
	scope := "all tenants"
	if cp.Scope != "" {
		scope = "tenant " + cp.Scope + " only"
	}
	fmt.Fprintf(w, "redrive plan: filter %s (%s), %.3g/s, by %s\n", cp.Filter, scope, cp.Rate, cp.By)
	if resumed {
		fmt.Fprintf(w, "resuming: %d entries passed already (%s); the plan covers the rest\n", cp.Seen, cp.summary())
		if cp.Pending != nil {
			fmt.Fprintf(w, "the entry in hand when the run stopped, %s (%s), is settled first: acted on only if unchanged since it was listed\n",
				cp.Pending.At.ID, cp.Pending.Action)
		}
	}
	fmt.Fprintf(w, "entries matching: %d\n", p.Matched)
	if p.Matched > 0 {
		fmt.Fprintf(w, "  by status    %s\n", countsText(p.ByStatus, 0))
		fmt.Fprintf(w, "  by category  %s\n", countsText(p.ByCategory, 0))
		fmt.Fprintf(w, "  by tenant    %s\n", countsText(p.ByTenant, 20))
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\nredrive acts on %d:\n", p.acts())
	fmt.Fprintf(tw, "  approve\t%d\tawaiting_approval, quarantined, escalated: the approval answers the policy, not the breaker\n", p.Approve)
	fmt.Fprintf(tw, "  run now\t%d\tscheduled: the task runs now and meets the policy and the breaker\n", p.RunNow)
	fmt.Fprintf(tw, "and leaves alone %d:\n", p.Held+p.Nothing+sum(p.Excluded))
	fmt.Fprintf(tw, "  held\t%d\tstay held: redrive never releases them; reconcile does once their breaker admits, or dlqctl breaker probe|close\n", p.Held)
	for _, o := range optIn {
		fmt.Fprintf(tw, "  excluded: %s\t%d\tneeds --%s%s\n", o.category, p.Excluded[string(o.category)], o.flag,
			ifSet(slices.Contains(cp.Include, string(o.category)), " (given)"))
	}
	fmt.Fprintf(tw, "  nothing to do\t%d\treplaying, replayed, recovered, discarded\n", p.Nothing)
	if p.acts() > 0 {
		fmt.Fprintf(tw, "what the gates will do with the %d, as things stand now:\n", p.acts())
		fmt.Fprintf(tw, "  already completed\t%d\tidempotency record: marked recovered, not published\n", p.Completed)
		fmt.Fprintf(tw, "  stopped by the policy\t%d\tthe current policy no longer replays them%s: they would need approval\n", sum(p.PolicyStops),
			ifSet(len(p.PolicyStops) > 0, " (→ "+countsText(p.PolicyStops, 0)+")"))
		fmt.Fprintf(tw, "  held by a breaker\t%d\t%s\n", sum(p.BreakerHeld), p.breakerText())
		if p.Probes > 0 {
			fmt.Fprintf(tw, "  half-open probe\t%d\tthe one replay a half-open breaker lets through\n", p.Probes)
		}
		fmt.Fprintf(tw, "  replayed\t%d\tpublished to their work stream\n", p.Replays)
	}
	tw.Flush()
}

// breakerText names the breakers that hold replays of this plan.
func (p *redrivePlan) breakerText() string {
	if len(p.BreakerHeld) == 0 {
		return "no breaker of these tenants is open"
	}
	var parts []string
	for _, t := range slices.Sorted(maps.Keys(p.BreakerHeld)) {
		b := p.breakers[t]
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
	keys := slices.SortedFunc(maps.Keys(m), func(x, y string) int {
		if c := cmp.Compare(m[y], m[x]); c != 0 {
			return c
		}
		return strings.Compare(x, y)
	})
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

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
