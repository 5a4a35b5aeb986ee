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
// counts moved into it; a crash came between) is invisible to the runs,
// whose hours still add up; the explicit recount finds it and rewrites the
// hour with the entries' counts. A second recount finds every hour in
// agreement and changes nothing.
func TestRecountRestoresReplaysFromHistory(t *testing.T) {
	t.Parallel()
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
	if fd := findings(f.run(h, false), audit.AlertMetricDrift); len(fd) != 0 {
		t.Errorf("run: metric_drift %+v, want none (the hour adds up)", fd)
	}
	var progress []string
	res, err := h.Recount(f.ctx, reconciler.RecountOptions{Progress: func(hr store.HourRecount) { progress = append(progress, hr.Hour) }})
	if err != nil {
		t.Fatalf("Recount = %v", err)
	}
	if res.Disagreed != 1 || res.Rewritten != 1 || res.Entries != 3 || len(res.NotReached) != 0 {
		t.Errorf("Recount = %d disagreed, %d rewritten, %d entries, not reached %v; want 1, 1, 3, none", res.Disagreed, res.Rewritten, res.Entries, res.NotReached)
	}
	if len(progress) != len(res.Hours) || len(progress) != 25 {
		t.Errorf("progress reported %d hours, result %d; want the window's 25", len(progress), len(res.Hours))
	}
	m, err := f.st.ReadMetrics(f.ctx, store.Hour(hour))
	if err != nil {
		t.Fatal(err)
	}
	if m.Total != 3 || m.ReplaysPublished != 3 || m.ReplaysRecovered != 1 || m.Tenants["acme"].InStatus(store.Replayed) != 2 {
		t.Errorf("hour after the recount: total %d, published %d, recovered %d, tenant %+v; want 3, 3, 1, 2 replayed", m.Total, m.ReplaysPublished, m.ReplaysRecovered, m.Tenants["acme"])
	}
	// Idempotent: the rewritten hour agrees.
	again, err := h.Recount(f.ctx, reconciler.RecountOptions{})
	if err != nil || again.Disagreed != 0 || again.Rewritten != 0 {
		t.Errorf("second Recount = %+v, %v; want every hour in agreement", again, err)
	}
}
