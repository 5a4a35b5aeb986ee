package reconciler_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// The first run of a day folds the day that ended (past the grace) into
// one rollup document, once: the rows stay what they were, a later run
// leaves the day alone, and a dry run folds nothing.
func TestRunFoldsClosedDays(t *testing.T) {
	f := newFixture(t, false)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	clock := today.Add(2 * time.Hour)
	h := f.handler(reconciler.Config{TimeBudget: time.Minute}, func() time.Time { return clock })
	yesterday := f.storeAt(today.Add(-3 * time.Hour))
	for i := range 24 {
		f.seed(yesterday, entry(uint64(i+1), "acme", []store.Status{store.Scheduled, store.Escalated, store.Recovered}[i%3]))
	}
	rows := func() []store.Rollup {
		t.Helper()
		r, err := f.st.HourlyRollups(f.ctx, today.Add(-3*time.Hour), 1)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	before := rows()
	tests := []struct {
		name   string
		dry    bool
		folded int64
	}{
		{"a dry run", true, 0},
		{"the day's first run", false, 1},
		{"its next run", false, 0},
	}
	for _, tt := range tests {
		rep := f.run(h, tt.dry)
		if got := section(t, rep, reconciler.SectionEntries).Counts["days_folded"]; got != tt.folded {
			t.Errorf("%s: days_folded = %d, want %d", tt.name, got, tt.folded)
		}
		if diff := cmp.Diff(before, rows()); diff != "" {
			t.Errorf("%s: yesterday's rows changed (-before +after):\n%s", tt.name, diff)
		}
	}
	if folded, err := f.st.CompactDay(f.ctx, today.Add(-time.Hour)); err != nil || folded {
		t.Errorf("CompactDay(yesterday) after the runs = %v, %v; want nothing left to fold", folded, err)
	}
}
