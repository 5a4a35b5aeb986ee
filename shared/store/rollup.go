package store

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"cloud.google.com/go/firestore"
)

// This file is the day rollup (dlq-rollups/{YYYY-MM-DD}/shards/{n}): per
// UTC day, the day's 24 hourly rows of what a dashboard shows (the entries
// created, by category; their statuses now; the work streams' samples), so
// a week is 8 small queries whatever the log holds. A row is a projection of
// its hour's metrics (Metrics.rollup): every write of an hour's counters
// (addCounts: Record, every status move, AddMetrics) writes the row's part
// in the same transaction, and every rewrite of an hour (a recount) rewrites
// the row with it, so the row always equals what its hour's shards add up
// to. Reconcile writes the streams' samples (RecordSample) and folds a
// closed day's shards into one (CompactDay).

// Rollups is the collection of day rollups; each day's shard documents
// are its MetricsShards subcollection.
const Rollups = "dlq-rollups"

// DayLayout names day rollup documents: dlq-rollups/2026-11-21.
const DayLayout = "2006-01-02"

// Day returns the rollup document id of t's day (UTC).
func Day(t time.Time) string { return t.UTC().Format(DayLayout) }

// closedDayShards is how many shards take the writes to a day that has
// ended: only moves of its entries write it then, far fewer than the
// creations and moves of the current day, so after reconcile folds the
// day's shards (CompactDay) it stays at most this many documents to read.
const closedDayShards = 2

// Rollup is one hour's row of a day rollup. As a delta only the non-zero
// counters are written.
type Rollup struct {
	// Hour is the row's hour (HourLayout), set by the reader.
	Hour string `firestore:"-"`
	// Total and ByCategory count the entries created in the hour as
	// classify counted them (Metrics.Total, Metrics.ByCategory).
	Total      int64            `firestore:"total,omitempty"`
	ByCategory map[string]int64 `firestore:"by_category,omitempty"`
	// Statuses counts the same entries by their status now: the
	// tenant-hour counters' statuses (TenantHour.Statuses), all tenants
	// together.
	Statuses map[string]int64 `firestore:"statuses,omitempty"`
	// Outcomes are the hour's resolution counters (Metrics.Outcomes).
	Outcomes Outcomes `firestore:"outcomes,omitempty"`
	// Streams is each work stream's sampled span in the hour
	// (RecordSample): written by reconcile, never summed.
	Streams map[string]StreamSpan `firestore:"streams,omitempty"`
	// Published is how many messages the work streams took in the hour
	// (publishedSeries), -1 when no stream was sampled in it; set by the
	// reader.
	Published int64 `firestore:"-"`
}

// StreamSpan is a work stream's last sequence at the hour's first and last
// sample (MetricsSample.FirstLastSeq, LastSeq).
type StreamSpan struct {
	First int64 `firestore:"first"`
	Last  int64 `firestore:"last"`
}

// InStatus is the number of the row's entries now in one of sts.
func (r Rollup) InStatus(sts ...Status) int64 {
	var n int64
	for _, st := range sts {
		n += r.Statuses[string(st)]
	}
	return n
}

// Recovery is the row's settled entries and how many of them recovered.
func (r Rollup) Recovery() Recovery {
	return Recovery{Recovered: r.InStatus(Recovered), Settled: r.InStatus(SettledStatuses...)}
}

// rollupDoc is one shard document of a day rollup: rows by hour of the day
// ("00" … "23").
type rollupDoc struct {
	Day   string            `firestore:"day"`
	Hours map[string]Rollup `firestore:"hours"`
}

// rollup is the part of an hour's counters (a delta or a sum) its day
// rollup's row holds.
func (m Metrics) rollup() Rollup {
	r := Rollup{Total: m.Total, Outcomes: m.Outcomes}
	for k, v := range m.ByCategory {
		if v != 0 {
			sumMap(&r.ByCategory, map[string]int64{metricKey(k): v})
		}
	}
	for _, t := range m.Tenants {
		for st, v := range t.Statuses {
			if v != 0 {
				sumMap(&r.Statuses, map[string]int64{st: v})
			}
		}
	}
	return r.normalized()
}

