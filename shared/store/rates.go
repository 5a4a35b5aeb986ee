package store

import (
	"context"
	"sync"
	"time"
)

// This file holds the hourly series dlqctl's stats read: hours of metrics
// and of work-stream traffic read concurrently (one query per hour, so a
// week is 168 queries that must not run one after the other), and the
// rates over them. A dashboard reads the day rollups instead (rollup.go).

// hourReaders bounds the concurrent queries of one series.
const hourReaders = 16

// forHours runs read for the n hours from first (UTC, truncated to the
// hour), at most hourReaders at a time, and returns the first error.
func forHours(ctx context.Context, first time.Time, n int, read func(ctx context.Context, i int, h time.Time) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first = first.UTC().Truncate(time.Hour)
	sem := make(chan struct{}, hourReaders)
	var (
		wg   sync.WaitGroup
		once sync.Once
		ferr error
	)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := read(ctx, i, first.Add(time.Duration(i)*time.Hour)); err != nil {
				once.Do(func() { ferr = err; cancel() })
			}
		})
	}
	wg.Wait()
	return ferr
}

// HourlyMetrics reads the metrics of the n hours from first, oldest first;
// each has its Hour set.
func (s *Store) HourlyMetrics(ctx context.Context, first time.Time, n int) ([]Metrics, error) {
	out := make([]Metrics, n)
	err := forHours(ctx, first, n, func(ctx context.Context, i int, h time.Time) error {
		m, err := s.ReadMetrics(ctx, Hour(h))
		m.Hour = Hour(h)
		out[i] = m
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// HourlyPublished returns, for the n hours from first (oldest first), how
// many messages were appended to the work streams, from reconcile's samples
// (dlq-metrics/{hour}/streams), by publishedSeries' rule: an hour without
// any sample is -1. This is the DLQ rate's denominator; it includes the
// replays jsdlq published. It reads one query per hour; a dashboard reads
// the same counts from the day rollups (HourlyRollups).
func (s *Store) HourlyPublished(ctx context.Context, first time.Time, n int) ([]int64, error) {
	// One hour more: the hour before gives the first row's start.
	spans := make([]map[string]StreamSpan, n+1)
	err := forHours(ctx, first.Add(-time.Hour), n+1, func(ctx context.Context, i int, h time.Time) error {
		ss, err := s.ReadSamples(ctx, h, h)
		if len(ss) > 0 {
			spans[i] = map[string]StreamSpan{}
			for stream, samples := range ss {
				last := samples[len(samples)-1]
				spans[i][stream] = StreamSpan{First: last.FirstLastSeq, Last: last.LastSeq}
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return publishedSeries(spans), nil
}

// DeadRate is the DLQ rate: the tasks that died (failure-log entries
// created) against the tasks published to the work streams over the same
// time. Hour by hour (Add), only the hours whose published count is known
// count: an hour without a work-stream sample (HourlyPublished's -1) counts
// neither its deaths nor its tasks, so the rate compares like with like.
// Reconcile's traffic window sets Dead and Published directly.
type DeadRate struct {
	Sampled   int   // hours counted by Add
	Dead      int64 // entries created in them
	Published int64
}

// Add counts one hour's dead entries and published tasks (-1: unknown,
// the hour is left out).
func (r *DeadRate) Add(dead, published int64) {
	if published < 0 {
		return
	}
	r.Sampled++
	r.Dead += dead
	r.Published += published
}

// Rate is Dead / Published (the DLQ rate), -1 when nothing was published.
func (r DeadRate) Rate() float64 { return ratio(r.Dead, r.Published) }

// ratio is the rule of every rate here: n / d, and -1 ("unknown", shown
// as such, never as 0 %) when there is nothing to divide by.
func ratio(n, d int64) float64 {
	if d <= 0 {
		return -1
	}
	return float64(n) / float64(d)
}

// SettledStatuses are the statuses in which nothing more happens to an
// entry by itself (Status.Settled).
var SettledStatuses = StatusesWhere(Status.Settled)

// Recovery counts the entries created in a window by how they settled.
type Recovery struct {
	Recovered int64 `json:"recovered"`
	Settled   int64 `json:"settled"`
}

// Rate is Recovered / Settled, -1 when nothing settled.
func (r Recovery) Rate() float64 { return ratio(r.Recovered, r.Settled) }
