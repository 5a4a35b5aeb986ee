package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// hourStats is one row of `dlqctl stats`.
type hourStats struct {
	Hour       string           `json:"hour"`
	Processed  int64            `json:"processed"` // -1: no stream sample for the hour
	Entries    int64            `json:"entries"`
	DLQRate    float64          `json:"dlq_rate"` // -1 when nothing was processed
	Recovered  int64            `json:"auto_resolved"`
	Human      int64            `json:"human_required"`
	ByCategory map[string]int64 `json:"by_category"`
}

func (a *app) cmdStats(ctx context.Context, args []string) error {
	fs := newFlags("stats")
	hours := fs.Int("hours", 24, "hours to show, the current one included (1-720)")
	asJSON := fs.Bool("json", false, "JSON output")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	if *hours < 1 || *hours > 720 {
		return usagef("stats [--hours 1-720] [--json]")
	}
	st, err := a.listingStore(ctx)
	if err != nil {
		return err
	}
	now := a.clock()
	first := now.Truncate(time.Hour).Add(-time.Duration(*hours-1) * time.Hour)
	var rows []hourStats
	var outcomes store.Outcomes
	if a.scope == "" {
		rows, outcomes, err = a.statsFromMetrics(ctx, st, first, *hours)
	} else {
		// The hourly counters mix tenants; a tenant-limited caller gets
		// its own numbers counted from its entries instead.
		rows, outcomes, err = a.statsFromEntries(ctx, st, first, *hours)
	}
	if err != nil {
		return err
	}
	figures := outcomes.Figures()
	if *asJSON {
		return writeJSON(a.stdout, map[string]any{"hours": rows, "tenant": a.scope, "resolution": figures})
	}
	defer printResolution(a.stdout, figures)
	tw := tabwriter.NewWriter(a.stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "HOUR (UTC)\tPROCESSED\tDLQ ENTRIES\tDLQ RATE\tAUTO-RESOLVED\tHUMAN-REQUIRED\t")
	var sum hourStats
	var rate store.DeadRate
	for _, r := range rows {
		outf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t\n", r.Hour, count(r.Processed), r.Entries, pct(r.DLQRate), r.Recovered, r.Human)
		sum.Entries += r.Entries
		sum.Recovered += r.Recovered
		sum.Human += r.Human
		rate.Add(r.Entries, r.Processed)
	}
	outf(tw, "total\t%d\t%d\t%s\t%d\t%d\t\n", rate.Published, sum.Entries, pct(rate.Rate()), sum.Recovered, sum.Human)
	tw.Flush()
	if rate.Sampled < len(rows) {
		// The total's columns would otherwise not add up: its rate leaves
		// out the hours without a work-stream sample, its entries do not.
		outf(a.stdout, "total DLQ rate: %d dead of %d processed, over the %d of %d hours with a work-stream sample\n",
			rate.Dead, rate.Published, rate.Sampled, len(rows))
	}
	cats := map[string]bool{}
	for _, r := range rows {
		for c := range r.ByCategory {
			cats[c] = true
		}
	}
	if len(cats) > 0 {
		outf(a.stdout, "\nentries per category, oldest hour first\n")
		for _, c := range slices.Sorted(maps.Keys(cats)) {
			series := make([]int64, len(rows))
			var total int64
			for i, r := range rows {
				series[i] = r.ByCategory[c]
				total += series[i]
			}
			outf(a.stdout, "  %-26s %s %d\n", c, sparkline(series), total)
		}
	}
	return nil
}