// normalized drops zero counters, so rows compare equal however they were
// reached.
func (r Rollup) normalized() Rollup {
	for _, m := range []*map[string]int64{&r.ByCategory, &r.Statuses} {
		c := maps.Clone(*m)
		maps.DeleteFunc(c, func(_ string, v int64) bool { return v == 0 })
		if len(c) == 0 {
			c = nil
		}
		*m = c
	}
	if len(r.Streams) == 0 {
		r.Streams = nil
	}
	r.Outcomes = r.Outcomes.Normalized()
	return r
}

// sameCounts reports whether two rows count the same (the streams' samples
// are not counts).
func (r Rollup) sameCounts(o Rollup) bool {
	a, b := r.normalized(), o.normalized()
	return a.Total == b.Total && maps.Equal(a.ByCategory, b.ByCategory) && maps.Equal(a.Statuses, b.Statuses) &&
		a.Outcomes.Equal(b.Outcomes)
}

func (r Rollup) isZero() bool { return r.sameCounts(Rollup{}) }

// add adds o's counts to r, and o's stream spans where r has none later.
func (r *Rollup) add(o Rollup) {
	r.Total += o.Total
	sumMap(&r.ByCategory, o.ByCategory)
	sumMap(&r.Statuses, o.Statuses)
	r.Outcomes.Add(o.Outcomes)
	for k, sp := range o.Streams {
		if r.Streams == nil {
			r.Streams = map[string]StreamSpan{}
		}
		if cur, ok := r.Streams[k]; !ok || sp.Last > cur.Last {
			r.Streams[k] = sp
		}
	}
}

// updates is the merge data of a row delta of hour: increments.
func (r Rollup) updates(hour string) map[string]any {
	day, hh := splitHour(hour)
	row := map[string]any{}
	if r.Total != 0 {
		row["total"] = firestore.Increment(r.Total)
	}
	for field, m := range map[string]map[string]int64{"by_category": r.ByCategory, "statuses": r.Statuses} {
		if len(m) == 0 {
			continue
		}
		sub := map[string]any{}
		for k, v := range m {
			sub[k] = firestore.Increment(v)
		}
		row[field] = sub
	}
	if ou := r.Outcomes.updates(); len(ou) > 0 {
		row["outcomes"] = ou
	}
	return map[string]any{"day": day, "hours": map[string]any{hh: row}}
}

// splitHour splits an hour id (HourLayout) into its day (DayLayout) and
// its hour of the day ("00" … "23").
func splitHour(hour string) (day, hh string) { return hour[:len(DayLayout)], hour[len(DayLayout)+1:] }

// dayShards are the shard documents of a day rollup.
func (s *Store) dayShards(day string) *firestore.CollectionRef {
	return s.fs.Collection(Rollups).Doc(day).Collection(MetricsShards)
}

// rollupShardRef is the day rollup shard an entry's (key's) counts of hour
// go to, written at now: one of the store's shards while the hour's day is
// the current one, one of closedDayShards after.
func (s *Store) rollupShardRef(hour, key string, now time.Time) *firestore.DocumentRef {
	day, _ := splitHour(hour)
	n := s.shards
	if day != Day(now) {
		n = min(n, closedDayShards)
	}
	return s.dayShards(day).Doc(shardOf(key, n))
}

