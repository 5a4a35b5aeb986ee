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

// steppingClock advances by step at every reading, so a run's time budget
// is spent after a known number of clock readings however fast or slow the
// machine is: the test asserts where the run stops, not how fast it goes.
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

// A pass over 5 000 entries does not fit a 2 s budget: the run stops with
// a cursor, the next runs continue from it, and the pass that completes has
// counted every entry exactly once (its recount agrees with the metrics,
// which a skipped or twice-counted page would break).
func TestBudgetStopsWithCursorAndResumes(t *testing.T) {
	f := newFixture(t, false)
	const n, tenants = 5000, 10
	now := time.Now().UTC()
	seedBulk(t, f, n, tenants, now)

	const budget = 2 * time.Second
	clock := &steppingClock{t: now, step: 100 * time.Millisecond}
	h := f.handler(reconciler.Config{TimeBudget: budget, PageSize: 200}, clock.Now)

	first := f.run(h, false)
	if first.Complete || !first.BudgetExhausted {
		t.Fatalf("first run complete=%v budget_exhausted=%v, want it stopped by the budget", first.Complete, first.BudgetExhausted)
	}
	if first.Resume == nil || first.Resume.Section != reconciler.SectionEntries || first.Resume.Cursors[reconciler.SectionEntries] == "" {
		t.Fatalf("first run resume = %+v, want the entries section with its cursor", first.Resume)
	}
	if d := first.FinishedAt.Sub(first.StartedAt); d > budget+time.Second {
		t.Errorf("first run took %s of its clock, budget %s", d, budget)
	}
	scanned := func(rep *audit.Report) int64 {
		for _, s := range rep.Sections {
			if s.Name == reconciler.SectionEntries {
				return s.Counts["scanned"]
			}
		}
		return 0
	}
	total := scanned(first)
	if total == 0 || total >= n {
		t.Fatalf("first run scanned %d entries, want some but not all %d", total, n)
	}

	var last *audit.Report
	for run := 2; run <= 30; run++ {
		rep := f.run(h, false)
		total += scanned(rep)
		if len(rep.Tenants) > 0 {
			last = rep
			break
		}
		if rep.Resume.Section != reconciler.SectionEntries {
			t.Fatalf("run %d resumes at %q, want the unfinished entries pass", run, rep.Resume.Section)
		}
	}
	if last == nil {
		t.Fatalf("the pass did not complete in 30 runs (%d scanned)", total)
	}
	if total != n {
		t.Errorf("runs scanned %d entries in all, want each of %d once", total, n)
	}
	var counted int64
	for _, th := range last.Tenants {
		counted += th.Entries
		if th.Entries != n/tenants {
			t.Errorf("tenant %s counted %d entries, want %d", th.Tenant, th.Entries, n/tenants)
		}
	}
	if counted != n {
		t.Errorf("completed pass counted %d entries, want %d", counted, n)
	}
	if fd := findings(last, audit.AlertMetricDrift); len(fd) != 0 {
		t.Errorf("metric drift after a resumed pass: %s", summary(last))
	}
	// The ring goes on: every section the completing run did not reach is
	// reached by the next run, which starts where the completing run stopped.
	next := f.run(h, false)
	reached := map[string]bool{}
	for _, rep := range []*audit.Report{last, next} {
		for _, s := range rep.Sections {
			if s.Status != audit.StatusNotReached {
				reached[s.Name] = true
			}
		}
	}
	for _, name := range []string{reconciler.SectionCapture, reconciler.SectionTasks, reconciler.SectionReplaying, reconciler.SectionReplayed, reconciler.SectionHeld} {
		if !reached[name] {
			t.Errorf("section %s not reached by the completing run nor the next: %s | %s", name, sectionSummary(last), sectionSummary(next))
		}
	}
}

// seedBulk writes n recovered entries spread over the last five hours with
// BulkWriter, and hourly metrics that agree with them.
func seedBulk(t testing.TB, f *fixture, n, tenants int, now time.Time) {
	bw := f.fs.BulkWriter(f.ctx)
	hours := map[string]*store.Metrics{}
	at := map[string]time.Time{}
	for i := range n {
		e := entry(uint64(1000+i), fmt.Sprintf("t%d", i%tenants), store.Recovered)
		e.CreatedAt = now.Add(-5 * time.Hour).Add(time.Duration(i) * (5*time.Hour - time.Minute) / time.Duration(n))
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
	}
	bw.End()
	for h, m := range hours {
		if err := f.st.AddMetrics(f.ctx, at[h], "seed", *m); err != nil {
			t.Fatal(err)
		}
	}

}

// BenchmarkEntriesPass measures a full pass over 2 000 entries (tenant
// health and metric recount) on the Firestore emulator, as entries/s.
// Dry runs write nothing but their report, so every iteration is a full pass.
func BenchmarkEntriesPass(b *testing.B) {
	f := newFixture(b, false)
	const n = 2000
	seedBulk(b, f, n, 10, time.Now().UTC())
	h := f.handler(reconciler.Config{TimeBudget: 10 * time.Minute, PageSize: 300}, nil)
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		rep, err := h.Run(f.ctx, true)
		if err != nil || len(rep.Tenants) != 10 {
			b.Fatalf("Run = %v, %d tenants; want a complete pass", err, len(rep.Tenants))
		}
	}
	b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "entries/s")
}

func sectionSummary(rep *audit.Report) string {
	out := ""
	for _, s := range rep.Sections {
		out += fmt.Sprintf("%s=%s %v; ", s.Name, s.Status, s.Counts)
	}
	return out
}