func (a *app) statsFromMetrics(ctx context.Context, st *store.Store, first time.Time, hours int) ([]hourStats, store.Outcomes, error) {
	var outcomes store.Outcomes
	ms, err := st.HourlyMetrics(ctx, first, hours)
	if err != nil {
		return nil, outcomes, err
	}
	published, err := st.HourlyPublished(ctx, first, hours)
	if err != nil {
		return nil, outcomes, err
	}
	rows := make([]hourStats, hours)
	for i, m := range ms {
		outcomes.Add(m.Outcomes)
		r := hourStats{Hour: m.Hour, Entries: m.Total, Recovered: m.ReplaysRecovered, ByCategory: m.ByCategory, Processed: published[i]}
		// An hour's by_status counts each entry by the status it was
		// created in: those that started out waiting for a person.
		for _, s := range store.StatusesWhere(store.Status.NeedsHuman) {
			r.Human += m.ByStatus[string(s)]
		}
		var hour store.DeadRate
		hour.Add(r.Entries, r.Processed)
		r.DLQRate = hour.Rate()
		rows[i] = r
	}
	return rows, outcomes, nil
}

// statsFromEntries counts a tenant's rows from its entries created in the
// window, and the resolution counters of their moves in it.
func (a *app) statsFromEntries(ctx context.Context, st *store.Store, first time.Time, hours int) ([]hourStats, store.Outcomes, error) {
	var outcomes store.Outcomes
	rows := make([]hourStats, hours)
	for i := range rows {
		rows[i] = hourStats{Hour: store.Hour(first.Add(time.Duration(i) * time.Hour)), Processed: -1, DLQRate: -1, ByCategory: map[string]int64{}}
	}
	q := store.Query{Tenant: a.scope, CreatedFrom: first, View: store.ScanView, Limit: 1000}
	for n := 0; n < 100000; {
		p, err := st.Entries(ctx, q)
		if err != nil {
			return nil, outcomes, err
		}
		for h, o := range store.RecountOutcomes(p.Entries) {
			if t, err := time.Parse(store.HourLayout, h); err == nil && !t.Before(first) {
				outcomes.Add(o)
			}
		}
		for _, e := range p.Entries {
			n++
			i := int(e.CreatedAt.Sub(first) / time.Hour)
			if i < 0 || i >= hours {
				continue
			}
			r := &rows[i]
			r.Entries++
			r.ByCategory[e.Category]++
			if e.Status == store.Recovered {
				r.Recovered++
			}
			if len(e.History) > 0 && store.Status(e.History[0].To).NeedsHuman() {
				r.Human++
			}
		}
		if p.Next.IsZero() {
			break
		}
		q.After = p.Next
	}
	return rows, outcomes, nil
}

func pct(r float64) string {
	if r < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", 100*r)
}

func count(n int64) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// sparkline draws a series with ▁▂▃▄▅▆▇█ scaled to its maximum; zero is a
// space-like dot so that empty hours are visible.
func sparkline(series []int64) string {
	bars := []rune("▁▂▃▄▅▆▇█")
	var top int64
	for _, v := range series {
		top = max(top, v)
	}
	var b strings.Builder
	for _, v := range series {
		switch {
		case v <= 0:
			b.WriteRune('·')
		case top == 0:
			b.WriteRune(bars[0])
		default:
			b.WriteRune(bars[min(int((v*int64(len(bars))-1)/top), len(bars)-1)])
		}
	}
	return b.String()
}

// healthJSON is health's --json document.
type healthJSON struct {
	RunID    string                `json:"run_id,omitempty"`
	At       time.Time             `json:"at,omitzero"`
	Tenants  []*audit.TenantHealth `json:"tenants"`
	Alerts   []*audit.Finding      `json:"alerts"`
	Breakers []*store.Breaker      `json:"breakers"`
}

