package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"cloud.google.com/go/firestore"
)

// Recount is a full recount of the hourly metrics of [From, To) (whole
// hours) from the entries created in it: the slow, explicit check of what
// Record and the status moves keep up to date in their transactions. Feed
// it every entry created in the window (Add), then compare each hour with
// the stored one (Agrees) and rewrite those that disagree (Fix, RewriteHour).
type Recount struct {
	From, To time.Time
	// Hours are the recounted hours by id; an hour without entries is
	// absent (its recount is zero).
	Hours map[string]*Metrics
}

// NewRecount starts a recount of the whole hours covering [from, to).
func NewRecount(from, to time.Time) *Recount {
	from = from.UTC().Truncate(time.Hour)
	if t := to.UTC().Truncate(time.Hour); !t.Equal(to.UTC()) {
		to = t.Add(time.Hour)
	}
	return &Recount{From: from, To: to.UTC(), Hours: map[string]*Metrics{}}
}

func (r *Recount) hour(h string) *Metrics {
	m := r.Hours[h]
	if m == nil {
		m = &Metrics{Hour: h}
		r.Hours[h] = m
	}
	return m
}

// Add counts one entry: in the hour of its creation as classify counted
// it (its initial status, so later moves do not move it between the
// creation counters) and as it stands now (the tenant-hour counters); its
// replays published and recovered in the hours they happened, from its
// history. Entries created outside the window are not counted.
func (r *Recount) Add(e *Entry) {
	if e.CreatedAt.Before(r.From) || !e.CreatedAt.Before(r.To) {
		return
	}
	m := r.hour(Hour(e.CreatedAt))
	c := *e
	c.Status = e.initialStatus()
	AddEntryMetrics(m, &c)
	AddTenantPart(m, e)
	for _, t := range e.History {
		if t.From == "" || t.From == t.To || t.At.Before(r.From) || !t.At.Before(r.To) {
			continue
		}
		switch Status(t.To) {
		case Replayed:
			r.hour(Hour(t.At)).ReplaysPublished++
		case Recovered:
			r.hour(Hour(t.At)).ReplaysRecovered++
		}
	}
}

// HourIDs are the hours of the window, oldest first.
func (r *Recount) HourIDs() []string {
	var out []string
	for h := r.From; h.Before(r.To); h = h.Add(time.Hour) {
		out = append(out, Hour(h))
	}
	return out
}

// Of is the recount of one hour (zero when it has no entries).
func (r *Recount) Of(hour string) Metrics {
	if m := r.Hours[hour]; m != nil {
		return *m
	}
	return Metrics{Hour: hour}
}

// initialStatus is the status the entry was created in (the first history
// transition), or its current one when the history no longer shows it.
func (e *Entry) initialStatus() Status {
	if len(e.History) > 0 && e.History[0].From == "" {
		return Status(e.History[0].To)
	}
	return e.Status
}

// Agrees reports whether the stored metrics m agree with recount, the
// entries' full recount of the same hour: the counters of facts an entry
// never changes after its creation (total, by tenant, by kind, by agent,
// stream sequences) and the tenant-hour counters are equal; the replays
// published and recovered are at least what the histories show (an entry
// created before the window may have replayed in it, and histories keep
// only their last transitions). Category, reason, action and status at
// creation are not compared: a re-evaluation changes them on the entry,
// while the hour keeps what classify counted.
func (m Metrics) Agrees(recount Metrics) bool {
	a, b := m.normalized(), recount.normalized()
	if a.Total != b.Total || a.ReplaysPublished < b.ReplaysPublished || a.ReplaysRecovered < b.ReplaysRecovered {
		return false
	}
	for _, p := range [][2]map[string]int64{{a.ByTenant, b.ByTenant}, {a.ByKind, b.ByKind}, {a.ByAgent, b.ByAgent}, {a.StreamSeqMax, b.StreamSeqMax}} {
		if !maps.Equal(p[0], p[1]) {
			return false
		}
	}
	if len(a.Tenants) != len(b.Tenants) {
		return false
	}
	for k, t := range a.Tenants {
		o, ok := b.Tenants[k]
		if !ok || !sameTenantHour(t, o) {
			return false
		}
	}
	return true
}

// sameTenantHour reports whether the stored tenant-hour agrees with its
// recount. The last failure may be later than the recount's: a maximum no
// write can lower, it keeps the time of an entry that moved to the tenant
// its explicit record named.
func sameTenantHour(stored, recount TenantHour) bool {
	return maps.Equal(stored.Slots, recount.Slots) && maps.Equal(stored.PoisonSlots, recount.PoisonSlots) &&
		maps.Equal(stored.Statuses, recount.Statuses) && stored.QuarantinedPoison == recount.QuarantinedPoison &&
		stored.Duplicates == recount.Duplicates && stored.LastFailureMs >= recount.LastFailureMs
}

// Fixed is what the hour should hold after a repair, given the stored
// metrics cur and the recount: the recount, with the replays published and
// recovered never lowered (see Agrees).
func (m Metrics) Fixed(cur Metrics) Metrics {
	fixed := m.normalized()
	fixed.ReplaysPublished = max(cur.ReplaysPublished, m.ReplaysPublished)
	fixed.ReplaysRecovered = max(cur.ReplaysRecovered, m.ReplaysRecovered)
	// Not recounted (Metrics.Deaths, Metrics.Outcomes): kept as they are.
	fixed.Deaths = cur.Deaths
	fixed.Outcomes = cur.Outcomes
	return fixed
}

