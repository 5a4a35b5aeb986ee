package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/store"
)

// The messages published per hour are differences of reconcile's samples:
// from the previous sampled hour's last sequence (so an unsampled hour's
// messages count in the next sampled one, and the unsampled hour is -1),
// summed over the streams; a stream first seen in an hour counts from that
// hour's first sample.
func TestHourlyPublished(t *testing.T) {
	ctx, _, s := newStore(t)
	h0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	at := func(i int) time.Time { return h0.Add(time.Duration(i)*time.Hour + 10*time.Minute) }
	for _, sm := range []struct {
		hour        int
		stream      string
		first, last int64
	}{
		{-1, "TASKS", 90, 100},
		{0, "TASKS", 105, 130},
		{2, "TASKS", 150, 170},
		{3, "TASKS", 170, 180},
		{3, "OTHER", 5, 9},
	} {
		in := store.MetricsSample{Stream: sm.stream, FirstAt: at(sm.hour), LastAt: at(sm.hour), FirstLastSeq: sm.first, LastSeq: sm.last}
		if err := s.RecordSample(ctx, at(sm.hour), in); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.HourlyPublished(ctx, h0, 5)
	if err != nil {
		t.Fatal(err)
	}
	// 130-100; none; 170-130; (180-170)+(9-5); none.
	want := []int64{30, -1, 40, 14, -1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("HourlyPublished(%s, 5) (-want +got):\n%s", store.Hour(h0), diff)
	}
	// The day rollups keep the same samples, and count by the same rule.
	rows, err := s.HourlyRollups(ctx, h0, 5)
	if err != nil {
		t.Fatal(err)
	}
	var published []int64
	for _, r := range rows {
		published = append(published, r.Published)
	}
	if diff := cmp.Diff(want, published); diff != "" {
		t.Errorf("HourlyRollups(%s, 5) published (-want +got):\n%s", store.Hour(h0), diff)
	}

	for i, total := range []int64{2, 0, 5} {
		for k := range total {
			if err := s.AddMetrics(ctx, at(i), fmt.Sprint("e", i, k), store.Metrics{Total: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ms, err := s.HourlyMetrics(ctx, h0, 3)
	if err != nil {
		t.Fatal(err)
	}
	var totals []int64
	var hours []string
	for _, m := range ms {
		totals, hours = append(totals, m.Total), append(hours, m.Hour)
	}
	if !cmp.Equal(totals, []int64{2, 0, 5}) || !cmp.Equal(hours, []string{"2026-11-21T10", "2026-11-21T11", "2026-11-21T12"}) {
		t.Errorf("HourlyMetrics totals %v hours %v, want [2 0 5] from 2026-11-21T10", totals, hours)
	}
}

// The DLQ rate counts only the hours whose published count is known: an
// hour without a sample adds neither its deaths nor its tasks (dlqctl stats
// counted its deaths against the other hours' tasks).
func TestDeadRate(t *testing.T) {
	tests := []struct {
		name  string
		hours [][2]int64 // dead, published (-1: no sample)
		want  store.DeadRate
		rate  float64
	}{
		{"none", nil, store.DeadRate{}, -1},
		{"sampled hours", [][2]int64{{3, 400}, {1, 100}}, store.DeadRate{Sampled: 2, Dead: 4, Published: 500}, 4.0 / 500},
		{"an hour without a sample", [][2]int64{{3, 400}, {50, -1}}, store.DeadRate{Sampled: 1, Dead: 3, Published: 400}, 3.0 / 400},
		{"nothing published", [][2]int64{{2, 0}, {5, -1}}, store.DeadRate{Sampled: 1, Dead: 2}, -1},
	}
	for _, tt := range tests {
		var got store.DeadRate
		for _, h := range tt.hours {
			got.Add(h[0], h[1])
		}
		if got != tt.want || got.Rate() != tt.rate {
			t.Errorf("%s: DeadRate after %v = %+v (rate %v), want %+v (rate %v)", tt.name, tt.hours, got, got.Rate(), tt.want, tt.rate)
		}
	}
}

// Every rate follows one rule: n / d, -1 (unknown) when there is nothing to
// divide by, so a dashboard never shows 0 % for "no data".
func TestRatesShareOneRule(t *testing.T) {
	tests := []struct {
		n, d int64
		want float64
	}{
		{1, 4, 0.25},
		{0, 5, 0},
		{3, 3, 1},
		{3, 0, -1},
		{2, -1, -1},
	}
	for _, tt := range tests {
		if got := (store.DeadRate{Dead: tt.n, Published: tt.d}).Rate(); got != tt.want {
			t.Errorf("DeadRate{Dead: %d, Published: %d}.Rate() = %v, want %v", tt.n, tt.d, got, tt.want)
		}
		if got := (store.Recovery{Recovered: tt.n, Settled: tt.d}).Rate(); got != tt.want {
			t.Errorf("Recovery{Recovered: %d, Settled: %d}.Rate() = %v, want %v", tt.n, tt.d, got, tt.want)
		}
	}
}
