package store

import (
	"errors"
	"testing"

	"github.com/jsdlq/jsdlq/internal/testenv"
)

// A transition's count is written in its own transaction: made once with
// the transition, never by a repeat the status check refuses, so a crash
// between "published" and "counted" cannot exist.
func TestTransitionCountsWithItsTransaction(t *testing.T) {
	s, c := newStore(t)
	ctx := testenv.Context(t)
	e := entry("TASKS.count", nil)
	if _, err := s.Record(ctx, e, "classify"); err != nil {
		t.Fatal(err)
	}
	hour := Hour(c.Now())
	before, err := s.ReadMetrics(ctx, hour)
	if err != nil {
		t.Fatal(err)
	}
	replayed := Change{From: []Status{Scheduled}, To: Replayed, By: "replay", Count: &Metrics{ReplaysPublished: 1}}
	if _, err := s.Transition(ctx, e.ID, replayed); err != nil {
		t.Fatalf("Transition(replayed) = %v", err)
	}
	// A retried request repeats the transition: refused, not counted.
	if _, err := s.Transition(ctx, e.ID, replayed); !errors.Is(err, ErrWrongStatus) {
		t.Fatalf("Transition(replayed) again = %v, want ErrWrongStatus", err)
	}
	for range 2 {
		if _, err := s.MarkRecovered(ctx, e.ID, []Status{Replayed}, "reconcile", "completed"); err != nil {
			t.Fatalf("MarkRecovered() = %v", err)
		}
	}
	after, err := s.ReadMetrics(ctx, hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.ReplaysPublished - before.ReplaysPublished; got != 1 {
		t.Errorf("replays_published grew by %d, want 1", got)
	}
	if got := after.ReplaysRecovered - before.ReplaysRecovered; got != 1 {
		t.Errorf("replays_recovered grew by %d, want 1", got)
	}
}
