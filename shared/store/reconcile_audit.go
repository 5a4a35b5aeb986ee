package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"cloud.google.com/go/firestore"
)

// This file holds the reconcile function's own documents in dlq-audits: the
// run lease, the resumable scan state and the reports, plus the metric
// rewrite and the work-stream samples.

// Documents of dlq-audits that are not reports. Report ids never start with
// '_', so listing reports skips these.
const (
	AuditLease = "_lease"
	AuditState = "_state"
)

// ErrLeaseHeld is returned by AcquireLease while another run holds the lease.
var ErrLeaseHeld = errors.New("store: another reconcile run holds the lease")

// Lease is the dlq-audits/_lease document.
type Lease struct {
	Holder     string    `firestore:"holder" json:"holder"`
	AcquiredAt time.Time `firestore:"acquired_at" json:"acquired_at"`
	Until      time.Time `firestore:"until" json:"until"`
}

func (s *Store) auditRef(id string) *firestore.DocumentRef { return s.fs.Collection(Audits).Doc(id) }

// AcquireLease takes the run lease for holder until now+ttl, in a
// transaction: an unexpired lease of another holder makes it fail with
// ErrLeaseHeld and returns that lease.
func (s *Store) AcquireLease(ctx context.Context, holder string, ttl time.Duration) (Lease, error) {
	var out Lease
	err := s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		snap, err := tx.Get(s.auditRef(AuditLease))
		s.read(1)
		if err != nil && !reconcileNotFound(err) {
			return err
		}
		now := s.Now()
		if err == nil {
			var cur Lease
			if err := snap.DataTo(&cur); err != nil {
				return fmt.Errorf("decode %s/%s: %w", Audits, AuditLease, err)
			}
			if cur.Holder != holder && cur.Until.After(now) {
				out = cur
				return ErrLeaseHeld
			}
		}
		out = Lease{Holder: holder, AcquiredAt: now, Until: now.Add(ttl)}
		s.wrote(1)
		return tx.Set(s.auditRef(AuditLease), out)
	})
	if errors.Is(err, ErrLeaseHeld) {
		return out, fmt.Errorf("%w: %s until %s", ErrLeaseHeld, out.Holder, out.Until.Format(time.RFC3339))
	}
	if err != nil {
		return Lease{}, txError("acquire lease", err)
	}
	return out, nil
}

// ReleaseLease ends holder's lease (another holder's is left alone).
func (s *Store) ReleaseLease(ctx context.Context, holder string) error {
	err := s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		snap, err := tx.Get(s.auditRef(AuditLease))
		s.read(1)
		if reconcileNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		var cur Lease
		if err := snap.DataTo(&cur); err != nil || cur.Holder != holder {
			return err
		}
		s.wrote(1)
		return tx.Delete(s.auditRef(AuditLease))
	})
	if err != nil {
		return txError("release lease", err)
	}
	return nil
}

// ReadAuditState decodes dlq-audits/_state into v; found is false (and v
// untouched) when there is none.
func (s *Store) ReadAuditState(ctx context.Context, v any) (found bool, err error) {
	snap, err := s.auditRef(AuditState).Get(ctx)
	s.read(1)
	if reconcileNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("firestore get %s/%s: %w", Audits, AuditState, err)
	}
	if err := snap.DataTo(v); err != nil {
		return false, fmt.Errorf("decode %s/%s: %w", Audits, AuditState, err)
	}
	return true, nil
}

// WriteAuditState replaces dlq-audits/_state with v, but only while holder
// still holds the lease: a run that lost its lease (it overran) must not
// overwrite the cursors of the run that took over.
func (s *Store) WriteAuditState(ctx context.Context, holder string, v any) error {
	err := s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		snap, err := tx.Get(s.auditRef(AuditLease))
		s.read(1)
		if err != nil && !reconcileNotFound(err) {
			return err
		}
		var cur Lease
		if err == nil {
			if err := snap.DataTo(&cur); err != nil {
				return err
			}
		}
		if cur.Holder != holder {
			return fmt.Errorf("%w: %s holds it now", ErrLeaseHeld, cur.Holder)
		}
		s.wrote(1)
		return tx.Set(s.auditRef(AuditState), v)
	})
	if errors.Is(err, ErrLeaseHeld) {
		return err
	}
	if err != nil {
		return txError("write audit state", err)
	}
	return nil
}

// SaveAudit stores a report as dlq-audits/{runID}.
func (s *Store) SaveAudit(ctx context.Context, runID string, report any) error {
	_, err := s.auditRef(runID).Set(ctx, report)
	s.wrote(1)
	if err != nil {
		return fmt.Errorf("firestore set %s/%s: %w", Audits, runID, err)
	}
	return nil
}

// RewriteHour replaces the counters of an hour, in a transaction over every
// shard: fix sees the current sum and returns the counters the hour should
// hold, or false to leave it (it agrees now, or another run rewrote it).
// Shard 0 gets the returned counters and the other shards are deleted, so the
// sum ReadMetrics returns equals them.
func (s *Store) RewriteHour(ctx context.Context, hour string, fix func(cur Metrics) (Metrics, bool)) (rewritten bool, err error) {
	shards := s.fs.Collection(MetricsColl).Doc(hour).Collection(MetricsShards)
	err = s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		rewritten = false
		snaps, err := tx.Documents(shards).GetAll()
		s.read(max(1, len(snaps)))
		if err != nil {
			return err
		}
		cur := Metrics{Hour: hour}
		for _, snap := range snaps {
			var m Metrics
			if err := snap.DataTo(&m); err != nil {
				return fmt.Errorf("decode metrics %s shard %s: %w", hour, snap.Ref.ID, err)
			}
			sumMetricsInto(&cur, m)
		}
		want, ok := fix(cur)
		if !ok {
			return nil
		}
		want.Hour = hour
		for _, snap := range snaps {
			if snap.Ref.ID != "0" {
				if err := tx.Delete(snap.Ref); err != nil {
					return err
				}
			}
		}
		s.wrote(len(snaps) + 1)
		rewritten = true
		return tx.Set(shards.Doc(strconv.Itoa(0)), want)
	})
	if err != nil {
		return false, txError("rewrite metrics "+hour, err)
	}
	return rewritten, nil
}

