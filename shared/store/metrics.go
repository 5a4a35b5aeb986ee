package store

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"cloud.google.com/go/firestore"
)

// HourLayout names hourly metrics documents: dlq-metrics/2026-11-21T13.
const HourLayout = "2006-01-02T15"

// Hour returns the metrics document id of t's hour (UTC).
func Hour(t time.Time) string { return t.UTC().Format(HourLayout) }

// Metrics are the counters of one hour (docs/storage.md, "Metrics"). As a
// delta only the non-zero counters are written; as a read it is the sum of all
// shards.
type Metrics struct {
	Hour             string           `firestore:"hour" json:"hour"`
	Total            int64            `firestore:"total" json:"total"`
	ByKind           map[string]int64 `firestore:"by_kind" json:"by_kind"`
	ByCategory       map[string]int64 `firestore:"by_category" json:"by_category"`
	ByReason         map[string]int64 `firestore:"by_reason" json:"by_reason"`
	ByAgent          map[string]int64 `firestore:"by_agent" json:"by_agent"`
	ByTenant         map[string]int64 `firestore:"by_tenant" json:"by_tenant"`
	ByAction         map[string]int64 `firestore:"by_action" json:"by_action"`
	ByStatus         map[string]int64 `firestore:"by_status" json:"by_status"`
	ReplaysScheduled int64            `firestore:"replays_scheduled" json:"replays_scheduled"`
	ReplaysPublished int64            `firestore:"replays_published" json:"replays_published"`
	ReplaysRecovered int64            `firestore:"replays_recovered" json:"replays_recovered"`
	Escalated        int64            `firestore:"escalated" json:"escalated"`
	// StreamSeqMax is the highest stream sequence seen per stream this hour:
	// how far into each stream the dead messages reach.
	StreamSeqMax map[string]int64 `firestore:"stream_seq_max" json:"stream_seq_max"`
	// Tenants are the tenant-hour counters (tenanthealth.go) of the entries
	// created this hour, by tenant: unlike the counters above, which count
	// each entry as it was created, they follow the entries' status moves.
	// Reconcile's tenant health reads them; they are not part of the
	// metrics API.
	Tenants map[string]TenantHour `firestore:"tenants,omitempty" json:"-"`
	// Deaths are the deaths of counted tasks (Entry.PredictFeatures) among
	// the entries created this hour, by prediction cell (deathCell) and
	// reason code: what the predictions' learner folds, written by Record
	// with the entry's other counters, so the learner reads hours, not
	// entries. Like the counters above they count each entry as it died;
	// a recount leaves them as they are (a scan does not read the headers
	// they come from).
	Deaths map[string]map[string]int64 `firestore:"predict_deaths,omitempty" json:"-"`
	// Outcomes are the resolution counters of the moves made this hour
	// (outcomes.go); they are copied into the hour's row of the day
	// rollup. A recount keeps them as they are (RecountOutcomes checks
	// them against the histories).
	Outcomes Outcomes `firestore:"outcomes,omitempty" json:"outcomes"`
	// Shards is how many shard documents a read summed (CompactHour folds
	// a closed hour's into one).
	Shards int `firestore:"-" json:"-"`
}

// counter is a total of Metrics under its document field name.
type counter struct {
	field string
	v     *int64
}

// breakdown is a per-key count of Metrics under its document field name.
type breakdown struct {
	field string
	m     *map[string]int64
}

// counters lists m's totals and breakdowns (all but StreamSeqMax, a maximum,
// not a sum) once, in the same order for every Metrics, for the code that
// writes, sums and normalises them.
func (m *Metrics) counters() ([]counter, []breakdown) {
	return []counter{
			{"total", &m.Total},
			{"replays_scheduled", &m.ReplaysScheduled},
			{"replays_published", &m.ReplaysPublished},
			{"replays_recovered", &m.ReplaysRecovered},
			{"escalated", &m.Escalated},
		}, []breakdown{
			{"by_kind", &m.ByKind},
			{"by_category", &m.ByCategory},
			{"by_reason", &m.ByReason},
			{"by_agent", &m.ByAgent},
			{"by_tenant", &m.ByTenant},
			{"by_action", &m.ByAction},
			{"by_status", &m.ByStatus},
		}
}

// EntryMetrics is the delta one new entry adds.
func EntryMetrics(e *Entry) Metrics {
	m := Metrics{
		Total:      1,
		ByKind:     map[string]int64{e.Kind: 1},
		ByCategory: map[string]int64{e.Category: 1},
		ByReason:   map[string]int64{e.ReasonCode: 1},
		ByAgent:    map[string]int64{e.Agent: 1},
		ByTenant:   map[string]int64{e.Tenant: 1},
		ByAction:   map[string]int64{e.Action: 1},
		ByStatus:   map[string]int64{string(e.Status): 1},
	}
	switch e.Status {
	case Scheduled:
		m.ReplaysScheduled = 1
	case Escalated:
		m.Escalated = 1
	}
	if e.Stream != "" && e.StreamSeq > 0 {
		m.StreamSeqMax = map[string]int64{e.Stream: e.StreamSeq}
	}
	return m
}

