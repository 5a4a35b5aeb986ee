package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// RunsPerLife is how many reconcile runs an entry stays in the window at
// the Terraform schedule: a 25-hour window (24 h and the hour in progress),
// a run every 15 minutes.
const RunsPerLife = 25 * 60 / 15

// BenchmarkEntryLife lives the whole lives of b.N dead messages' entries and
// counts their Firestore reads and writes on the code path (store.Ops):
// classify's Record (for a replay's death also its link to the entry it
// replays; for an escalated entry the flush of its notification, as
// classify does), the store calls of a replay (claim, completion lookup,
// breaker, mark replayed from the claimed entry: what functions/replay
// calls, without its NATS publish), the agent's completion record (agentkit's
// write, not jsdlq's), then real reconcile runs. The dead messages have
// the field's mix (docs/SCALING.md): 14.4 in 100 are permanent, escalated
// by classify and never replayed; the replays of 16 in 100 die again, each
// a new entry carrying the task on, whose own replay completes it (12) or
// which is escalated (4, the task never completes; its parent stays
// replayed). The entries are created evenly over the 25-hour window, so
// the runs read a full window of hourly metrics. The first run recovers every entry whose task completed, chains
// included (and compacts the closed hours); the next one is a run of the
// steady state, which every later run of the day repeats (a parent whose
// replay died is not checked again within the day: its check went to its
// chain). An entry's life is then classify + replay + its share of the first
// run + (RunsPerLife-1) steady runs shared by the window's entries: b.N dead
// messages are the window's population, so use the scale you price (4 000
// is docs/SCALING.md's: 160 dead messages an hour). reads/entry counts the
// deaths' entries as entries; reads/dead-message divides by b.N.
//
//	go test ./shared/reconciler -run '^$' -bench EntryLife -benchtime 4000x
func BenchmarkEntryLife(b *testing.B) {
	// JetStream takes the triage tasks of the escalated entries, and
	// reconcile audits its streams, as deployed.
	f := newFixture(b, true)
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
	// record is classify's store work for in: the link to the entry it
	// replays (one read, for a replay's death), Record, and the flush of
	// the outbox when Record staged a notification (an escalated entry
	// tells a human; classify flushes at once, functions/classify).
	// The flushers share a store on the real clock (the entries' stores
	// stand at their creation, hours apart, and would each see the others'
	// claims expired); its operations are classify's.
	tp := &topic{}
	tasks := notify.WithTasks(notify.LazyJetStream(func(context.Context) (jetstream.JetStream, error) { return f.js, nil }))
	outbox := store.New(f.fs)
	// As many flushers as entries are recorded at once, each an instance
	// of classify: it sweeps what others left once a minute.
	flushers := make(chan *notify.Flusher, 8)
	for range cap(flushers) {
		flushers <- notify.New(outbox, tp, tasks, notify.WithBatch(notify.AfterCommitBatch))
	}
	record := func(cs *store.Store, in *store.Entry, replayOf string) (*store.Entry, bool) {
		if replayOf != "" {
			if _, unlinked, err := cs.LinkReplay(f.ctx, in, map[string][]string{event.HeaderReplayOf: {replayOf}}); err != nil || unlinked != "" {
				b.Errorf("LinkReplay(%s) = %q, %v; want linked", in.ID, unlinked, err)
				return nil, false
			}
		}
		var res store.RecordResult
		err := retry(func() (err error) {
			res, err = cs.Record(f.ctx, in, "classify")
			return err
		})
		if err != nil || res.HandOff != nil {
			b.Errorf("Record(%s) = %+v, %v", in.ID, res, err)
			return nil, false
		}
		if res.Notified() {
			// Eight flushers at once lose claims to each other on the
			// emulator; a lost claim is retried as the next flush
			// would (a claim is leased, so no notification goes twice).
			fl := <-flushers
			defer func() { flushers <- fl }()
			if err := retry(func() error {
				fr, err := fl.FlushStaged(f.ctx, res.Staged)
				if err == nil && fr.Failed > 0 {
					err = fmt.Errorf("%w: %v", store.ErrConflict, fr.Errors)
				}
				return err
			}); err != nil {
				b.Errorf("Flush after %s: %v", in.ID, err)
			}
		}
		return res.Entry, true
	}
	// replayed is replay's store work for e: the claim, the completion
	// lookup, the breaker and the mark replayed (a write conditioned on
	// the claim).
	replayed := func(rs *store.Store, e *store.Entry) {
		// A failed claim keeps e (its id names the entry in the error).
		if err := retry(func() error {
			claimed, err := rs.Transition(f.ctx, e.ID, store.Change{From: []store.Status{store.Scheduled}, To: store.Replaying, By: "replay"})
			if err == nil {
				e = claimed
			}
			return err
		}); err != nil {
			b.Errorf("claim %s: %v", e.ID, err)
		}
		if c, err := rs.Completion(f.ctx, e); err != nil || c.Done {
			b.Errorf("Completion(%s) = %+v, %v; want not yet", e.IdempotencyKey, c, err)
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
	}
	// want is each entry's status after the first run.
	want := make([]map[string]store.Status, 8)
	work := make(chan int)
	var wg sync.WaitGroup
	for w := range 8 {
		want[w] = map[string]store.Status{}
		wg.Go(func() {
			for i := range work {
				created := from.Add(time.Minute + time.Duration(i)*span/time.Duration(n))
				cs, rs := f.storeAt(created), f.storeAt(created.Add(30*time.Second))
				// Ten tenants and ten agents: at this population each
				// agent stays under the default policy's
				// agent_dead_per_hour, as a fleet's would.
				// The field's mix (docs/SCALING.md): of 100 dead
				// messages 14.4 are permanent, escalated by classify and
				// never replayed; the replays of 16 die again, a new entry
				// carrying the task on: in 12 its replay completes the
				// task, in 4 it is escalated and the task never completes.
				// A tenant's k-th dead message takes its place in the mix
				// from a low-discrepancy sequence (multiples of the golden
				// ratio), so every tenant has the mix, with few dead
				// messages too, and its recovery rate is the field's.
				u := math.Mod((float64(i/10)+0.5)*math.Phi, 1)
				st := store.Scheduled
				if u < 0.144 {
					st = store.Escalated
				}
				in := entry(uint64(i+1), fmt.Sprintf("tenant-%d", i%10), st)
				in.Agent = fmt.Sprintf("agent-%d", i%10)
				in.Subject = "agents." + in.Agent + ".tasks.implementation"
				if st == store.Escalated {
					in.Category, in.ReasonCode, in.Action, in.Strategy = "permanent", "impossible_task", "escalate", "permanent"
				}
				e, ok := record(cs, in, "")
				if !ok {
					continue
				}
				if e.Status == store.Escalated {
					want[w][e.ID] = store.Escalated
					mu.Lock()
					classifyStores = append(classifyStores, cs)
					mu.Unlock()
					continue
				}
				replayed(rs, e)
				stores := []*store.Store{cs, rs}
				want[w][e.ID] = store.Recovered
				if u >= 0.144 && u < 0.304 {
					died := created.Add(2 * time.Minute)
					dcs, drs := f.storeAt(died), f.storeAt(died.Add(30*time.Second))
					child := entry(uint64(n+i+1), in.Tenant, store.Scheduled)
					child.Agent, child.Subject, child.IdempotencyKey = in.Agent, in.Subject, e.IdempotencyKey
					if u >= 0.264 {
						child.Status, child.TaskName, child.Action, child.Category = store.Escalated, "", "escalate", "permanent"
						want[w][e.ID] = store.Replayed
					}
					ce, ok := record(dcs, child, e.EventID)
					if !ok {
						continue
					}
					want[w][ce.ID] = ce.Status
					if ce.Status == store.Scheduled {
						replayed(drs, ce)
						want[w][ce.ID] = store.Recovered
					}
					stores = append(stores, dcs, drs)
				}
				if want[w][e.ID] == store.Recovered {
					f.complete(e.Tenant, e.IdempotencyKey) // agentkit.Once's write, the agent's
				}
				mu.Lock()
				classifyStores, replayStores = append(classifyStores, stores[0]), append(replayStores, stores[1])
				if len(stores) > 2 {
					classifyStores, replayStores = append(classifyStores, stores[2]), append(replayStores, stores[3])
				}
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
	classify, replay := sum(append(classifyStores, outbox)), sum(replayStores)

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
	entries, recovered := 0, int64(0)
	for _, m := range want {
		for id, st := range m {
			if e := f.get(id); e.Status != st {
				b.Fatalf("entry %s = %s after the first run, want %s (%s)", id, e.Status, st, summary(first))
			}
			entries++
			if st == store.Recovered {
				recovered++
			}
		}
	}
	if len(steady.Findings) != 0 || len(steady.Tenants) != min(n, 10) {
		b.Fatalf("steady run: %s, %d tenants; want no finding and %d tenants", summary(steady), len(steady.Tenants), min(n, 10))
	}
	var counted int64
	for _, t := range steady.Tenants {
		counted += t.Recovered
	}
	if counted != recovered {
		b.Fatalf("steady run counts %d recovered entries, want %d", counted, recovered)
	}
	// Per entry: the replay deaths' entries are entries of the window too.
	per := func(v int64) float64 { return float64(v) / float64(entries) }
	firstRun := store.Ops{Reads: mid.Reads - before.Reads, Writes: mid.Writes - before.Writes}
	steadyRun := store.Ops{Reads: after.Reads - mid.Reads, Writes: after.Writes - mid.Writes}
	reconcileReads := firstRun.Reads + (RunsPerLife-1)*steadyRun.Reads
	reconcileWrites := firstRun.Writes + (RunsPerLife-1)*steadyRun.Writes
	b.ReportMetric(per(classify.Reads+replay.Reads+reconcileReads), "reads/entry")
	b.ReportMetric(float64(classify.Reads+replay.Reads+reconcileReads)/float64(n), "reads/dead-message")
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
