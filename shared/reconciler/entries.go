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

// Category names the tenant checks read (SPEC §6).
const categoryPoison = "poison"

// entries passes over the entries created in the window, page by page and
// possibly over several runs, counting per tenant and recounting each
// closed hour's metrics; at the end of the pass it raises the tenant alerts
// and compares (and repairs) the hourly metrics.
func (r *run) entries(ctx context.Context, sec *audit.Section) error {
	now := r.now()
	p := r.state.Pass
	if p == nil || now.Sub(p.To) > r.h.cfg.Window {
		// No pass in progress, or one so old its window says nothing now.
		to := now
		p = &Pass{From: to.Truncate(time.Hour).Add(-r.h.cfg.Window), To: to,
			Tenants: map[string]*audit.TenantHealth{}, Hours: map[string]*store.Metrics{}}
	}
	if p.Tenants == nil {
		p.Tenants = map[string]*audit.TenantHealth{}
	}
	if p.Hours == nil {
		p.Hours = map[string]*store.Metrics{}
	}
	r.state.Pass = p
	for {
		if r.over() {
			sec.Add("scanned", 0)
			return errBudget
		}
		page, next, err := r.scanCreated(ctx, p.From, p.To, p.Cursor)
		if err != nil {
			return err
		}
		for _, e := range page {
			r.count(p, e)
		}
		p.Cursor = next
		p.Scanned += int64(len(page))
		sec.Add("scanned", int64(len(page)))
		if next.IsZero() {
			break
		}
	}
	sec.Add("pass_total", p.Scanned)
	if err := r.finishPass(ctx, sec, p); err != nil {
		return err
	}
	var dups int64
	for _, t := range p.Tenants {
		dups += t.Duplicates
	}
	r.state.LastPass = &PassSummary{From: p.From, To: p.To, Scanned: p.Scanned, Duplicates: dups}
	r.state.Pass = nil
	return nil
}

// closedBefore is the end of the last hour of the pass whose metrics can no
// longer change.
func (r *run) closedBefore(p *Pass) time.Time {
	return p.To.Add(-r.h.cfg.Grace).Truncate(time.Hour)
}

func (r *run) count(p *Pass, e *store.Entry) {
	if e.CreatedAt.Before(r.closedBefore(p)) {
		// Only the counters drift is judged on are kept, so the saved pass
		// stays small; a drifted hour is recounted in full when repaired.
		h := store.Hour(e.CreatedAt)
		m := p.Hours[h]
		if m == nil {
			m = &store.Metrics{Hour: h, ByTenant: map[string]int64{}, ByKind: map[string]int64{}}
			p.Hours[h] = m
		}
		m.Total++
		m.ByTenant[metricKey(e.Tenant)]++
		m.ByKind[metricKey(e.Kind)]++
	}
	// Replays published and recovered are counted in the hour they happen,
	// with the transition; the entries' histories show the same facts,
	// so a closed hour can be checked against them too.
	for _, tr := range e.History {
		if tr.From == "" || tr.From == tr.To || tr.At.Before(p.From) || !tr.At.Before(r.closedBefore(p)) {
			continue
		}
		var published, recovered int64
		switch store.Status(tr.To) {
		case store.Replayed:
			published = 1
		case store.Recovered:
			recovered = 1
		default:
			continue
		}
		h := store.Hour(tr.At)
		m := p.Hours[h]
		if m == nil {
			m = &store.Metrics{Hour: h, ByTenant: map[string]int64{}, ByKind: map[string]int64{}}
			p.Hours[h] = m
		}
		m.ReplaysPublished += published
		m.ReplaysRecovered += recovered
	}
	t := p.Tenants[e.Tenant]
	if t == nil {
		t = &audit.TenantHealth{Tenant: e.Tenant}
		p.Tenants[e.Tenant] = t
	}
	t.Entries++
	if e.CreatedAt.After(t.LastFailure) {
		t.LastFailure = e.CreatedAt
	}
	if !e.CreatedAt.Before(p.To.Add(-time.Hour)) {
		t.EntriesLastHr++
		p.LastHour++
		if e.Category == categoryPoison {
			t.PoisonLastHr++
		}
	}
	switch e.Status {
	case store.Scheduled, store.Held, store.Replaying:
		t.PendingRetries++
	case store.Quarantined:
		if e.Category == categoryPoison {
			t.ActivePoison++
		}
	case store.Escalated:
		t.Escalated++
	case store.Recovered:
		t.Recovered++
	}
	if slices.Contains(store.SettledStatuses, e.Status) {
		t.Settled++
	}
	if duplicate(e) {
		t.Duplicates++
	}
}

// initialStatus is the status an entry was created in (the first history
// transition), or its current one when the history no longer shows it.
func initialStatus(e *store.Entry) store.Status {
	if len(e.History) > 0 && e.History[0].From == "" {
		return store.Status(e.History[0].To)
	}
	return e.Status
}

