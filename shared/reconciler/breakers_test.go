package reconciler_test

import (
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// A half-open breaker whose probe's outcome never arrives is settled once
// the probe timeout has passed: reopened when nothing shows the probe's
// task completed, closed when its completion is visible. A probe still
// within the timeout is left alone, a dry run only plans, and a second run
// finds nothing to settle: a breaker is never stuck half-open.
func TestOverdueProbesSettled(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	now := time.Now().UTC()
	cool := store.BreakerConfig{Threshold: 1, Window: time.Hour, Cooldown: 15 * time.Minute}
	// Each tenant's breaker opens an hour ago (one failure is enough), and
	// its next failure, past the cooldown, is let through as the probe at
	// probeAt.
	probe := func(tenant string, seq uint64, probeAt time.Time) *store.Entry {
		t.Helper()
		f.seed(f.storeAt(now.Add(-time.Hour), cool), entry(seq, tenant, store.Escalated))
		e := f.seed(f.storeAt(probeAt, cool), entry(seq+1, tenant, store.Scheduled))
		if !e.BreakerProbe {
			t.Fatalf("entry %s of %s is not the half-open probe", e.ID, tenant)
		}
		return e
	}
	probe("lost", 1, now.Add(-40*time.Minute))            // no outcome: counts as died
	done := probe("done", 11, now.Add(-40*time.Minute))   // completed, outcome never reported
	fresh := probe("fresh", 21, now.Add(-10*time.Minute)) // within the timeout
	f.complete(done.Tenant, done.IdempotencyKey)

	h := f.handler(reconciler.Config{TimeBudget: time.Minute, ProbeTimeout: 30 * time.Minute}, nil)
	dry := f.run(h, true)
	if fd := finding(t, dry, audit.FindingProbeSettled); fd.Count != 2 || fd.Alert || fd.Severity != audit.SevInfo ||
		fd.Repair.Planned != 2 || fd.Repair.Done != 0 {
		t.Errorf("dry run probe_settled = %+v, want 2 planned, no alert", fd)
	}
	for _, tenant := range []string{"lost", "done", "fresh"} {
		if b := f.breakerDoc(tenant); b.State != store.BreakerHalfOpen {
			t.Errorf("dry run: breaker of %s = %s, want still half_open", tenant, b.State)
		}
	}

	rep := f.run(h, false)
	fd := finding(t, rep, audit.FindingProbeSettled)
	if fd.Count != 2 || fd.Repair.Done != 2 || fd.Repair.Failed != 0 {
		t.Errorf("probe_settled = %+v, want 2 settled", fd)
	}
	want := map[string]string{"lost": store.BreakerOpen, "done": store.BreakerClosed, "fresh": store.BreakerHalfOpen}
	for tenant, state := range want {
		if b := f.breakerDoc(tenant); b.State != state {
			t.Errorf("breaker of %s = %s, want %s", tenant, b.State, state)
		}
	}
	if b := f.breakerDoc("fresh"); b.ProbeEntry != fresh.ID {
		t.Errorf("breaker of fresh has probe %q, want %s still in flight", b.ProbeEntry, fresh.ID)
	}
	if b := f.breakerDoc("lost"); b.History[len(b.History)-1].By != reconciler.By {
		t.Errorf("breaker of lost: last transition %+v, want made by %s", b.History[len(b.History)-1], reconciler.By)
	}
	health := map[string]string{}
	for _, th := range rep.Tenants {
		health[th.Tenant] = th.Breaker
	}
	if health["done"] != "" || health["lost"] != store.BreakerOpen {
		t.Errorf("tenant health breakers = %v, want done closed (none) and lost open", health)
	}

	again := f.run(h, false)
	if fs := findings(again, audit.FindingProbeSettled); len(fs) != 0 {
		t.Errorf("second run settled again: %s", summary(again))
	}
	for tenant, state := range want {
		if b := f.breakerDoc(tenant); b.State != state {
			t.Errorf("after the second run breaker of %s = %s, want %s", tenant, b.State, state)
		}
	}
}
