package reconciler_test

import (
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// An hour whose replays_published and replays_recovered fall short of what
// the entries' histories show (counted outside the transition before the
// counts moved into it; a crash came between) is drift: reconcile raises it
// and rewrites the hour with the entries' counts. A second run finds the
// hour in agreement and changes nothing.
func TestDriftRecountsReplaysFromHistory(t *testing.T) {
	f := newFixture(t, false)
	hour := time.Now().UTC().Add(-3 * time.Hour).Truncate(time.Hour).Add(5 * time.Minute)
	at := f.storeAt(hour)
	for seq := uint64(1); seq <= 3; seq++ {
		e := f.seed(at, entry(seq, "acme", store.Scheduled))
		f.move(at, e.ID, store.Scheduled, store.Replaying, "replay")
		f.move(at, e.ID, store.Replaying, store.Replayed, "replay") // no count: the legacy crash
		if seq == 1 {
			f.move(at, e.ID, store.Replayed, store.Recovered, "reconcile")
		}
	}
	h := f.handler(reconciler.Config{TimeBudget: time.Minute}, nil)
	rep := f.run(h, false)
	fd := finding(t, rep, audit.AlertMetricDrift)
	if fd.Repair == nil || fd.Repair.Done != 1 {
		t.Fatalf("metric_drift = %+v, want one hour recomputed", fd)
	}
	m, err := f.st.ReadMetrics(f.ctx, store.Hour(hour))
	if err != nil {
		t.Fatal(err)
	}
	if m.Total != 3 || m.ReplaysPublished != 3 || m.ReplaysRecovered != 1 {
		t.Errorf("hour after the repair: total %d, published %d, recovered %d; want 3, 3, 1", m.Total, m.ReplaysPublished, m.ReplaysRecovered)
	}
	// Idempotent: the repaired hour agrees.
	if again := findings(f.run(h, false), audit.AlertMetricDrift); len(again) != 0 {
		t.Errorf("second run: metric_drift %+v, want none", again)
	}
}
