package redrive

import (
	"context"
	"time"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// Plan is what a redrive will do, worked out before it does anything (the
// figures a caller shows and keeps, store.RedrivePlan), with the breakers
// it read to say so.
type Plan struct {
	store.RedrivePlan
	// Breakers are the breakers of the tenants acted on, as read.
	Breakers map[string]*store.Breaker
	// First are the ids of the first MaxPlanFirst entries the redrive
	// acts on, in its order: what an operator checks before confirming.
	First []string
	// Newest is the creation time of the newest entry matched (zero when
	// none): a run of this plan ends there (Until), whatever the clocks of
	// the machines that plan and record.
	Newest time.Time

	policy *triage.Policy
}

// Until is where a run of the plan ends, f's own end when earlier: just
// after the newest entry the plan matched. Failures recorded after the plan
// (while its operator reads it, before a runner gets to it, the deaths of
// its own replays) match its filter but are not the plan's.
func (p *Plan) Until(f store.BulkFilter) store.BulkFilter {
	// created_at is kept to the microsecond; the range's end is exclusive.
	if end := p.Newest.Add(time.Microsecond); p.Matched > 0 && (f.CreatedTo.IsZero() || f.CreatedTo.After(end)) {
		f.CreatedTo = end
	}
	return f
}

// MaxPlanFirst is how many of the entries acted on a plan names (First).
const MaxPlanFirst = 50

// PlanStore is what a plan reads (*store.Store): the entries the filter
// matches, in full where the gates need them, their completion records,
// the policy in force and the tenants' breakers.
type PlanStore interface {
	Entries(ctx context.Context, q store.Query) (store.Page, error)
	EntriesByID(ctx context.Context, ids []string) (map[string]*store.Entry, error)
	Completions(ctx context.Context, entries []*store.Entry) (map[string]store.Completion, error)
	PolicyInForce(ctx context.Context) (store.PolicyInForce, error)
	GetBreaker(ctx context.Context, tenant string) (*store.Breaker, error)
}

// NewPlan pages through q (its order and view are the plan's: newest
// first, after q.After) and works out what a redrive of it by by, with the
// opt-ins include, would do (auth answers what by may act on). skip is an
// entry to leave out (the one a resumed run settles on its own first), or
// "".
func NewPlan(ctx context.Context, st PlanStore, auth Authority, by authority.Actor, q store.Query, include []string, skip string) (*Plan, error) {
	p := &Plan{RedrivePlan: store.RedrivePlan{ByTenant: map[string]int{}, ByCategory: map[string]int{}, ByStatus: map[string]int{},
		Excluded: map[string]int{}, Denied: map[string]int{}, PolicyStops: map[string]int{}, BreakerHeld: map[string]int{}},
		Breakers: map[string]*store.Breaker{}}
	q.Order, q.View, q.Limit = store.NewestFirst, store.ScanView, 300
	for {
		page, err := st.Entries(ctx, q)
		if err != nil {
			return nil, err
		}
		var acts []*store.Entry
		for _, e := range page.Entries {
			if skip != "" && e.ID == skip {
				continue
			}
			p.Matched++
			if e.CreatedAt.After(p.Newest) {
				p.Newest = e.CreatedAt
			}
			p.ByTenant[e.Tenant]++
			p.ByCategory[e.Category]++
			p.ByStatus[string(e.Status)]++
			s, err := StepFor(ctx, auth, by, e, include)
			if err != nil {
				return nil, err
			}
			switch {
			case s.Action == Approve:
				p.Approve++
			case s.Action == RunNow:
				p.RunNow++
			case s.Leave == LeaveHeld:
				p.Held++
			case s.Leave == LeaveExcluded:
				p.Excluded[RuleOf(e)]++
			case s.Leave == LeaveDenied:
				p.Denied[RuleOf(e)]++
			default:
				p.Nothing++
			}
			if s.Action != "" {
				acts = append(acts, e)
				if len(p.First) < MaxPlanFirst {
					p.First = append(p.First, e.ID)
				}
			}
		}
		if err := p.gates(ctx, st, acts); err != nil {
			return nil, err
		}
		if page.Next.IsZero() {
			return p, nil
		}
		q.After = page.Next
	}
}

// gates asks, for each entry acted on, the gates in replay's order: the
// idempotency record, the policy (not for an approval: it answers the
// policy), the breaker.
func (p *Plan) gates(ctx context.Context, st PlanStore, acts []*store.Entry) error {
	if len(acts) == 0 {
		return nil
	}
	done, err := st.Completions(ctx, acts)
	if err != nil {
		return err
	}
	var ask []string
	for _, e := range acts {
		switch {
		case done[e.ID].Done:
			p.Completed++
		case e.Status == store.Scheduled && !e.Approved():
			ask = append(ask, e.ID)
		default:
			if err := p.breaker(ctx, st, e); err != nil {
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
		in, err := st.PolicyInForce(ctx)
		if err != nil {
			return err
		}
		p.policy = in.Policy
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
		if err := p.breaker(ctx, st, e); err != nil {
			return err
		}
	}
	return nil
}

// breaker is the breaker's answer for e: closed lets it through, open
// holds it, half-open lets one probe through and holds the rest.
func (p *Plan) breaker(ctx context.Context, st PlanStore, e *store.Entry) error {
	b, ok := p.Breakers[e.Tenant]
	if !ok {
		var err error
		if b, err = st.GetBreaker(ctx, e.Tenant); err != nil {
			return err
		}
		p.Breakers[e.Tenant] = b
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