// AddEntryMetrics adds e's contribution (EntryMetrics) to the sum m, as
// the metrics documents store it: empty keys become "(none)".
func AddEntryMetrics(m *Metrics, e *Entry) {
	d := EntryMetrics(e)
	for _, mm := range []map[string]int64{d.ByKind, d.ByCategory, d.ByReason, d.ByAgent, d.ByTenant, d.ByAction, d.ByStatus} {
		if v, ok := mm[""]; ok {
			delete(mm, "")
			mm["(none)"] += v
		}
	}
	sumMetricsInto(m, d)
}

// MetricsSample is what reconcile samples of one work stream into
// dlq-metrics/{hour}/streams/{stream}: the stream's last sequence and its
// consumers' ack floors at the first and the latest sample of the hour, so
// messages published and acknowledged per hour are differences of samples.
type MetricsSample struct {
	Stream         string                    `firestore:"stream" json:"stream"`
	FirstAt        time.Time                 `firestore:"first_at" json:"first_at"`
	FirstLastSeq   int64                     `firestore:"first_last_seq" json:"first_last_seq"`
	LastAt         time.Time                 `firestore:"last_at" json:"last_at"`
	LastSeq        int64                     `firestore:"last_seq" json:"last_seq"`
	Messages       int64                     `firestore:"messages" json:"messages"`
	FirstAckFloors map[string]int64          `firestore:"first_ack_floors" json:"first_ack_floors"`
	Consumers      map[string]ConsumerSample `firestore:"consumers" json:"consumers"`
}

// ConsumerSample is one consumer's state at a sample.
type ConsumerSample struct {
	AckFloor       int64 `firestore:"ack_floor" json:"ack_floor"`
	Delivered      int64 `firestore:"delivered" json:"delivered"`
	NumPending     int64 `firestore:"num_pending" json:"num_pending"`
	NumAckPending  int   `firestore:"num_ack_pending" json:"num_ack_pending"`
	NumRedelivered int   `firestore:"num_redelivered" json:"num_redelivered"`
}

// StreamSamples is the subcollection of an hour holding MetricsSample.
const StreamSamples = "streams"

// Firestore has no unsigned integers: sequences are stored as int64.

// RecordSample merges a sample into its hour's document: the first sample
// of the hour is kept as the hour's start, the latest (by sequence) as its
// end. Samples are taken by one run at a time (the lease) but a transaction
// keeps a late, overrun writer from moving the end backwards.
func (s *Store) RecordSample(ctx context.Context, at time.Time, in MetricsSample) error {
	hour := Hour(at)
	id, err := EntryID(in.Stream)
	if err != nil {
		return err
	}
	ref := s.fs.Collection(MetricsColl).Doc(hour).Collection(StreamSamples).Doc(id)
	err = s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		snap, err := tx.Get(ref)
		s.read(1)
		if err != nil && !reconcileNotFound(err) {
			return err
		}
		cur := in
		if err == nil {
			// Decode into a fresh value: DataTo fills maps in place, and
			// cur's maps are still in's.
			cur = MetricsSample{}
			if err := snap.DataTo(&cur); err != nil {
				return fmt.Errorf("decode %s: %w", ref.Path, err)
			}
			if in.LastSeq < cur.LastSeq {
				return nil
			}
			cur.LastAt, cur.LastSeq, cur.Messages, cur.Consumers = in.LastAt, in.LastSeq, in.Messages, in.Consumers
			for name, c := range in.Consumers {
				if _, ok := cur.FirstAckFloors[name]; !ok {
					if cur.FirstAckFloors == nil {
						cur.FirstAckFloors = map[string]int64{}
					}
					cur.FirstAckFloors[name] = c.AckFloor
				}
			}
		}
		s.wrote(1)
		return tx.Set(ref, cur)
	})
	if err != nil {
		return txError("record sample "+hour+"/"+in.Stream, err)
	}
	return nil
}

// ReadSamples returns the samples of the hours [from, to] (UTC), oldest hour
// first, per stream.
func (s *Store) ReadSamples(ctx context.Context, from, to time.Time) (map[string][]MetricsSample, error) {
	out := map[string][]MetricsSample{}
	for h := from.UTC().Truncate(time.Hour); !h.After(to); h = h.Add(time.Hour) {
		snaps, err := s.fs.Collection(MetricsColl).Doc(Hour(h)).Collection(StreamSamples).Documents(ctx).GetAll()
		s.read(max(1, len(snaps)))
		if err != nil {
			return nil, fmt.Errorf("firestore read samples %s: %w", Hour(h), err)
		}
		for _, snap := range snaps {
			var m MetricsSample
			if err := snap.DataTo(&m); err != nil {
				return nil, fmt.Errorf("decode %s: %w", snap.Ref.Path, err)
			}
			out[m.Stream] = append(out[m.Stream], m)
		}
	}
	return out, nil
}
