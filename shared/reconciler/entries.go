package reconciler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// entries reports tenant health and raises the four tenant alerts from the
// tenant-hour counters of the window's hourly metrics (store.TenantHour,
// kept by the transactions that create entries and move their status), and
// checks each closed hour's counters against each other: an hour whose
// totals, tenants, kinds and statuses do not add up is recounted from its
// entries and rewritten (store.RecountHour). It reads the window's metrics
// shards (at most hours × shards documents), never its entries, so its cost
// does not grow with the dead messages. The full recount from the entries is
// `dlqctl audit --recount` (Handler.Recount).
func (r *run) entries(ctx context.Context, sec *audit.Section) error {
	now := r.now()
	from := now.Truncate(time.Hour).Add(-r.h.cfg.Window)
	closed := now.Add(-r.h.cfg.Grace).Truncate(time.Hour)
	w := &window{to: now, tenants: map[string]*audit.TenantHealth{}}
	var f *audit.Finding
	for h := from; h.Before(now); h = h.Add(time.Hour) {
		if r.over() {
			return errBudget
		}
		hour := store.Hour(h)
		m, err := r.h.store.ReadMetrics(ctx, hour)
		if err != nil {
			return err
		}
		sec.Add("hours_read", 1)
		w.add(h, m)
		w.addAgents(h, m)
		if !h.Before(closed) {
			continue
		}
		sec.Add("hours_checked", 1)
		why := inconsistent(m)
		if why == "" && m.Shards > 1 && !r.dry {
			// A closed hour is read by every run for a day: one document
			// instead of one per shard.
			compacted, err := r.h.store.CompactHour(ctx, hour)
			if err != nil {
				return err
			}
			if compacted {
				sec.Add("hours_compacted", 1)
			}
		}
		if why != "" {
			f = r.repairing(f, audit.AlertMetricDrift, SectionEntries,
				"hours whose metrics do not add up (total, tenants, kinds, statuses and the tenant counters must count the same entries)", "recompute_hour")
			if !r.plan(f, fmt.Sprintf("%s: %s", hour, why)) {
				continue
			}
			res, err := r.h.store.RecountHour(ctx, h, r.h.cfg.PageSize, false)
			switch {
			case err != nil:
				f.Repair.Fail(err)
			case res.Rewritten:
				f.Repair.Done++
				r.h.log.InfoContext(ctx, "reconcile: metrics hour recomputed", "run_id", r.rep.RunID, "hour", hour, "was", res.Stored.Total, "now", res.Recount.Total)
			default:
				f.Repair.Skipped++
			}
		}
	}
	if !r.dry {
		if err := r.foldDays(ctx, sec, closed); err != nil {
			return err
		}
	}
	var entries int64
	for _, t := range w.tenants {
		entries += t.Entries
	}
	sec.Add("entries", entries)
	r.alerts(w)
	r.agentAlerts(ctx, w, sec)
	r.state.LastPass = &PassSummary{From: from, To: now, Scanned: entries, Duplicates: w.duplicates}
	return nil
}

// foldDays folds the day rollups of the days that closed before closed
// (the grace: their last transactions have committed), each once, into one
// document (store.CompactDay): a dashboard reads a closed day as one
// document, two after moves of its entries. The days of the last week
// (what a dashboard reads) that no run folded yet are folded, whatever the
// window, so a reconcile that stopped for days catches up.
func (r *run) foldDays(ctx context.Context, sec *audit.Section, closed time.Time) error {
	const day = 24 * time.Hour
	d := closed.Truncate(day).Add(-7 * day)
	if last, err := time.Parse(store.DayLayout, r.state.DaysFolded); err == nil && !last.Add(day).Before(d) {
		d = last.Add(day)
	}
	for ; !d.Add(day).After(closed); d = d.Add(day) {
		if r.over() {
			return errBudget
		}
		folded, err := r.h.store.CompactDay(ctx, d)
		if err != nil {
			return err
		}
		if folded {
			sec.Add("days_folded", 1)
		}
		r.state.DaysFolded = store.Day(d)
	}
	return nil
}

// window sums the tenant-hour counters of the hours read.
type window struct {
	to      time.Time
	tenants map[string]*audit.TenantHealth
	// lastHour counts the entries of the last hour, all tenants together
	// (the dominance denominator).
	lastHour   int64
	duplicates int64
	// agents is each agent's most dead tasks within one of the last
	// hour's clock hours (agentalerts.go).
	agents map[string]int64
}