func (a *app) cmdHealth(ctx context.Context, args []string) error {
	asJSON, err := parseJSONOnly("health", args)
	if err != nil {
		return err
	}
	st, err := a.listingStore(ctx)
	if err != nil {
		return err
	}
	r, err := st.LatestAudit(ctx)
	if err != nil {
		return err
	}
	breakers, err := st.ListBreakers(ctx, store.BreakerStatesNotClosed(), reconciler.MaxBreakers)
	if err != nil {
		return err
	}
	h := healthJSON{Tenants: []*audit.TenantHealth{}, Alerts: []*audit.Finding{}, Breakers: []*store.Breaker{}}
	for _, b := range breakers {
		if a.scope == "" || b.Tenant == a.scope {
			h.Breakers = append(h.Breakers, b)
		}
	}
	if r != nil {
		h.RunID, h.At = r.RunID, r.FinishedAt
		state := map[string]string{}
		for _, b := range breakers {
			state[b.Tenant] = b.State
		}
		for _, t := range r.Tenants {
			if a.scope == "" || t.Tenant == a.scope {
				// The stored report keeps the counts; the rate and the
				// breaker state are derived (now) rather than stored.
				t.RecoveryRate = store.Recovery{Recovered: t.Recovered, Settled: t.Settled}.Rate()
				t.Breaker = state[t.Tenant]
				h.Tenants = append(h.Tenants, t)
			}
		}
		for _, f := range r.Findings {
			// A tenant-limited caller sees its own tenant's alerts only:
			// the pipeline-wide ones list other tenants' entries.
			if f.Alert && (a.scope == "" || f.Tenant == a.scope) {
				h.Alerts = append(h.Alerts, f)
			}
		}
	}
	if asJSON {
		return writeJSON(a.stdout, h)
	}
	if r == nil {
		fmt.Fprintln(a.stdout, "no reconcile report yet (dlqctl audit runs one)")
	} else {
		outf(a.stdout, "latest audit %s (%s, %s ago)\n", r.RunID, r.FinishedAt.Format(time.RFC3339), a.clock().Sub(r.FinishedAt).Round(time.Second))
	}
	tw := tabwriter.NewWriter(a.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nTENANT\tENTRIES\tLAST HOUR\tPENDING\tPOISON\tESCALATED\tRECOVERED\tRECOVERY\tBREAKER\tLAST FAILURE")
	for _, t := range h.Tenants {
		outf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", t.Tenant, t.Entries, t.EntriesLastHr, t.PendingRetries, t.ActivePoison,
			t.Escalated, t.Recovered, pct(t.RecoveryRate), orDash(t.Breaker), t.LastFailure.Format(time.RFC3339))
	}
	tw.Flush()
	outf(a.stdout, "\nbreakers open or half-open: %d\n", len(h.Breakers))
	for _, b := range h.Breakers {
		outf(a.stdout, "  %s  %s since %s\n", b.Tenant, b.State, b.OpenedAt.Format(time.RFC3339))
	}
	outf(a.stdout, "active alerts: %d\n", len(h.Alerts))
	for _, f := range h.Alerts {
		outf(a.stdout, "  %-7s %-26s %s (see docs/runbook.md#%s)\n", f.Severity, f.Name, f.Message, f.Name)
	}
	return nil
}

// reconcileHandler builds reconcile in-process with the operator's own
// credentials: the deployed function accepts only Cloud Scheduler's OIDC
// identity, and the audit needs nothing the operator cannot read.
func (a *app) reconcileHandler(ctx context.Context) (*reconciler.Handler, error) {
	st, sched, err := a.scheduling(ctx)
	if err != nil {
		return nil, err
	}
	r := config.NewReader(a.lookup)
	cfg := reconciler.ReadConfig(r)
	if err := r.Err(); err != nil {
		return nil, err
	}
	if len(cfg.WorkStreams) == 0 {
		// An operator's audit samples the default work stream unless told
		// otherwise; the deployed function samples what Terraform names.
		cfg.WorkStreams = []string{event.DefaultWorkStream}
	}
	if a.reconcileConfig != nil {
		a.reconcileConfig(&cfg)
	}
	return reconciler.New(cfg, reconciler.Deps{Logger: a.logger(), Store: st, Tasks: sched, JetStream: a.js, Now: a.now}), nil
}