// duplicate reports whether replay found the entry's task completed before
// publishing it: the work was done although the message also died (a
// completion attempted twice; docs/reconcile.md).
func duplicate(e *store.Entry) bool {
	for _, t := range e.History {
		if t.From == string(store.Replaying) && t.To == string(store.Recovered) && t.By != By {
			return true
		}
	}
	return false
}

func (r *run) finishPass(ctx context.Context, sec *audit.Section, p *Pass) error {
	cfg := r.h.cfg
	active := 0
	for _, t := range p.Tenants {
		if t.EntriesLastHr > 0 {
			active++
		}
	}
	for _, name := range slices.Sorted(maps.Keys(p.Tenants)) {
		t := p.Tenants[name]
		t.RecoveryRate = -1
		if t.Settled > 0 {
			t.RecoveryRate = float64(t.Recovered) / float64(t.Settled)
		}
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
		if p.LastHour >= int64(cfg.DominanceMinTotal) && active >= 2 {
			if share := float64(t.EntriesLastHr) / float64(p.LastHour); share > cfg.DominanceShare {
				f := r.finding(audit.AlertTenantDominates, SectionEntries, name,
					fmt.Sprintf("tenant %s has %d of the last hour's %d entries (%.0f%%, more than %.0f%%)",
						name, t.EntriesLastHr, p.LastHour, 100*share, 100*cfg.DominanceShare))
				f.Example(name)
				f.Value, f.Threshold = share, cfg.DominanceShare
			}
		}
	}
	return r.drift(ctx, sec, p)
}

// drift compares each closed hour of the pass with its metrics and rewrites
// the hours whose creation counters disagree with the entries.
func (r *run) drift(ctx context.Context, sec *audit.Section, p *Pass) error {
	var f *audit.Finding
	for h := p.From; h.Before(r.closedBefore(p)); h = h.Add(time.Hour) {
		hour := store.Hour(h)
		want := store.Metrics{Hour: hour}
		if m := p.Hours[hour]; m != nil {
			want = *m
		}
		cur, err := r.h.store.ReadMetrics(ctx, hour)
		if err != nil {
			return err
		}
		sec.Add("hours_checked", 1)
		if agree(cur, want) {
			continue
		}
		f = r.repairing(f, audit.AlertMetricDrift, SectionEntries, "hours whose metrics disagree with their entries (total, by tenant or by kind, or fewer replays than the entries show)", "recompute_hour")
		if !r.plan(f, fmt.Sprintf("%s: metrics %d, entries %d", hour, cur.Total, want.Total)) {
			continue
		}
		full, err := r.recountHour(ctx, h)
		if err != nil {
			f.Repair.Fail(err)
			continue
		}
		full.ReplaysPublished, full.ReplaysRecovered = want.ReplaysPublished, want.ReplaysRecovered
		rewritten, err := r.h.store.RewriteHour(ctx, hour, func(now store.Metrics) (store.Metrics, bool) {
			if agree(now, full) {
				return store.Metrics{}, false
			}
			fixed := full
			// Replays published and recovered are counted when they
			// happen (by entries created in any hour): the larger of the
			// stored count and the entries' histories, which may have
			// lost transitions of entries older than the window.
			fixed.ReplaysPublished = max(now.ReplaysPublished, want.ReplaysPublished)
			fixed.ReplaysRecovered = max(now.ReplaysRecovered, want.ReplaysRecovered)
			return fixed, true
		})
		switch {
		case err != nil:
			f.Repair.Fail(err)
		case rewritten:
			f.Repair.Done++
			r.h.log.InfoContext(ctx, "reconcile: metrics hour recomputed", "run_id", r.rep.RunID, "hour", hour, "was", cur.Total, "now", full.Total)
		default:
			f.Repair.Skipped++
		}
	}
	return nil
}

// agree compares the stored metrics a with b, counted from the entries: the
// counters that only entry creation changes and that no later transition
// rewrites on the entry (total, by tenant, by kind) must be equal; the
// replays published and recovered must be at least what the entries'
// histories show (entries created before the window are not scanned).
func agree(a, b store.Metrics) bool {
	return a.Total == b.Total && sameCounts(a.ByTenant, b.ByTenant) && sameCounts(a.ByKind, b.ByKind) &&
		a.ReplaysPublished >= b.ReplaysPublished && a.ReplaysRecovered >= b.ReplaysRecovered
}

func sameCounts(a, b map[string]int64) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

// metricKey is a counter key as the metrics documents store it.
func metricKey(k string) string {
	if k == "" {
		return "(none)"
	}
	return k
}

// recountHour recounts every counter of an hour from its entries, as
// classify counted them: each entry as it was created (its initial status),
// so later transitions do not move it between status counters.
func (r *run) recountHour(ctx context.Context, h time.Time) (store.Metrics, error) {
	m := store.Metrics{Hour: store.Hour(h)}
	var cursor store.Cursor
	for {
		page, next, err := r.scanCreated(ctx, h, h.Add(time.Hour), cursor)
		if err != nil {
			return m, err
		}
		for _, e := range page {
			c := *e
			c.Status = initialStatus(e)
			store.AddEntryMetrics(&m, &c)
		}
		if next.IsZero() {
			return m, nil
		}
		cursor = next
	}
}
