package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/authority"
)

// randomMoves are the moves a random history may make from a status (the
// status table's, Moves), and whether a human makes them.
func randomMoves(from Status) []struct {
	to    Status
	human bool
} {
	var out []struct {
		to    Status
		human bool
	}
	for _, m := range Moves {
		human := m.Name == MoveApprove.Name || m.Name == MoveDiscard.Name || m.Name == MoveRunNow.Name || m.Name == MoveProbe.Name
		for _, to := range m.To {
			if m.Allows(from, to) {
				out = append(out, struct {
					to    Status
					human bool
				}{to, human})
			}
		}
	}
	return out
}

// TestOutcomesEqualRecount is the property that the resolution counters
// the transactions keep equal a recount over the entries' histories, over
// random histories whose steps may "crash": a step runs under a deadline
// so short its commit may or may not happen, and is retried as a function
// would be. A retry of a move that committed meets the entry in its new
// status and moves nothing (ErrWrongStatus), so nothing is counted twice;
// one that did not commit counted nothing. Either way each move is counted
// once, with its transaction.
func TestOutcomesEqualRecount(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			s, clock := newStore(t)
			ctx := testenv.Context(t)
			rng := rand.New(rand.NewPCG(seed, 35))
			starts := []Status{Scheduled, Scheduled, AwaitingApproval, Escalated, Quarantined}
			cats := []string{"transient", "conditional", "permanent"}
			strats := []string{"backoff", "trim", ""}
			var ids []string
			for i := range 12 {
				id := fmt.Sprintf("TASKS.%d-%d", seed, i)
				e := entry(id, nil)
				e.Status, e.TaskName = starts[rng.IntN(len(starts))], ""
				e.Category, e.Strategy = cats[rng.IntN(len(cats))], strats[rng.IntN(len(strats))]
				clock.Add(time.Duration(rng.IntN(90)) * time.Minute)
				if _, err := s.Record(ctx, e, "classify"); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			for range 60 {
				id := ids[rng.IntN(len(ids))]
				cur, err := s.GetMeta(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				moves := randomMoves(cur.Status)
				if len(moves) == 0 {
					continue
				}
				m := moves[rng.IntN(len(moves))]
				c := Change{From: []Status{cur.Status}, To: m.to, By: "reconcile"}
				if m.human {
					c.By, c.Role = "ann@example.com", authority.Operator
				}
				clock.Add(time.Duration(rng.IntN(5000)) * time.Second)
				if rng.IntN(3) == 0 {
					// The crash: a deadline that may end the call before or
					// after its commit; then the retry.
					cctx, cancel := context.WithTimeout(ctx, time.Duration(rng.IntN(4000))*time.Microsecond)
					_, _ = s.Transition(cctx, id, c)
					cancel()
				}
				if _, err := s.Transition(ctx, id, c); err != nil && !errors.Is(err, ErrWrongStatus) {
					t.Fatalf("Transition(%s, %s→%s) = %v", id, cur.Status, m.to, err)
				}
			}
			var entries []*Entry
			for _, id := range ids {
				e, err := s.GetMeta(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				entries = append(entries, e)
			}
			recount := RecountOutcomes(entries)
			var hours []string
			for h := range recount {
				hours = append(hours, h)
			}
			slices.Sort(hours)
			var total, totalRows Outcomes
			for _, h := range hours {
				m, err := s.ReadMetrics(ctx, h)
				if err != nil {
					t.Fatal(err)
				}
				if !m.Outcomes.Equal(recount[h]) {
					t.Errorf("hour %s: counters differ from the recount (-recount +counters):\n%s", h, cmp.Diff(recount[h].Normalized(), m.Outcomes.Normalized()))
				}
				total.Add(m.Outcomes)
			}
			first, _ := time.Parse(HourLayout, hours[0])
			last, _ := time.Parse(HourLayout, hours[len(hours)-1])
			rows, err := s.HourlyRollups(ctx, first, int(last.Sub(first)/time.Hour)+1)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				totalRows.Add(r.Outcomes)
			}
			var want Outcomes
			for _, h := range hours {
				want.Add(recount[h])
			}
			if diff := cmp.Diff(want.Figures(), total.Figures()); diff != "" {
				t.Errorf("figures of the counters differ from the recount's (-recount +counters):\n%s", diff)
			}
			if diff := cmp.Diff(want.Figures(), totalRows.Figures()); diff != "" {
				t.Errorf("figures of the day rollups differ from the recount's (-recount +rollups):\n%s", diff)
			}
			if f := want.Figures(); f.Settled == 0 || f.Claimed == 0 || f.ToDecision.N == 0 {
				t.Errorf("the random history settled %d, claimed %d, decided %d: too little to test", f.Settled, f.Claimed, f.ToDecision.N)
			}
		})
	}
}

func TestSketchQuantiles(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ages        []time.Duration
		median, p95 time.Duration
	}{
		{"one", []time.Duration{45 * time.Second}, 0, 0},
		{"under a second", []time.Duration{time.Millisecond, 2 * time.Millisecond}, time.Second, time.Second},
		{"spread", []time.Duration{time.Second, 10 * time.Second, 100 * time.Second, time.Hour}, 0, 0},
	} {
		sketch := map[string]int64{}
		for _, a := range tc.ages {
			sketch[SketchBucket(a)]++
		}
		q := SketchQuantiles(sketch)
		if q.N != int64(len(tc.ages)) {
			t.Errorf("%s: SketchQuantiles().N = %d, want %d", tc.name, q.N, len(tc.ages))
		}
		// The nearest-rank truth, and the sketch within a factor √2 above it.
		sorted := slices.Clone(tc.ages)
		slices.Sort(sorted)
		for _, p := range []struct {
			name string
			got  time.Duration
			p    float64
		}{{"median", q.Median, 0.5}, {"p95", q.P95, 0.95}} {
			truth := sorted[max(int(ceil(p.p*float64(len(sorted))))-1, 0)]
			lo, hi := truth, time.Duration(float64(max(truth, time.Second))*1.4143)
			if p.got < lo || p.got > hi {
				t.Errorf("%s: %s = %v, want within [%v, %v] (truth %v)", tc.name, p.name, p.got, lo, hi, truth)
			}
		}
	}
	if q := SketchQuantiles(map[string]int64{"b03": 2, "nonsense": 5, "b99": 1}); q.N != 2 {
		t.Errorf("SketchQuantiles with foreign keys: N = %d, want 2 (what it cannot read is left out)", q.N)
	}
}

func ceil(f float64) float64 {
	i := float64(int64(f))
	if f > i {
		return i + 1
	}
	return i
}