func (a *app) cmdAudit(ctx context.Context, args []string) error {
	fs := newFlags("audit")
	dry := fs.Bool("dry-run", false, "report what would be repaired; change nothing")
	asJSON := fs.Bool("json", false, "print the raw report (jsdlq.audit.v1)")
	recount := fs.Bool("recount", false, "recount the hourly metrics and tenant counters from the entries, hour by hour, and rewrite the hours that disagree")
	since := fs.String("since", "", "--recount: first hour (RFC 3339 or a duration back from now; default the tenant-health window)")
	until := fs.String("until", "", "--recount: end (default now)")
	budget := fs.Duration("budget", 0, "--recount: stop before the next hour after this long (default RECONCILE_TIME_BUDGET, 4m)")
	page := fs.Int("page", 0, "--recount: entries per query (default 300)")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	if a.scope != "" {
		return usagef("audit covers every tenant; a caller limited to tenant %q cannot run it (dlqctl health shows the tenant's part)", a.scope)
	}
	if !*recount && (*since != "" || *until != "" || *budget != 0 || *page != 0) {
		return usagef("--since, --until, --budget and --page go with --recount")
	}
	if *budget < 0 || *page < 0 {
		return usagef("--budget and --page must not be negative")
	}
	h, err := a.reconcileHandler(ctx)
	if err != nil {
		return err
	}
	if *recount {
		o := reconciler.RecountOptions{Budget: *budget, PageSize: *page, DryRun: *dry}
		for _, tv := range []struct {
			flag string
			v    string
			t    *time.Time
		}{{"--since", *since, &o.From}, {"--until", *until, &o.To}} {
			if tv.v == "" {
				continue
			}
			if *tv.t, err = parseTime(tv.v, a.clock()); err != nil {
				return usagef("%s: %v", tv.flag, err)
			}
		}
		return a.recount(ctx, h, o, *asJSON)
	}
	r, err := h.Run(ctx, *dry)
	if errors.Is(err, reconciler.ErrLeaseHeld) {
		return conflictError{fmt.Sprintf("%v; try again when it finishes", err)}
	}
	if r == nil {
		return err
	}
	if *asJSON {
		if jerr := writeJSON(a.stdout, r); jerr != nil {
			return jerr
		}
	} else {
		printReport(a.stdout, r)
	}
	if err != nil {
		return err
	}
	if len(r.Errors) > 0 {
		return fmt.Errorf("audit %s finished with %d errors", r.RunID, len(r.Errors))
	}
	return nil
}

// conflictError is exit 4 without a store error to wrap.
type conflictError struct{ msg string }

func (e conflictError) Error() string { return e.msg }
func (conflictError) ExitCode() int   { return exitConflict }

