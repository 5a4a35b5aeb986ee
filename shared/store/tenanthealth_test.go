package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// After random histories (entries created, merged, moved, re-evaluated,
// recovered twice over, discarded; moves refused for a wrong status and
// transactions that fail after changing the entry; replays claimed and
// never finished; half the moves made from an entry the caller holds,
// current or stale), every hour's stored counters, tenant counters included,
// equal a full recount from the entries. The counters are kept in the
// transactions that change the entries, so a failed transaction changes
// neither and a crash between two steps leaves both at the same step.
func TestTenantCountersEqualRecountAfterRandomHistories(t *testing.T) {
	for _, seed := range []uint64{1, 7, 2026} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s, clock := newStore(t, WithShards(3), WithBreaker(BreakerConfig{Threshold: 6, Window: 10 * time.Minute, Cooldown: 15 * time.Minute}))
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
			start := clock.Now()
			tenants := []string{"acme", "x y", "a.b", "storm"}
			categories := []string{"transient", "poison", "permanent"}
			initial := []Status{Scheduled, Scheduled, Escalated, Quarantined, AwaitingApproval}
			statuses := []Status{Scheduled, Replaying, Replayed, Recovered, AwaitingApproval, Quarantined, Held, Escalated, Discarded}
			var ids []string
			var moved, refused, crashed, created, seen int
			// held is each entry as this caller last read or moved it,
			// which others may have moved since: half the moves start
			// from it (TransitionSeen), as replay and reconcile do.
			held := map[string]*Entry{}
			for step := range 400 {
				clock.Add(time.Duration(rng.IntN(150)) * time.Second)
				switch op := rng.IntN(10); {
				case op < 3 || len(ids) == 0: // a new dead message, or the other capture path of one
					id := fmt.Sprintf("TASKS.%d", len(ids)+1)
					if len(ids) > 0 && rng.IntN(5) == 0 {
						id = ids[rng.IntN(len(ids))]
					}
					e := entry(id, []byte(`{"n":1}`))
					e.Tenant = tenants[rng.IntN(len(tenants))]
					e.Category = categories[rng.IntN(len(categories))]
					e.Kind = []string{"max_deliver", "terminated"}[rng.IntN(2)]
					e.Status = initial[rng.IntN(len(initial))]
					res, err := s.Record(ctx, e, "classify")
					if err != nil {
						t.Fatalf("step %d: Record(%s) = %v", step, id, err)
					}
					if res.Created {
						ids = append(ids, id)
						created++
					}
				default:
					// Mostly an entry not known to be recovered or
					// discarded, which no move leaves.
					id := ids[rng.IntN(len(ids))]
					for try := 0; try < 3 && held[id] != nil && held[id].Status.Terminal(); try++ {
						id = ids[rng.IntN(len(ids))]
					}
					cur, err := s.GetMeta(ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					from := []Status{cur.Status}
					if rng.IntN(6) == 0 { // a caller that saw another status
						from = []Status{statuses[rng.IntN(len(statuses))]}
					}
					to := statuses[rng.IntN(len(statuses))]
					// Mostly a move the status table allows; the rest
					// it refuses (ErrTransition), changing nothing.
					if allowed := StatusesWhere(cur.Status.CanMove); len(allowed) > 0 && rng.IntN(8) > 0 {
						to = allowed[rng.IntN(len(allowed))]
					}
					by := []string{"replay", ByReconcile, "operator"}[rng.IntN(3)]
					c := Change{From: from, To: to, By: by}
					switch {
					case to == cur.Status: // not a replay: nothing to count
					case to == Replayed:
						c.Count = &Metrics{ReplaysPublished: 1}
					case to == Recovered:
						c.Count = &Metrics{ReplaysRecovered: 1}
					}
					recategorise := rng.IntN(4) == 0 // replay's re-evaluation
					crash := rng.IntN(8) == 0        // fails after changing the entry
					c.Apply = func(e *Entry) error {
						if recategorise {
							e.Category = categories[rng.IntN(len(categories))]
						}
						if crash {
							return errCrash
						}
						return nil
					}
					var res *Entry
					if h := held[id]; h != nil && rng.IntN(2) == 0 {
						res, err = s.TransitionSeen(ctx, h, c)
						seen++
					} else {
						res, err = s.Transition(ctx, id, c)
					}
					// The caller keeps what the move returned, or
					// (one move in four, and after a failure) an older
					// entry, whose status may be stale.
					switch {
					case err == nil && rng.IntN(4) > 0:
						held[id] = res
					case rng.IntN(2) == 0:
						held[id] = cur
					}
					switch {
					case crash && errors.Is(err, errCrash):
						crashed++
					case errors.Is(err, ErrWrongStatus):
						// Nobody else moves the entry, so it is stored as
						// cur: a refusal is right only when cur's status
						// is not in from, whatever a held entry says.
						if slices.Contains(from, cur.Status) {
							t.Fatalf("step %d: Transition(%s %v -> %s) = %v, but it is stored %s", step, id, from, to, err, cur.Status)
						}
						refused++
					case errors.Is(err, ErrTransition):
						if cur.Status.CanMove(to) {
							t.Fatalf("step %d: Transition(%s %s -> %s) = %v, but the table allows it", step, id, cur.Status, to, err)
						}
						refused++
					case err != nil:
						t.Fatalf("step %d: Transition(%s %v -> %s) = %v", step, id, from, to, err)
					default:
						moved++
					}
				}
			}
			if created < 50 || moved < 100 || refused == 0 || crashed == 0 || seen < 50 {
				t.Fatalf("history too poor: %d created, %d moved (%d from a held entry), %d refused, %d crashed", created, moved, seen, refused, crashed)
			}
			window := NewRecount(start, clock.Now())
			var all []*Entry
			for after := (Cursor{}); ; {
				p, err := s.Entries(ctx, Query{CreatedFrom: window.From, CreatedTo: window.To, Order: OldestFirst, View: ScanView, After: after, Limit: 50})
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range p.Entries {
					window.Add(e)
				}
				all = append(all, p.Entries...)
				if after = p.Next; after.IsZero() {
					break
				}
			}
			var counted int64
			for h := start.Truncate(time.Hour); !h.After(clock.Now()); h = h.Add(time.Hour) {
				hr, err := s.RecountHour(ctx, h, 7, true)
				if err != nil {
					t.Fatalf("RecountHour(%s) = %v", Hour(h), err)
				}
				stored, recount := hr.Stored.normalized(), hr.Recount.normalized()
				if !hr.Agreed {
					t.Errorf("hour %s: stored metrics disagree with the recount of its %d entries", hr.Hour, hr.Entries)
				}
				// Replays published and recovered are counted in the hour
				// they happen, by entries of any hour: the window's recount
				// has them all.
				whole := window.Of(hr.Hour)
				recount.ReplaysPublished, recount.ReplaysRecovered = whole.ReplaysPublished, whole.ReplaysRecovered
				// The resolution counters of the hour's moves, whichever
				// hour their entries died in, recounted from the histories
				// (the moves' transactions counted them, crashes or not).
				// A re-evaluation changes an entry's category and strategy
				// after the moves counted under the old ones: the counts
				// are compared whatever their category and strategy.
				recount.Outcomes = anyKey(RecountOutcomes(all)[hr.Hour])
				stored.Outcomes = anyKey(stored.Outcomes)
				// Category, reason and action stay as classify counted
				// them; the entries carry the re-evaluated ones.
				for _, m := range []*Metrics{&recount, &stored} {
					m.ByCategory, m.ByReason, m.ByAction, m.Shards = nil, nil, nil, 0
				}
				if d := cmp.Diff(recount, stored); d != "" {
					t.Errorf("hour %s (-recount +stored):\n%s", hr.Hour, d)
				}
				// The hour's row of its day rollup counts the same
				// entries by their status now (and its categories are
				// classify's, as the hour's are).
				if row := recount.rollup(); hr.Rollup.Total != row.Total || !maps.Equal(hr.Rollup.Statuses, row.Statuses) {
					t.Errorf("hour %s: rollup row %d entries %v, recount %d entries %v", hr.Hour, hr.Rollup.Total, hr.Rollup.Statuses, row.Total, row.Statuses)
				}
				for _, th := range stored.Tenants {
					counted += th.Entries()
				}
			}
			if counted != int64(created) {
				t.Errorf("tenant counters hold %d entries, %d were created", counted, created)
			}
		})
	}
}

