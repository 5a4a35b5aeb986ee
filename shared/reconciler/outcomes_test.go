package reconciler_test

import (
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// The report's outcomes section shows the last 24 hours' resolution
// figures from the counters, and alerts when the fleet recovered under
// 80 % of what settled and when more than a fifth of the claimed replays
// were denied; under the minimum sample neither alerts.
func TestOutcomesSection(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		recovered, discarded, denied int
		alerts                       []string
	}{
		{"healthy", 20, 2, 1, nil},
		{"recovery and denials", 10, 12, 10, []string{audit.AlertRecoveryBelow80, audit.AlertReplayDenials}},
		{"too few to judge", 2, 5, 3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, false)
			now := time.Now().UTC()
			st := f.storeAt(now.Add(-time.Hour))
			seq := uint64(0)
			seed := func(status store.Status) string {
				seq++
				return f.seed(st, entry(seq, "acme", status)).ID
			}
			for range tc.recovered {
				id := seed(store.Scheduled)
				f.move(st, id, store.Scheduled, store.Replaying, "replay")
				f.move(st, id, store.Replaying, store.Replayed, "replay")
				f.move(st, id, store.Replayed, store.Recovered, "reconcile")
			}
			for range tc.discarded {
				f.move(st, seed(store.Escalated), store.Escalated, store.Discarded, "ops")
			}
			for range tc.denied {
				id := seed(store.Scheduled)
				f.move(st, id, store.Scheduled, store.Replaying, "replay")
				f.move(st, id, store.Replaying, store.AwaitingApproval, "replay")
			}
			rep := f.run(f.handler(reconciler.Config{}, nil), true)
			var sec *audit.Section
			for _, s := range rep.Sections {
				if s.Name == reconciler.SectionOutcomes {
					sec = s
				}
			}
			if sec == nil || sec.Status != audit.StatusComplete {
				t.Fatalf("outcomes section = %+v, want complete", sec)
			}
			settled := int64(tc.recovered + tc.discarded)
			for k, want := range map[string]int64{
				"settled": settled, "recovered": int64(tc.recovered), "settled.transient": settled,
				"replayed.transient": int64(tc.recovered), "retry_recovered.transient": int64(tc.recovered),
				"claimed": int64(tc.recovered + tc.denied), "denied": int64(tc.denied),
			} {
				if got := sec.Counts[k]; got != want {
					t.Errorf("outcomes count %s = %d, want %d", k, got, want)
				}
			}
			for _, name := range []string{audit.AlertRecoveryBelow80, audit.AlertReplayDenials} {
				want := false
				for _, a := range tc.alerts {
					want = want || a == name
				}
				if got := len(findings(rep, name)) > 0; got != want {
					t.Errorf("finding %s = %v, want %v (%s)", name, got, want, summary(rep))
				}
			}
		})
	}
}
