package reconciler_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// steppingClock advances by step at every reading, so a time budget is
// spent after a known number of clock readings however fast or slow the
// machine is: the test asserts where the work stops, not how fast it goes.
type steppingClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *steppingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

// A recount of six hours holding 5 000 entries does not fit its budget:
// it stops before the fourth hour and names the hours it did not reach; a
// recount from the first of them finishes the window. Together they read
// every entry once, rewrite the one hour that disagreed (a counter written
// outside the transactions) and nothing else, and a third recount finds
// every hour in agreement.
func TestRecountStopsAtItsBudget(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	const n, tenants = 5000, 10
	now := time.Now().UTC()
	seedBulk(t, f, n, tenants, now.Add(-5*time.Hour), 5*time.Hour-time.Minute, false)
	drifted := now.Add(-2 * time.Hour)
	if err := f.st.AddMetrics(f.ctx, drifted, "stray", store.Metrics{Total: 1, ByTenant: map[string]int64{"t1": 1}}); err != nil {
		t.Fatal(err)
	}

	// Readings: one at the start, one before each hour; the fourth hour's
	// reading is past 100 ms + 350 ms.
	clock := &steppingClock{t: now, step: 100 * time.Millisecond}
	h := f.handler(reconciler.Config{TimeBudget: time.Minute, PageSize: 400}, clock.Now)
	from := now.Add(-5 * time.Hour)
	first, err := h.Recount(f.ctx, reconciler.RecountOptions{From: from, To: now, Budget: 350 * time.Millisecond})
	if err != nil {
		t.Fatalf("first Recount = %v", err)
	}
	if len(first.Hours) != 3 || len(first.NotReached) != 3 {
		t.Fatalf("first Recount: %d hours done, not reached %v; want 3 and 3", len(first.Hours), first.NotReached)
	}
	rest, err := time.Parse(store.HourLayout, first.NotReached[0])
	if err != nil {
		t.Fatal(err)
	}
	second, err := h.Recount(f.ctx, reconciler.RecountOptions{From: rest, To: now, Budget: time.Hour})
	if err != nil || len(second.NotReached) != 0 || len(second.Hours) != 3 {
		t.Fatalf("second Recount = %d hours, not reached %v, %v; want the last 3 hours", len(second.Hours), second.NotReached, err)
	}
	if got := first.Entries + second.Entries; got != n {
		t.Errorf("recounts read %d entries in all, want each of %d once", got, n)
	}
	if got := first.Rewritten + second.Rewritten; got != 1 {
		t.Errorf("recounts rewrote %d hours, want the drifted one", got)
	}
	for _, hr := range append(first.Hours, second.Hours...) {
		if hr.Rewritten != (hr.Hour == store.Hour(drifted)) {
			t.Errorf("hour %s rewritten = %v (agreed %v), want only %s rewritten", hr.Hour, hr.Rewritten, hr.Agreed, store.Hour(drifted))
		}
	}
	again, err := h.Recount(f.ctx, reconciler.RecountOptions{From: from, To: now, Budget: time.Hour})
	if err != nil || again.Disagreed != 0 || again.Entries != n {
		t.Errorf("third Recount = %d disagreed, %d entries, %v; want none of %d", again.Disagreed, again.Entries, err, n)
	}
}

// seedBulk writes n recovered entries spread evenly over [from, from+span)
// with BulkWriter, and hourly metrics that agree with them; legacy leaves
// out the tenant counters, as hours written before they existed.
func seedBulk(t testing.TB, f *fixture, n, tenants int, from time.Time, span time.Duration, legacy bool) {
	bw := f.fs.BulkWriter(f.ctx)
	hours := map[string]*store.Metrics{}
	at := map[string]time.Time{}
	for i := range n {
		e := entry(uint64(1000+i), fmt.Sprintf("t%d", i%tenants), store.Recovered)
		e.CreatedAt = from.Add(time.Duration(i) * span / time.Duration(n))
		e.UpdatedAt, e.ExpireAt, e.RootID = e.CreatedAt, e.CreatedAt.Add(store.Retention), e.ID
		e.Kinds = []string{e.Kind}
		e.History = []store.Transition{{At: e.CreatedAt, To: string(store.Recovered), By: "classify"}}
		if _, err := bw.Set(f.fs.Collection(store.FailureLog).Doc(e.ID), e); err != nil {
			t.Fatal(err)
		}
		h := store.Hour(e.CreatedAt)
		if hours[h] == nil {
			hours[h], at[h] = &store.Metrics{}, e.CreatedAt
		}
		store.AddEntryMetrics(hours[h], e)
		if !legacy {
			store.AddTenantPart(hours[h], e)
		}
	}
	bw.End()
	for h, m := range hours {
		if err := f.st.AddMetrics(f.ctx, at[h], "seed", *m); err != nil {
			t.Fatal(err)
		}
	}
}

// Hours written before the tenant counters existed do not add up: the first
// run after an upgrade recounts each closed hour of the window once from
// its entries, and the next run's tenant health counts every entry, with
// nothing left to repair.
func TestUpgradeRecountsHoursWithoutTenantCounters(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	const n, tenants = 300, 3
	start := time.Now().UTC().Truncate(time.Hour).Add(-4 * time.Hour)
	seedBulk(t, f, n, tenants, start, 3*time.Hour, true)
	h := f.handler(reconciler.Config{TimeBudget: time.Minute}, nil)
	first := f.run(h, false)
	if fd := finding(t, first, audit.AlertMetricDrift); fd.Repair == nil || fd.Repair.Done != 3 || fd.Repair.Failed != 0 {
		t.Fatalf("first run metric_drift = %+v, want the 3 legacy hours recounted", fd)
	}
	second := f.run(h, false)
	if len(second.Findings) != 0 {
		t.Errorf("second run: %s; want nothing left", summary(second))
	}
	var counted int64
	for _, th := range second.Tenants {
		counted += th.Recovered
		if th.Entries != n/tenants || th.Settled != th.Entries {
			t.Errorf("tenant %s = %d entries, %d settled; want %d recovered", th.Tenant, th.Entries, th.Settled, n/tenants)
		}
	}
	if counted != n || len(second.Tenants) != tenants {
		t.Errorf("second run: %d tenants, %d recovered entries; want %d, %d", len(second.Tenants), counted, tenants, n)
	}
}