// addCounts writes, in tx, the delta m to hour's counters (the shard of
// key, the entry id) and its part of the hour's row to the day rollup: the
// one write of counters every transaction that creates or moves an entry
// makes, so the rollup can never miss what the hour counts.
func (s *Store) addCounts(tx *firestore.Transaction, hour, key string, m Metrics, now time.Time) error {
	s.wrote(1)
	if err := tx.Set(s.shardRef(hour, key), m.updates(hour), firestore.MergeAll); err != nil {
		return err
	}
	r := m.rollup()
	if r.isZero() {
		return nil
	}
	s.wrote(1)
	return tx.Set(s.rollupShardRef(hour, key, now), r.updates(hour), firestore.MergeAll)
}

// readDay sums a day rollup's shard documents (snaps) into its rows by
// hour of the day.
func readDay(day string, snaps []*firestore.DocumentSnapshot) (map[string]Rollup, error) {
	rows := map[string]Rollup{}
	for _, snap := range snaps {
		var d rollupDoc
		if err := decodeInto(snap, &d); err != nil {
			return nil, err
		}
		for hh, r := range d.Hours {
			sum := rows[hh]
			sum.add(r)
			rows[hh] = sum
		}
	}
	for hh, r := range rows {
		r = r.normalizedRow() // increments leave zeros behind
		r.Hour = day + "T" + hh
		rows[hh] = r
	}
	return rows, nil
}