var errCrash = errors.New("crash inside the transaction")

// A counter written outside the transactions (here: one entry too many for
// a tenant) makes the hour disagree with its recount; RecountHour rewrites
// it, dry runs change nothing, and the rewritten hour agrees.
func TestRecountHourRewritesDisagreement(t *testing.T) {
	s, clock := newStore(t)
	ctx := context.Background()
	for i := range 3 {
		e := entry(fmt.Sprintf("TASKS.%d", i+1), nil)
		if _, err := s.Record(ctx, e, "classify"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Transition(ctx, "TASKS.1", Change{From: []Status{Scheduled}, To: Replaying, By: "replay"}); err != nil {
		t.Fatal(err)
	}
	stray := Metrics{Tenants: map[string]TenantHour{"acme": {Slots: map[string]int64{Slot(clock.Now()): 1}, Statuses: map[string]int64{"scheduled": 1}}}}
	if err := s.AddMetrics(ctx, clock.Now(), "stray", stray); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dry                       bool
		wantAgreed, wantRewritten bool
	}{{true, false, false}, {false, false, true}, {false, true, false}} {
		hr, err := s.RecountHour(ctx, clock.Now(), 2, tc.dry)
		if err != nil || hr.Agreed != tc.wantAgreed || hr.Rewritten != tc.wantRewritten || hr.Entries != 3 {
			t.Errorf("RecountHour(dry=%v) = agreed %v rewritten %v entries %d, %v; want %v %v 3", tc.dry, hr.Agreed, hr.Rewritten, hr.Entries, err, tc.wantAgreed, tc.wantRewritten)
		}
	}
	m, err := s.ReadMetrics(ctx, Hour(clock.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Tenants["acme"]; got.Entries() != 3 || got.InStatus(Scheduled) != 2 || got.InStatus(Replaying) != 1 || m.Total != 3 {
		t.Errorf("hour after the rewrite: total %d, acme %+v; want 3 entries, 2 scheduled, 1 replaying", m.Total, got)
	}
}

// anyKey is o with its counts by category and by strategy summed under one
// key (its sketches as they are).
func anyKey(o Outcomes) Outcomes {
	sum := func(m map[string]int64) map[string]int64 {
		var n int64
		for _, v := range m {
			n += v
		}
		return map[string]int64{"*": n}
	}
	o.Settled, o.Recovered, o.Auto = sum(o.Settled), sum(o.Recovered), sum(o.Auto)
	o.Replayed, o.RetryRecovered = sum(o.Replayed), sum(o.RetryRecovered)
	return o.Normalized()
}
