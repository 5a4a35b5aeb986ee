package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// RunsPerLife is how many reconcile runs an entry stays in the window at
// the Terraform schedule: a 25-hour window (24 h and the hour in progress),
// a run every 15 minutes.
const RunsPerLife = 25 * 60 / 15

// BenchmarkEntryLife lives b.N entries' whole lives and counts their
// Firestore reads and writes on the code path (store.Ops): classify's
// Record, the store calls of a replay (claim, completion lookup, breaker,
// mark replayed from the claimed entry: what functions/replay calls,
// without its NATS publish),
// the agent's completion record (agentkit's write, not jsdlq's), then real
// reconcile runs. The entries are created evenly over the 25-hour window,
// so the runs read a full window of hourly metrics. The first run marks
// them all recovered (and compacts the closed hours); the next one is a
// run of the steady state, which every later run of the day repeats. An
// entry's life is then classify + replay + its share of the first run +
// (RunsPerLife-1) steady runs shared by the b.N entries of the window:
// b.N is the window's population, so use the scale you price (4 000 is
// docs/SCALING.md's: 160 dead messages an hour).
//
//	go test ./shared/reconciler -run '^$' -bench EntryLife -benchtime 4000x
func BenchmarkEntryLife(b *testing.B) {
	f := newFixture(b, false)
	// A window's population takes longer than a test's context allows.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	b.Cleanup(cancel)
	f.ctx = ctx
	now := time.Now().UTC()
	from := now.Truncate(time.Hour).Add(-24 * time.Hour)
	span := now.Add(-5 * time.Minute).Sub(from)
	n := b.N

	// Every entry gets stores whose clock stands at its creation and at its
	// replay; their operation counts are summed per step.
	var mu sync.Mutex
	var classifyStores, replayStores []*store.Store
	sum := func(sts []*store.Store) store.Ops {
		var o store.Ops
		for _, st := range sts {
			o.Reads += st.Ops().Reads
			o.Writes += st.Ops().Writes
		}
		return o
	}
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				created := from.Add(time.Minute + time.Duration(i)*span/time.Duration(n))
				cs, rs := f.storeAt(created), f.storeAt(created.Add(30*time.Second))
				var res store.RecordResult
				// Ten tenants and ten agents: at this population each
				// agent stays under the default policy's
				// agent_dead_per_hour, as a fleet's would.
				in := entry(uint64(i+1), fmt.Sprintf("tenant-%d", i%10), store.Scheduled)
				in.Agent = fmt.Sprintf("agent-%d", i%10)
				in.Subject = "agents." + in.Agent + ".tasks.implementation"
				err := retry(func() (err error) {
					res, err = cs.Record(f.ctx, in, "classify")
					return err
				})
				if err != nil {
					b.Errorf("Record(%d) = %v", i+1, err)
					continue
				}
				// A failed claim keeps e (its id names the entry in the
				// error).
				e := res.Entry
				if err := retry(func() error {
					claimed, err := rs.Transition(f.ctx, e.ID, store.Change{From: []store.Status{store.Scheduled}, To: store.Replaying, By: "replay"})
					if err == nil {
						e = claimed
					}
					return err
				}); err != nil {
					b.Errorf("claim %s: %v", e.ID, err)
				}
				if done, err := rs.TaskCompleted(f.ctx, e.IdempotencyKey); err != nil || done {
					b.Errorf("TaskCompleted(%s) = %v, %v; want not yet", e.IdempotencyKey, done, err)
				}
				var ok bool
				if err := retry(func() (err error) { ok, _, err = rs.BreakerAdmit(f.ctx, e.Tenant, e.ID, "replay"); return err }); err != nil || !ok {
					b.Errorf("BreakerAdmit(%s) = %v, %v; want admitted", e.Tenant, ok, err)
				}
				if err := retry(func() error {
					_, err := rs.TransitionSeen(f.ctx, e, store.Change{From: []store.Status{store.Replaying}, To: store.Replayed, By: "replay",
						Count: &store.Metrics{ReplaysPublished: 1}})
					return err
				}); err != nil {
					b.Errorf("mark %s replayed: %v", e.ID, err)
				}
				f.complete(e.IdempotencyKey) // agentkit.Once's write, the agent's
				mu.Lock()
				classifyStores, replayStores = append(classifyStores, cs), append(replayStores, rs)
				mu.Unlock()
			}
		})
	}
	b.ResetTimer()
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	classify, replay := sum(classifyStores), sum(replayStores)

	// The predictions learner has been running since before the window,
	// as in the steady state (a new learner reads the entries that are
	// there once, docs/predictions.md).
	running := store.LearnerState{CountsThrough: from, DeathsThrough: from, DeathsAfter: store.DeathsFrom(from)}
	if _, err := f.st.FoldPredictionStats(f.ctx, store.LearnerState{}, running, nil); err != nil {
		b.Fatal(err)
	}
	h := f.handler(reconciler.Config{TimeBudget: 10 * time.Minute, PageSize: 300}, nil)
	before := f.st.Ops()
	first := f.run(h, false)
	mid := f.st.Ops()
	steady := f.run(h, false)
	after := f.st.Ops()
	b.StopTimer()
	for i := range n {
		if e := f.get(entry(uint64(i+1), "", store.Scheduled).ID); e.Status != store.Recovered {
			b.Fatalf("entry %s = %s after the first run, want recovered (%s)", e.ID, e.Status, summary(first))
		}
	}
	if len(steady.Findings) != 0 || len(steady.Tenants) != min(n, 10) {
		b.Fatalf("steady run: %s, %d tenants; want no finding and %d tenants", summary(steady), len(steady.Tenants), min(n, 10))
	}
	var counted int64
	for _, t := range steady.Tenants {
		counted += t.Recovered
	}
	if counted != int64(n) {
		b.Fatalf("steady run counts %d recovered entries, want %d", counted, n)
	}
	per := func(v int64) float64 { return float64(v) / float64(n) }
	firstRun := store.Ops{Reads: mid.Reads - before.Reads, Writes: mid.Writes - before.Writes}
	steadyRun := store.Ops{Reads: after.Reads - mid.Reads, Writes: after.Writes - mid.Writes}
	reconcileReads := firstRun.Reads + (RunsPerLife-1)*steadyRun.Reads
	reconcileWrites := firstRun.Writes + (RunsPerLife-1)*steadyRun.Writes
	b.ReportMetric(per(classify.Reads+replay.Reads+reconcileReads), "reads/entry")
	b.ReportMetric(per(classify.Writes+replay.Writes+reconcileWrites), "writes/entry")
	b.ReportMetric(per(classify.Reads), "classify-reads/entry")
	b.ReportMetric(per(replay.Reads), "replay-reads/entry")
	b.ReportMetric(per(classify.Writes), "classify-writes/entry")
	b.ReportMetric(per(replay.Writes), "replay-writes/entry")
	b.ReportMetric(per(firstRun.Writes-steadyRun.Writes), "recovery-writes/entry")
	b.ReportMetric(per(reconcileReads), "reconcile-reads/entry")
	b.ReportMetric(per(reconcileWrites), "reconcile-writes/entry")
	b.ReportMetric(per(firstRun.Reads-steadyRun.Reads), "recovery-reads/entry")
	// The predictions learner (its own section at the end of a run) reads
	// the hours closed since its last run (one document each: the entries
	// section compacted them), not the entries; its share of the reconcile
	// reads above.
	var learnt int64
	for _, rep := range []*audit.Report{first, steady} {
		for _, sec := range rep.Sections {
			if sec.Name == reconciler.SectionPredictions {
				learnt += sec.Counts["hours_read"] + sec.Counts["entries_read"]
			}
		}
	}
	b.ReportMetric(per(learnt), "learner-reads/entry")
	b.ReportMetric(float64(steadyRun.Reads), "reads/steady-run")
	b.ReportMetric(float64(steadyRun.Writes), "writes/steady-run")
}

// retry repeats a store call that lost to contention (the emulator's lock
// timeouts under eight concurrent lives), as Pub/Sub and Cloud Tasks
// redeliver to classify and replay: every call here is safe to repeat (a
// Record merges, a transition checks the status it leaves), and the
// repeats' operations are counted like any.
func retry(call func() error) error {
	var err error
	for range 5 {
		if err = call(); !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return err
}