// HourlyRollups returns the rows of the n hours from first (UTC, truncated
// to the hour), oldest first, each with its Hour and Published set (an hour
// nothing was counted in is a zero row). It reads the day rollups of those
// hours and of the hour before (whose samples start the first hour's
// published count): one query per day, at once, each reading the day's
// shard documents (at most the store's shards for the current day and,
// once reconcile folded it, closedDayShards for a day before), so a week is
// at most 8 queries whatever the log holds.
func (s *Store) HourlyRollups(ctx context.Context, first time.Time, n int) ([]Rollup, error) {
	first = first.UTC().Truncate(time.Hour)
	from := first.Add(-time.Hour)
	var days []string
	for d := from.Truncate(24 * time.Hour); d.Before(first.Add(time.Duration(n) * time.Hour)); d = d.Add(24 * time.Hour) {
		days = append(days, Day(d))
	}
	read := make([]map[string]Rollup, len(days))
	errs := make([]error, len(days))
	var wg sync.WaitGroup
	for i, day := range days {
		wg.Go(func() {
			snaps, err := queryAll(ctx, s, s.dayShards(day).Query, "rollup "+day)
			if err == nil {
				read[i], err = readDay(day, snaps)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	byHour := map[string]Rollup{}
	for i, rows := range read {
		if errs[i] != nil {
			return nil, errs[i]
		}
		for _, r := range rows {
			byHour[r.Hour] = r
		}
	}
	out := make([]Rollup, n+1)
	spans := make([]map[string]StreamSpan, n+1)
	for i := range out {
		h := Hour(from.Add(time.Duration(i) * time.Hour))
		out[i] = byHour[h]
		out[i].Hour = h
		spans[i] = out[i].Streams
	}
	for i, p := range publishedSeries(spans) {
		out[i+1].Published = p
	}
	return out[1:], nil
}

// publishedSeries is how many messages the work streams took in each hour
// but the first of spans (oldest first; spans[0] is the hour before, which
// only gives the next hour's start): an hour's last sampled sequence minus
// the previous sampled hour's (or the hour's own first sample when no
// earlier hour has one), summed over the streams. Messages appended between
// two samples count in the hour of the later one. An hour without any
// sample is -1: nothing is known about it.
func publishedSeries(spans []map[string]StreamSpan) []int64 {
	if len(spans) == 0 {
		return nil
	}
	prevEnd := map[string]int64{}
	for stream, sp := range spans[0] {
		prevEnd[stream] = sp.Last
	}
	out := make([]int64, len(spans)-1)
	for i := range out {
		out[i] = -1
		for stream, sp := range spans[i+1] {
			start := sp.First
			if p, ok := prevEnd[stream]; ok && p <= start {
				start = p
			}
			out[i] = max(out[i], 0) + max(sp.Last-start, 0)
			prevEnd[stream] = sp.Last
		}
	}
	return out
}

// CompactDay folds the shards of a day's rollup into shard 0, in a
// transaction over every shard, so the day is one document to read (at
// most closedDayShards once moves of its entries write it again). Use it on
// closed days: reconcile does, once a day. It reports whether it wrote
// (false: the day had at most one shard).
func (s *Store) CompactDay(ctx context.Context, day time.Time) (bool, error) {
	id := Day(day)
	wrote := false
	err := s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		wrote = false
		snaps, err := readAll(s, tx.Documents(s.dayShards(id)))
		if err != nil || len(snaps) <= 1 {
			return err
		}
		rows, err := readDay(id, snaps)
		if err != nil {
			return err
		}
		doc := rollupDoc{Day: id, Hours: map[string]Rollup{}}
		for hh, r := range rows {
			doc.Hours[hh] = r.normalizedRow()
		}
		for _, snap := range snaps {
			if snap.Ref.ID != "0" {
				if err := tx.Delete(snap.Ref); err != nil {
					return err
				}
			}
		}
		s.wrote(len(snaps))
		wrote = true
		return tx.Set(s.dayShards(id).Doc("0"), doc)
	})
	if err != nil {
		return false, txError("compact rollup "+id, err)
	}
	return wrote, nil
}

// normalizedRow is the row as a document holds it: counts without zeros,
// the samples kept.
func (r Rollup) normalizedRow() Rollup {
	streams := r.Streams
	r = r.normalized()
	r.Streams, r.Hour = streams, ""
	return r
}

// replaceRow makes the day rollup's row of hour hold the counts of want
// (shard 0; the row's other parts are deleted from the other shards),
// keeping the streams' samples, unless it holds them already. rsnaps are
// the day's shard documents as tx read them. It is how a rewrite of an
// hour's counters (RewriteHour, RecountHour) keeps the row equal to them;
// it reports whether it wrote.
func (s *Store) replaceRow(tx *firestore.Transaction, hour string, rsnaps []*firestore.DocumentSnapshot, want Rollup) (bool, error) {
	day, hh := splitHour(hour)
	rows, err := readDay(day, rsnaps)
	if err != nil {
		return false, err
	}
	cur := rows[hh]
	if cur.sameCounts(want) {
		return false, nil
	}
	want.Streams = cur.Streams
	for _, snap := range rsnaps {
		if snap.Ref.ID == "0" {
			continue
		}
		if hours, _ := snap.Data()["hours"].(map[string]any); hours[hh] != nil {
			s.wrote(1)
			if err := tx.Update(snap.Ref, []firestore.Update{{FieldPath: firestore.FieldPath{"hours", hh}, Value: firestore.Delete}}); err != nil {
				return false, err
			}
		}
	}
	s.wrote(1)
	data := map[string]any{"day": day, "hours": map[string]any{hh: want.normalizedRow()}}
	if err := tx.Set(s.dayShards(day).Doc("0"), data, firestore.Merge(firestore.FieldPath{"day"}, firestore.FieldPath{"hours", hh})); err != nil {
		return false, err
	}
	return true, nil
}

// recordSpan writes, in tx, a stream's sampled span of hour into the day
// rollup's row (shard 0: reconcile, one run at a time, is its only writer).
func (s *Store) recordSpan(tx *firestore.Transaction, hour, stream string, sp StreamSpan) error {
	day, hh := splitHour(hour)
	s.wrote(1)
	data := map[string]any{"day": day, "hours": map[string]any{hh: map[string]any{"streams": map[string]any{stream: sp}}}}
	if err := tx.Set(s.dayShards(day).Doc("0"), data, firestore.Merge(firestore.FieldPath{"day"}, firestore.FieldPath{"hours", hh, "streams", stream})); err != nil {
		return fmt.Errorf("rollup %s: %w", hour, err)
	}
	return nil
}