// add adds one hour's tenant counters. The last hour is the five-minute
// slots that overlap [to-1h, to): up to five minutes more than an hour.
func (w *window) add(h time.Time, m store.Metrics) {
	since := w.to.Add(-time.Hour)
	for key, th := range m.Tenants {
		if th.Entries() == 0 {
			// Only its last failure is left: its entries moved to the
			// tenant their explicit records named (store.RecordResult's
			// Retenanted).
			continue
		}
		name := key
		if name == store.NoKey {
			name = ""
		}
		t := w.tenants[name]
		if t == nil {
			t = &audit.TenantHealth{Tenant: name}
			w.tenants[name] = t
		}
		t.Entries += th.Entries()
		if th.LastFailureMs > 0 {
			if at := time.UnixMilli(th.LastFailureMs).UTC(); at.After(t.LastFailure) {
				t.LastFailure = at
			}
		}
		for slot, n := range th.Slots {
			if start, ok := store.SlotStart(h, slot); ok && start.Add(store.SlotWidth).After(since) {
				t.EntriesLastHr += n
				w.lastHour += n
			}
		}
		for slot, n := range th.PoisonSlots {
			if start, ok := store.SlotStart(h, slot); ok && start.Add(store.SlotWidth).After(since) {
				t.PoisonLastHr += n
			}
		}
		t.PendingRetries += th.InStatus(store.StatusesWhere(store.Status.Pending)...)
		t.ActivePoison += th.QuarantinedPoison
		t.Escalated += th.InStatus(store.Escalated)
		t.Recovered += th.InStatus(store.Recovered)
		t.Settled += th.InStatus(store.SettledStatuses...)
		t.Duplicates += th.Duplicates
		w.duplicates += th.Duplicates
	}
}

// inconsistent says how an hour's counters fail to count the same entries
// ("" when they agree): every entry is counted once in the total, once by
// tenant, by kind and by its status at creation, and once in its tenant's
// counters, by slot and by its current status.
func inconsistent(m store.Metrics) string {
	sum := func(c map[string]int64) int64 {
		var n int64
		for _, v := range c {
			n += v
		}
		return n
	}
	var tenants int64
	for _, k := range slices.Sorted(maps.Keys(m.Tenants)) {
		th := m.Tenants[k]
		n := th.Entries()
		tenants += n
		if s := sum(th.Statuses); s != n {
			return fmt.Sprintf("tenant %s: %d entries, %d by status", k, n, s)
		}
		if bt := m.ByTenant[k]; bt != n {
			return fmt.Sprintf("tenant %s: by_tenant %d, tenant counters %d", k, bt, n)
		}
	}
	switch {
	case tenants != m.Total:
		return fmt.Sprintf("total %d, tenant counters %d", m.Total, tenants)
	case sum(m.ByTenant) != m.Total:
		return fmt.Sprintf("total %d, by tenant %d", m.Total, sum(m.ByTenant))
	case sum(m.ByKind) != m.Total:
		return fmt.Sprintf("total %d, by kind %d", m.Total, sum(m.ByKind))
	case sum(m.ByStatus) != m.Total:
		return fmt.Sprintf("total %d, by status %d", m.Total, sum(m.ByStatus))
	}
	return ""
}

// alerts completes the tenant health table and raises the tenant alerts.
func (r *run) alerts(w *window) {
	cfg := r.h.cfg
	active := 0
	for _, t := range w.tenants {
		if t.EntriesLastHr > 0 {
			active++
		}
	}
	for _, name := range slices.Sorted(maps.Keys(w.tenants)) {
		t := w.tenants[name]
		t.RecoveryRate = store.Recovery{Recovered: t.Recovered, Settled: t.Settled}.Rate()
		t.Breaker = r.breakerState[name]
		r.rep.Tenants = append(r.rep.Tenants, t)
		if t.PoisonLastHr > int64(cfg.PoisonBurst) {
			f := r.finding(audit.AlertTenantPoisonBurst, SectionEntries, name,
				fmt.Sprintf("tenant %s has %d poison entries in the last hour (more than %d)", name, t.PoisonLastHr, cfg.PoisonBurst))
			f.Example(name)
			f.Value, f.Threshold = float64(t.PoisonLastHr), float64(cfg.PoisonBurst)
		}
		if t.Settled >= int64(cfg.RecoveryMinSettled) && t.RecoveryRate < cfg.RecoveryTarget {
			f := r.finding(audit.AlertTenantRecoveryBelow80, SectionEntries, name,
				fmt.Sprintf("tenant %s recovered %d of %d settled entries in the window (%.0f%%, target %.0f%%)",
					name, t.Recovered, t.Settled, 100*t.RecoveryRate, 100*cfg.RecoveryTarget))
			f.Example(name)
			f.Value, f.Threshold = t.RecoveryRate, cfg.RecoveryTarget
		}
		if name == event.ReservedTenant && t.Entries > 0 {
			f := r.finding(audit.AlertInvalidNames, SectionEntries, name,
				fmt.Sprintf("%d dead tasks of the window carried names that break the naming rule; they are recorded under tenant %s, flagged, with the names they carried (dlqctl ls --tenant '%s')",
					t.Entries, name, name))
			f.Example(name)
			f.Value = float64(t.Entries)
		}
		if w.lastHour >= int64(cfg.DominanceMinTotal) && active >= 2 {
			if share := float64(t.EntriesLastHr) / float64(w.lastHour); share > cfg.DominanceShare {
				f := r.finding(audit.AlertTenantDominates, SectionEntries, name,
					fmt.Sprintf("tenant %s has %d of the last hour's %d entries (%.0f%%, more than %.0f%%)",
						name, t.EntriesLastHr, w.lastHour, 100*share, 100*cfg.DominanceShare))
				f.Example(name)
				f.Value, f.Threshold = share, cfg.DominanceShare
			}
		}
	}
}
