package reconciler_test

import (
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// BenchmarkEntryLife measures reconcile's share of an entry's Firestore
// operations, counted on the code path by store.Ops(): b.N replayed entries
// whose tasks completed (their task-idempotency records exist) and one real
// run that scans them and moves each to recovered. The run's fixed cost
// (lease, state, report, hourly shard reads) is spread over the entries, so
// use a few hundred of them.
//
//	go test ./functions/reconcile -run '^$' -bench EntryLife -benchtime 200x
func BenchmarkEntryLife(b *testing.B) {
	f := newFixture(b, false)
	st := f.storeAt(time.Now().UTC().Add(-10 * time.Minute))
	for i := range b.N {
		e := f.seed(st, entry(uint64(i+1), "life", store.Scheduled))
		f.move(st, e.ID, store.Scheduled, store.Replaying, "replay")
		f.move(st, e.ID, store.Replaying, store.Replayed, "replay")
		f.complete(e.IdempotencyKey)
	}
	h := f.handler(reconciler.Config{TimeBudget: 10 * time.Minute, PageSize: 300}, nil)
	before := f.st.Ops()
	b.ResetTimer()
	start := time.Now()
	rep := f.run(h, false)
	elapsed := time.Since(start)
	b.StopTimer()
	ops := f.st.Ops()
	for i := range b.N {
		if e := f.get(entry(uint64(i+1), "life", store.Scheduled).ID); e.Status != store.Recovered {
			b.Fatalf("entry %s = %s after the run, want recovered (%s)", e.ID, e.Status, summary(rep))
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(ops.Reads-before.Reads)/n, "reads/entry")
	b.ReportMetric(float64(ops.Writes-before.Writes)/n, "writes/entry")
	b.ReportMetric(n/elapsed.Seconds(), "entries/s")
}
