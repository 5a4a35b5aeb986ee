package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/jsdlq/jsdlq/shared/store"
)

// This file puts the product's own resolution figures (the counters every
// transaction keeps, store.Outcomes: what the console, dlqctl stats and the
// reconcile report show) next to the demo's own count of the same figures
// from the entries' statuses and histories, and says whether they agree.

// resolution is the product's figures and the demo's count of them.
type resolution struct {
	Product store.Resolution
	// Own are the demo's counts: per category settled, recovered and
	// auto-resolved entries, the exact median times.
	Own      map[string]store.CategoryFigures
	Decision []time.Duration
	Recovery []time.Duration
}

// outcomesSince reads the counters of the hours from first's to now's.
func (d *demo) outcomesSince(ctx context.Context, first time.Time) (store.Outcomes, error) {
	first = first.UTC().Truncate(time.Hour)
	n := int(time.Now().UTC().Truncate(time.Hour).Sub(first)/time.Hour) + 1
	ms, err := d.st.HourlyMetrics(ctx, first, n)
	var o store.Outcomes
	for _, m := range ms {
		o.Add(m.Outcomes)
	}
	return o, err
}

// minus is o less what before counted (the counters of the run's first
// hour before the run began).
func minus(o, before store.Outcomes) store.Outcomes {
	neg := func(m map[string]int64) map[string]int64 {
		out := map[string]int64{}
		for k, v := range m {
			out[k] = -v
		}
		return out
	}
	o.Add(store.Outcomes{Settled: neg(before.Settled), Recovered: neg(before.Recovered), Auto: neg(before.Auto),
		Replayed: neg(before.Replayed), RetryRecovered: neg(before.RetryRecovered), Claimed: -before.Claimed, Denied: -before.Denied,
		ToDecision: neg(before.ToDecision), ToRecovery: neg(before.ToRecovery)})
	return o.Normalized()
}

// countResolution counts the figures from the entries: an entry settled is
// one now recovered or discarded, auto-resolved one recovered that no human
// moved; the times are each entry's first move by a human and its recovery.
func countResolution(entries []*store.Entry, product store.Outcomes) resolution {
	r := resolution{Product: product.Figures(), Own: map[string]store.CategoryFigures{}}
	for _, e := range entries {
		f := r.Own[e.Category]
		human := false
		for _, t := range e.History {
			if t.Role != "" && !human {
				human = true
				r.Decision = append(r.Decision, t.At.Sub(e.CreatedAt))
			}
			if t.To == string(store.Recovered) {
				r.Recovery = append(r.Recovery, t.At.Sub(e.CreatedAt))
			}
		}
		switch e.Status {
		case store.Recovered:
			f.Settled++
			f.Recovered++
			if !human {
				f.Auto++
			}
		case store.Discarded:
			f.Settled++
		}
		if f != (store.CategoryFigures{}) {
			r.Own[e.Category] = f
		}
	}
	slices.Sort(r.Decision)
	slices.Sort(r.Recovery)
	return r
}

// sameBucket reports whether the sketch's figure is the bound of the
// bucket the exact value falls in (or both are absent).
func sameBucket(exact []time.Duration, p float64, q store.Quantiles, got time.Duration) bool {
	if len(exact) == 0 || q.N == 0 {
		return len(exact) == 0 && q.N == 0
	}
	want := store.SketchQuantiles(map[string]int64{store.SketchBucket(percentile(exact, p)): 1}).Median
	return q.N == int64(len(exact)) && want == got
}

// agrees reports whether the product's figures equal the demo's count.
func (r resolution) agrees() bool {
	for c, own := range r.Own {
		p := r.Product.Categories[c]
		if p.Settled != own.Settled || p.Recovered != own.Recovered || p.Auto != own.Auto {
			return false
		}
	}
	return len(r.Own) == len(r.Product.Categories) &&
		sameBucket(r.Decision, 50, r.Product.ToDecision, r.Product.ToDecision.Median) &&
		sameBucket(r.Decision, 95, r.Product.ToDecision, r.Product.ToDecision.P95) &&
		sameBucket(r.Recovery, 50, r.Product.ToRecovery, r.Product.ToRecovery.Median) &&
		sameBucket(r.Recovery, 95, r.Product.ToRecovery, r.Product.ToRecovery.P95)
}

func (r resolution) print(w io.Writer) {
	fmt.Fprintln(w, "resolution figures: the product's (counters kept by the transactions; console, dlqctl stats, reconcile) | the demo's count from the entries")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CATEGORY\tsettled\trecovered\tauto-resolved\tauto-resolved share")
	cats := map[string]bool{}
	for c := range r.Own {
		cats[c] = true
	}
	for c := range r.Product.Categories {
		cats[c] = true
	}
	for _, c := range slices.Sorted(maps.Keys(cats)) {
		p, o := r.Product.Categories[c], r.Own[c]
		fmt.Fprintf(tw, "%s\t%d | %d\t%d | %d\t%d | %d\t%s\n", c, p.Settled, o.Settled, p.Recovered, o.Recovered, p.Auto, o.Auto,
			percent(int(p.Auto), int(p.Settled), 1))
	}
	tw.Flush()
	for _, s := range slices.Sorted(maps.Keys(r.Product.Strategies)) {
		f := r.Product.Strategies[s]
		fmt.Fprintf(w, "  retry success of %s: %d of %d replays (%s)\n", s, f.Recovered, f.Replayed, percent(int(f.Recovered), int(f.Replayed), 1))
	}
	times := func(name string, q store.Quantiles, exact []time.Duration) {
		if q.N == 0 && len(exact) == 0 {
			return
		}
		fmt.Fprintf(w, "  time to %s: median ≤ %s | %s, p95 ≤ %s | %s (%d | %d entries)\n", name, q.Median, percentile(exact, 50).Round(100*time.Millisecond),
			q.P95, percentile(exact, 95).Round(100*time.Millisecond), q.N, len(exact))
	}
	times("a human decision", r.Product.ToDecision, r.Decision)
	times("recovery", r.Product.ToRecovery, r.Recovery)
	fmt.Fprintf(w, "  replays denied by a gate: %d of %d claimed\n", r.Product.Denied, r.Product.Claimed)
	if r.agrees() {
		fmt.Fprintln(w, "  the product's figures agree with the demo's count (times: the same sketch bucket)")
	} else {
		fmt.Fprintln(w, "  DISAGREE: the product's figures differ from the demo's count")
	}
	fmt.Fprintln(w)
}
