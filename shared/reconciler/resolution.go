package reconciler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/store"
)

// SectionOutcomes reports the resolution figures of the last 24 hours from
// the day rollups' counters (store.Outcomes; no scan), and alerts on the
// fleet's recovery and the replays' denial rate.
const SectionOutcomes = "outcomes"

// Thresholds of the outcomes' alerts, and the least a window must hold
// before a share of it alerts (a handful of moves says nothing).
const (
	RecoveryAlertBelow = 0.80
	DenialAlertAbove   = 0.20
	OutcomesMinSample  = 20
)

// outcomes reads the 24 hours ending with the current one and writes their
// figures into the section's counts: per category settled, recovered and
// auto-resolved (settled.<category>, …), per strategy replays and their
// recoveries, the times to a decision and to recovery in seconds (each a
// sketch's bucket bound), replays claimed and denied.
func (r *run) outcomes(ctx context.Context, sec *audit.Section) error {
	first := r.now().Truncate(time.Hour).Add(-23 * time.Hour)
	rows, err := r.h.store.HourlyRollups(ctx, first, 24)
	if err != nil {
		return err
	}
	var o store.Outcomes
	for _, row := range rows {
		o.Add(row.Outcomes)
	}
	f := o.Figures()
	for _, c := range slices.Sorted(maps.Keys(f.Categories)) {
		cf := f.Categories[c]
		sec.Add("settled."+c, cf.Settled)
		sec.Add("recovered."+c, cf.Recovered)
		sec.Add("auto_resolved."+c, cf.Auto)
	}
	for _, s := range slices.Sorted(maps.Keys(f.Strategies)) {
		sf := f.Strategies[s]
		sec.Add("replayed."+s, sf.Replayed)
		sec.Add("retry_recovered."+s, sf.Recovered)
	}
	sec.Add("settled", f.Settled)
	sec.Add("recovered", f.Recovered)
	sec.Add("claimed", f.Claimed)
	sec.Add("denied", f.Denied)
	for name, q := range map[string]store.Quantiles{"to_decision": f.ToDecision, "to_recovery": f.ToRecovery} {
		if q.N > 0 {
			sec.Add(name+"_entries", q.N)
			sec.Add(name+"_median_s", int64(q.Median/time.Second))
			sec.Add(name+"_p95_s", int64(q.P95/time.Second))
		}
	}
	if f.Settled >= OutcomesMinSample && f.Recovery < RecoveryAlertBelow {
		fd := r.finding(audit.AlertRecoveryBelow80, SectionOutcomes, "",
			fmt.Sprintf("%d of %d entries settled in the last 24 h recovered (%.1f %%, under %.0f %%)", f.Recovered, f.Settled, 100*f.Recovery, 100*RecoveryAlertBelow))
		fd.Count = int(f.Settled - f.Recovered)
	}
	if f.Claimed >= OutcomesMinSample && f.DenialRate > DenialAlertAbove {
		fd := r.finding(audit.AlertReplayDenials, SectionOutcomes, "",
			fmt.Sprintf("%d of %d replays claimed in the last 24 h were kept back by a gate (%.1f %%, over %.0f %%)", f.Denied, f.Claimed, 100*f.DenialRate, 100*DenialAlertAbove))
		fd.Count = int(f.Denied)
	}
	return nil
}