// updates turns a delta into merge data: increments for counters, maximum
// for stream sequences. Map keys become single field-path segments, so
// tenant or agent names with dots stay one field.
func (m Metrics) updates(hour string) map[string]any {
	u := map[string]any{"hour": hour}
	totals, breakdowns := m.counters()
	for _, c := range totals {
		if *c.v != 0 {
			u[c.field] = firestore.Increment(*c.v)
		}
	}
	for _, b := range breakdowns {
		if len(*b.m) == 0 {
			continue
		}
		sub := map[string]any{}
		for k, v := range *b.m {
			sub[metricKey(k)] = firestore.Increment(v)
		}
		u[b.field] = sub
	}
	if len(m.StreamSeqMax) > 0 {
		sub := map[string]any{}
		for k, v := range m.StreamSeqMax {
			sub[k] = firestore.FieldTransformMaximum(v)
		}
		u["stream_seq_max"] = sub
	}
	if len(m.Deaths) > 0 {
		sub := map[string]any{}
		for cell, reasons := range m.Deaths {
			r := map[string]any{}
			for reason, n := range reasons {
				r[metricKey(reason)] = firestore.Increment(n)
			}
			sub[cell] = r
		}
		u["predict_deaths"] = sub
	}
	if ou := m.Outcomes.updates(); len(ou) > 0 {
		u["outcomes"] = ou
	}
	if len(m.Tenants) > 0 {
		sub := map[string]any{}
		for k, t := range m.Tenants {
			if tu := t.updates(); len(tu) > 0 {
				sub[metricKey(k)] = tu
			}
		}
		u["tenants"] = sub
	}
	return u
}

// shardRef picks the shard by a hash of key (the entry id), so one entry
// always lands on the same shard and load spreads over all of them.
func (s *Store) shardRef(hour, key string) *firestore.DocumentRef {
	return s.hourShards(hour).Doc(shardOf(key, s.shards))
}

// shardOf is the id of key's shard of n.
func shardOf(key string, n int) string {
	h := fnv.New32a()
	h.Write([]byte(key))
	return strconv.Itoa(int(h.Sum32() % uint32(n)))
}

// hourRef is the metrics document of an hour; its shards and its stream
// samples are its subcollections.
func (s *Store) hourRef(hour string) *firestore.DocumentRef {
	return s.fs.Collection(MetricsColl).Doc(hour)
}

// hourShards are the shard documents of an hour.
func (s *Store) hourShards(hour string) *firestore.CollectionRef {
	return s.hourRef(hour).Collection(MetricsShards)
}

// replaceShards makes shard 0 of hour hold m and deletes the hour's other
// shards (snaps: every shard, as tx read them), so the sum ReadMetrics
// returns is m: how a rewrite and a recount replace an hour's counters.
func (s *Store) replaceShards(tx *firestore.Transaction, hour string, snaps []*firestore.DocumentSnapshot, m Metrics) error {
	for _, snap := range snaps {
		if snap.Ref.ID != "0" {
			if err := tx.Delete(snap.Ref); err != nil {
				return err
			}
		}
	}
	s.wrote(len(snaps) + 1)
	m.Hour = hour
	return tx.Set(s.hourShards(hour).Doc("0"), m)
}

// AddMetrics adds a delta to the hour of at, with its part of the day
// rollup's row (addCounts), in a transaction of blind writes. key picks the
// shard; use the entry id. The transactions that create and move entries
// count in their own transaction; this is for counts that belong to no
// entry's move.
func (s *Store) AddMetrics(ctx context.Context, at time.Time, key string, m Metrics) error {
	hour := Hour(at)
	err := s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		return s.addCounts(tx, hour, key, m, s.Now())
	})
	if err != nil {
		return fmt.Errorf("firestore add metrics %s: %w", hour, err)
	}
	return nil
}

// ReadMetrics sums every shard of an hour. It reads the shard documents
// whatever the configured shard count (a query, not fixed ids), so a
// changed count never hides counts.
func (s *Store) ReadMetrics(ctx context.Context, hour string) (Metrics, error) {
	snaps, err := readAll(s, s.hourShards(hour).Documents(ctx))
	if err != nil {
		return Metrics{}, fmt.Errorf("firestore read metrics %s: %w", hour, err)
	}
	return sumShards(hour, snaps)
}

// sumShards decodes the shard documents of an hour and adds them up.
func sumShards(hour string, snaps []*firestore.DocumentSnapshot) (Metrics, error) {
	sum := Metrics{Hour: hour, Shards: len(snaps)}
	for _, snap := range snaps {
		var m Metrics
		if err := snap.DataTo(&m); err != nil {
			return Metrics{}, fmt.Errorf("decode metrics %s shard %s: %w", hour, snap.Ref.ID, err)
		}
		sumMetricsInto(&sum, m)
	}
	return sum, nil
}