// normalized drops zero counters and empty tenants, so equal counts compare
// equal however they were reached (increments leave zero fields behind).
func (m Metrics) normalized() Metrics {
	_, bds := m.counters()
	for _, b := range bds {
		c := maps.Clone(*b.m)
		maps.DeleteFunc(c, func(_ string, v int64) bool { return v == 0 })
		if len(c) == 0 {
			c = nil
		}
		*b.m = c
	}
	if len(m.StreamSeqMax) == 0 {
		m.StreamSeqMax = nil
	}
	tenants := map[string]TenantHour{}
	for _, k := range slices.Sorted(maps.Keys(m.Tenants)) {
		// A tenant none of whose entries is counted in the hour any
		// more (an entry moved to the tenant its record named) keeps
		// only its last failure, a maximum no move can lower: it is not
		// one of the hour's tenants.
		t := m.Tenants[k].Normalized()
		if len(t.Slots) == 0 {
			t.LastFailureMs = 0
		}
		if !t.isZero() {
			tenants[k] = t
		}
	}
	m.Tenants = nil
	if len(tenants) > 0 {
		m.Tenants = tenants
	}
	return m
}

// HourRecount is what RecountHour found and did.
type HourRecount struct {
	Hour string
	// Entries is how many entries were created in the hour.
	Entries int64
	// Stored is the hour's metrics as they were, Recount the entries'
	// recount of it.
	Stored, Recount Metrics
	// Rollup is the hour's row of its day rollup as it was.
	Rollup Rollup
	// Agreed: Stored.Agrees(Recount), and Rollup counts what Stored does
	// (Metrics.rollup); nothing to do.
	Agreed bool
	// Rewritten: the hour now holds Recount.Fixed(Stored) (when it
	// disagreed), and its row what the hour holds.
	Rewritten bool
}

// RecountHour recounts one hour from the entries created in it, pageSize
// entries per query, and, unless dry, rewrites the hour's metrics when
// they disagree (Metrics.Agrees): shard 0 gets the recount, the other
// shards are deleted; and the hour's row of its day rollup when it does not
// count what the hour (rewritten or not) holds. The entries and the shards
// are read in the rewrite's own transaction, so a status move that commits
// meanwhile either comes before the recount or makes the transaction retry:
// the rewrite never undoes a move. It costs one read per entry of the hour
// and per shard (of the hour and of its day rollup).
func (s *Store) RecountHour(ctx context.Context, hour time.Time, pageSize int, dry bool) (HourRecount, error) {
	hour = hour.UTC().Truncate(time.Hour)
	id := Hour(hour)
	pageSize = max(1, pageSize)
	var out HourRecount
	body := func(ctx context.Context, docs func(firestore.Query) *firestore.DocumentIterator, tx *firestore.Transaction) error {
		out = HourRecount{Hour: id}
		rc := NewRecount(hour, hour.Add(time.Hour))
		q := s.fs.Collection(FailureLog).Where("created_at", ">=", hour).Where("created_at", "<", hour.Add(time.Hour)).
			OrderBy("created_at", firestore.Asc).OrderBy(firestore.DocumentID, firestore.Asc).Select(viewFields[ScanView]...)
		var last *firestore.DocumentSnapshot
		for {
			page := q.Limit(pageSize)
			if last != nil {
				page = page.StartAfter(last)
			}
			snaps, err := readAll(s, docs(page))
			if err != nil {
				return fmt.Errorf("query %s created in %s: %w", FailureLog, id, err)
			}
			for _, snap := range snaps {
				e, err := decodeEntry(snap)
				if err != nil {
					return err
				}
				rc.Add(e)
				out.Entries++
			}
			if len(snaps) < pageSize {
				break
			}
			last = snaps[len(snaps)-1]
		}
		snaps, err := readAll(s, docs(s.hourShards(id).Query))
		if err != nil {
			return fmt.Errorf("read metrics %s: %w", id, err)
		}
		day, hh := splitHour(id)
		rsnaps, err := readAll(s, docs(s.dayShards(day).Query))
		if err != nil {
			return fmt.Errorf("read rollup %s: %w", day, err)
		}
		if out.Stored, err = sumShards(id, snaps); err != nil {
			return err
		}
		rows, err := readDay(day, rsnaps)
		if err != nil {
			return err
		}
		out.Rollup, out.Recount = rows[hh], rc.Of(id)
		out.Rollup.Hour = id
		// The row follows the hour: what the hour holds now, or what a
		// rewrite makes it hold.
		hourAgrees, want := out.Stored.Agrees(out.Recount), out.Stored
		if !hourAgrees {
			want = out.Recount.Fixed(out.Stored)
		}
		rowAgrees := out.Rollup.sameCounts(want.rollup())
		out.Agreed = hourAgrees && rowAgrees
		if out.Agreed || tx == nil {
			return nil
		}
		out.Rewritten = true
		if !rowAgrees {
			if _, err := s.replaceRow(tx, id, rsnaps, want.rollup()); err != nil {
				return err
			}
		}
		if hourAgrees {
			return nil
		}
		return s.replaceShards(tx, id, snaps, want)
	}
	var err error
	if dry {
		err = body(ctx, func(q firestore.Query) *firestore.DocumentIterator { return q.Documents(ctx) }, nil)
	} else {
		err = s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
			return body(ctx, func(q firestore.Query) *firestore.DocumentIterator { return tx.Documents(q) }, tx)
		})
	}
	if err != nil {
		return HourRecount{}, txError("recount "+id, err)
	}
	return out, nil
}
