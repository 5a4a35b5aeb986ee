package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/jsdlq/jsdlq/shared/store"
)

// printResolution writes the window's resolution figures (store.Outcomes,
// counted by the moves' transactions) below `dlqctl stats`' hours.
func printResolution(w io.Writer, r store.Resolution) {
	outf(w, "\nresolution (the moves of the window)\n")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "CATEGORY\tSETTLED\tRECOVERED\tAUTO-RESOLVED\tAUTO SHARE\t")
	for _, c := range slices.Sorted(maps.Keys(r.Categories)) {
		f := r.Categories[c]
		outf(tw, "%s\t%d\t%d\t%d\t%s\t\n", c, f.Settled, f.Recovered, f.Auto, pct(f.AutoShare))
	}
	outf(tw, "all\t%d\t%d\t\t%s recovered\t\n", r.Settled, r.Recovered, pct(r.Recovery))
	tw.Flush()
	if len(r.Strategies) > 0 {
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "STRATEGY\tREPLAYS\tRECOVERED\tRETRY SUCCESS\t")
		for _, s := range slices.Sorted(maps.Keys(r.Strategies)) {
			f := r.Strategies[s]
			outf(tw, "%s\t%d\t%d\t%s\t\n", s, f.Replayed, f.Recovered, pct(f.Success))
		}
		tw.Flush()
	}
	outf(w, "time to a human decision: %s\n", quantiles(r.ToDecision))
	outf(w, "time to recovery:         %s\n", quantiles(r.ToRecovery))
	outf(w, "replays denied by a gate: %d of %d claimed (%s)\n", r.Denied, r.Claimed, pct(r.DenialRate))
}

// quantiles writes a sketch's figures: each an upper bound, a factor √2
// wide.
func quantiles(q store.Quantiles) string {
	if q.N == 0 {
		return "-"
	}
	return fmt.Sprintf("median ≤ %s, p95 ≤ %s (%d entries)", q.Median.Round(time.Second), q.P95.Round(time.Second), q.N)
}