func sumMap(dst *map[string]int64, src map[string]int64) {
	if len(src) == 0 {
		return
	}
	if *dst == nil {
		*dst = map[string]int64{}
	}
	for k, v := range src {
		(*dst)[k] += v
	}
}

// sumMetricsInto adds one shard (or hour) m to sum.
func sumMetricsInto(sum *Metrics, m Metrics) {
	sumTotals, sumBreakdowns := sum.counters()
	totals, breakdowns := m.counters()
	for i, c := range totals {
		*sumTotals[i].v += *c.v
	}
	for i, b := range breakdowns {
		sumMap(sumBreakdowns[i].m, *b.m)
	}
	for k, v := range m.StreamSeqMax {
		if sum.StreamSeqMax == nil {
			sum.StreamSeqMax = map[string]int64{}
		}
		sum.StreamSeqMax[k] = max(sum.StreamSeqMax[k], v)
	}
	sumTenants(&sum.Tenants, m.Tenants)
	addDeaths(&sum.Deaths, m.Deaths, 1)
	sum.Outcomes.Add(m.Outcomes)
}

// addDeaths adds sign × src to the death cells dst (Metrics.Deaths),
// dropping the reasons and cells that come to zero.
func addDeaths(dst *map[string]map[string]int64, src map[string]map[string]int64, sign int64) {
	for cell, reasons := range src {
		if *dst == nil {
			*dst = map[string]map[string]int64{}
		}
		d := (*dst)[cell]
		if d == nil {
			d = map[string]int64{}
			(*dst)[cell] = d
		}
		for reason, n := range reasons {
			if d[reason] += sign * n; d[reason] == 0 {
				delete(d, reason)
			}
		}
		if len(d) == 0 {
			delete(*dst, cell)
		}
	}
}

// RewriteHour replaces the counters of an hour, in a transaction over every
// shard and the day rollup: fix sees the current sum and returns the
// counters the hour should hold, or false to leave it (it agrees now, or
// another run rewrote it). Shard 0 gets the returned counters and the other
// shards are deleted, so the sum ReadMetrics returns equals them; the
// hour's row of its day rollup is rewritten to their part (replaceRow).
func (s *Store) RewriteHour(ctx context.Context, hour string, fix func(cur Metrics) (Metrics, bool)) (rewritten bool, err error) {
	return s.rewriteHour(ctx, hour, fix, true)
}

// rewriteHour is RewriteHour; withRow false leaves the day rollup unread
// and unwritten, for a rewrite that keeps the sum (CompactHour).
func (s *Store) rewriteHour(ctx context.Context, hour string, fix func(cur Metrics) (Metrics, bool), withRow bool) (rewritten bool, err error) {
	err = s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		rewritten = false
		snaps, err := readAll(s, tx.Documents(s.hourShards(hour)))
		if err != nil {
			return err
		}
		var rsnaps []*firestore.DocumentSnapshot
		if withRow {
			day, _ := splitHour(hour)
			if rsnaps, err = readAll(s, tx.Documents(s.dayShards(day))); err != nil {
				return err
			}
		}
		cur, err := sumShards(hour, snaps)
		if err != nil {
			return err
		}
		want, ok := fix(cur)
		if !ok {
			return nil
		}
		rewritten = true
		if withRow {
			if _, err := s.replaceRow(tx, hour, rsnaps, want.rollup()); err != nil {
				return err
			}
		}
		return s.replaceShards(tx, hour, snaps, want)
	})
	if err != nil {
		return false, txError("rewrite metrics "+hour, err)
	}
	return rewritten, nil
}

// CompactHour folds the shards of an hour into shard 0, in a transaction
// over every shard, so the hour is one document to read until status moves
// of its entries write other shards again. Use it on closed hours: the
// current hour's shards take every new entry, which is what they are for.
// It reports whether it wrote (false: the hour had at most one shard). The
// sum stays, and so does the hour's row of its day rollup.
func (s *Store) CompactHour(ctx context.Context, hour string) (bool, error) {
	return s.rewriteHour(ctx, hour, func(cur Metrics) (Metrics, bool) { return cur, cur.Shards > 1 }, false)
}

// AddEntryMetrics adds e's contribution (EntryMetrics) to the sum m, as
// the metrics documents store it: empty keys become NoKey.
func AddEntryMetrics(m *Metrics, e *Entry) {
	d := EntryMetrics(e)
	_, breakdowns := d.counters()
	for _, b := range breakdowns {
		mm := *b.m
		if v, ok := mm[""]; ok {
			delete(mm, "")
			mm[NoKey] += v
		}
	}
	sumMetricsInto(m, d)
}