func printReport(w interface{ Write([]byte) (int, error) }, r *audit.Report) {
	mode := "repairs applied"
	if r.DryRun {
		mode = "dry run, nothing changed"
	}
	outf(w, "audit %s (%s) %s → %s, %s\n", r.RunID, mode, r.StartedAt.Format(time.RFC3339), r.FinishedAt.Format(time.RFC3339),
		ifSet(r.Complete, "complete")+ifSet(r.BudgetExhausted, "stopped by its budget; next run resumes at "+resumeSection(r)))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nSECTION\tSTATUS\tFIRESTORE R/W\tCOUNTS")
	for _, s := range r.Sections {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(s.Counts)) {
			parts = append(parts, fmt.Sprintf("%s=%d", k, s.Counts[k]))
		}
		note := strings.Join(parts, " ")
		if s.Error != "" {
			note += "  error: " + s.Error
		}
		outf(tw, "%s\t%s\t%d/%d\t%s\n", s.Name, s.Status, s.FirestoreReads, s.FirestoreWrites, note)
	}
	tw.Flush()
	outf(w, "\nfindings: %d  alerts: %s  repairs planned %d done %d skipped %d failed %d\n", len(r.Findings),
		orDash(strings.Join(r.Alerts, ", ")), r.Repairs.Planned, r.Repairs.Done, r.Repairs.Skipped, r.Repairs.Failed)
	for _, f := range r.Findings {
		rep := ""
		if f.Repair != nil {
			rep = fmt.Sprintf("  [%s: planned %d done %d skipped %d failed %d]", f.Repair.Action, f.Repair.Planned, f.Repair.Done, f.Repair.Skipped, f.Repair.Failed)
		}
		outf(w, "  %-7s %-26s %d  %s%s\n", f.Severity, f.Name, f.Count, f.Message, rep)
		if len(f.Examples) > 0 {
			outf(w, "          e.g. %s\n", strings.Join(f.Examples, " "))
		}
	}
	if t := r.Traffic; t != nil {
		outf(w, "\ntraffic %s → %s: published %d, completed %d, dead %d, duplicates %d, DLQ rate %s\n",
			t.From.Format(time.RFC3339), t.To.Format(time.RFC3339), t.Published, t.Completed, t.Dead, t.Duplicates, pct(t.DLQRate))
	}
	if len(r.Tenants) > 0 {
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\nTENANT\tENTRIES\tPENDING\tPOISON\tESCALATED\tRECOVERED\tRECOVERY\tDUPLICATES")
		for _, t := range r.Tenants {
			outf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%d\n", t.Tenant, t.Entries, t.PendingRetries, t.ActivePoison, t.Escalated,
				t.Recovered, pct(t.RecoveryRate), t.Duplicates)
		}
		tw.Flush()
	}
	for _, e := range r.Errors {
		outf(w, "error: %s\n", e)
	}
}

func resumeSection(r *audit.Report) string {
	if r.Resume == nil {
		return "-"
	}
	return r.Resume.Section
}

// recount runs the bounded full recount, one progress line per hour on
// stderr, and prints what it found and did.
func (a *app) recount(ctx context.Context, h *reconciler.Handler, o reconciler.RecountOptions, asJSON bool) error {
	o.Progress = func(hr store.HourRecount) {
		verdict := "agrees"
		switch {
		case hr.Rewritten:
			verdict = fmt.Sprintf("disagreed (total %d, entries %d): rewritten", hr.Stored.Total, hr.Recount.Total)
		case !hr.Agreed:
			verdict = fmt.Sprintf("disagrees (total %d, entries %d)", hr.Stored.Total, hr.Recount.Total)
		}
		outf(a.stderr, "recount %s: %d entries, %s\n", hr.Hour, hr.Entries, verdict)
	}
	res, err := h.Recount(ctx, o)
	if errors.Is(err, reconciler.ErrLeaseHeld) {
		return conflictError{fmt.Sprintf("%v; try again when it finishes", err)}
	}
	if err != nil {
		return err
	}
	if asJSON {
		if err := writeJSON(a.stdout, res); err != nil {
			return err
		}
	} else {
		mode := "disagreeing hours rewritten"
		if res.DryRun {
			mode = "dry run, nothing changed"
		}
		outf(a.stdout, "recount %s → %s (%s): %d hours, %d entries, %d disagreed, %d rewritten\n",
			res.From.Format(time.RFC3339), res.To.Format(time.RFC3339), mode, len(res.Hours), res.Entries, res.Disagreed, res.Rewritten)
		for _, hr := range res.Hours {
			if !hr.Agreed {
				outf(a.stdout, "  %s: metrics total %d, entries %d%s\n", hr.Hour, hr.Stored.Total, hr.Recount.Total, ifSet(hr.Rewritten, ", rewritten"))
			}
		}
	}
	if len(res.NotReached) > 0 {
		return partialError{fmt.Sprintf("recount stopped by its budget; %d hours not reached: continue with --since %s",
			len(res.NotReached), res.NotReached[0]+":00:00Z")}
	}
	return nil
}
