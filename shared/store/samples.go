package store

import (
	"context"
	"time"

	"cloud.google.com/go/firestore"
)

// This file holds the work-stream samples reconcile takes each run
// (dlq-metrics/{hour}/streams/{stream}): how many messages the streams
// carried, the denominator of the DLQ rate.

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
// end; both go to the hour's row of its day rollup too (Rollup.Streams). Samples are taken by one run at a time (the lease) but a transaction
// keeps a late, overrun writer from moving the end backwards.
func (s *Store) RecordSample(ctx context.Context, at time.Time, in MetricsSample) error {
	hour := Hour(at)
	id, err := EntryID(in.Stream)
	if err != nil {
		return err
	}
	ref := s.hourRef(hour).Collection(StreamSamples).Doc(id)
	err = s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		// Decode into a fresh value: DataTo fills maps in place, and in's
		// maps are the caller's.
		var cur MetricsSample
		found, err := txReadOptional(s, tx, ref, &cur)
		if err != nil {
			return err
		}
		switch {
		case !found:
			cur = in
		case in.LastSeq < cur.LastSeq:
			return nil
		default:
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
		if err := tx.Set(ref, cur); err != nil {
			return err
		}
		// The hour's row of the day rollup keeps the span, so a
		// dashboard reads the published counts with the rest of the row.
		return s.recordSpan(tx, hour, in.Stream, StreamSpan{First: cur.FirstLastSeq, Last: cur.LastSeq})
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
		samples, err := queryDocs(ctx, s, s.hourRef(Hour(h)).Collection(StreamSamples).Query,
			"samples "+Hour(h), decodeValue[MetricsSample])
		if err != nil {
			return nil, err
		}
		for _, m := range samples {
			out[m.Stream] = append(out[m.Stream], *m)
		}
	}
	return out, nil
}
