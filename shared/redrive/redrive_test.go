package redrive

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
	}{
		{"5", 5}, {"5/s", 5}, {" 2.5/s ", 2.5}, {"300/m", 5}, {"30/min", 0.5}, {"1000/s", 1000}, {"1/m", 1.0 / 60},
	} {
		if got, err := ParseRate(tc.in); err != nil || got != tc.want {
			t.Errorf("ParseRate(%q) = %g, %v, want %g", tc.in, got, err, tc.want)
		}
	}
	// Below one an hour: 1e-10/s used to overflow the bucket's interval
	// into no wait at all.
	for _, bad := range []string{"", "0", "-1", "fast", "NaN", "Inf", "+Inf", "5/h", "5/", "/s", "1e999", "1e-10", "0.0000000001", "6e-9/m", "0.0002"} {
		if got, err := ParseRate(bad); !errors.Is(err, ErrBadRate) {
			t.Errorf("ParseRate(%q) = %g, %v, want ErrBadRate", bad, got, err)
		}
	}
}

func TestStepFor(t *testing.T) {
	all := []string{string(triage.Governance), string(triage.Poison), string(triage.UnknownCommitState)}
	for _, tc := range []struct {
		status   store.Status
		category triage.Category
		include  []string
		want     Step
	}{
		{store.Escalated, triage.Permanent, nil, Step{Action: Approve}},
		{store.AwaitingApproval, triage.Transient, nil, Step{Action: Approve}},
		{store.Quarantined, triage.Transient, nil, Step{Action: Approve}},
		{store.Scheduled, triage.Transient, nil, Step{Action: RunNow}},
		{store.Held, triage.Transient, all, Step{Leave: LeaveHeld}},
		{store.Held, triage.Poison, nil, Step{Leave: LeaveHeld}},
		{store.AwaitingApproval, triage.Governance, nil, Step{Leave: LeaveExcluded}},
		{store.Quarantined, triage.Poison, []string{string(triage.Governance)}, Step{Leave: LeaveExcluded}},
		{store.Quarantined, triage.Poison, []string{string(triage.Poison)}, Step{Action: Approve}},
		{store.AwaitingApproval, triage.UnknownCommitState, all, Step{Action: Approve}},
		{store.Replaying, triage.Transient, nil, Step{Leave: LeaveNothing}},
		{store.Replayed, triage.Transient, nil, Step{Leave: LeaveNothing}},
		{store.Recovered, triage.Transient, nil, Step{Leave: LeaveNothing}},
		{store.Discarded, triage.Poison, all, Step{Leave: LeaveNothing}},
	} {
		e := &store.Entry{Status: tc.status, Category: string(tc.category)}
		if got := StepFor(e, tc.include); got != tc.want {
			t.Errorf("StepFor(%s %s, include %v) = %+v, want %+v", tc.status, tc.category, tc.include, got, tc.want)
		}
	}
}

// TestTally: an action that found its entry changed (wrong status, gone) is
// skipped, not failed: a redrive never redoes what someone else did. One
// recorded whose replay task is left to reconcile is done, and reported.
func TestTally(t *testing.T) {
	var p store.RedriveProgress
	pending := fmt.Errorf("%w: task not created: %w", operator.ErrTaskNotCreated, errors.New("cloud tasks unavailable"))
	for _, tc := range []struct {
		action string
		err    error
		failed bool
	}{
		{Approve, pending, true},
		{RunNow, pending, true},
		{Approve, nil, false},
		{RunNow, nil, false},
		{RunNow, nil, false},
		{Approve, fmt.Errorf("approve: %w", store.ErrWrongStatus), false},
		{RunNow, fmt.Errorf("replay now: %w", store.ErrNotFound), false},
		{Approve, errors.New("cloud tasks unavailable"), true},
	} {
		if got := Tally(&p, tc.action, tc.err); got != tc.failed {
			t.Errorf("Tally(%s, %v) = %v, want %v", tc.action, tc.err, got, tc.failed)
		}
	}
	want := store.RedriveProgress{Approved: 2, RunNow: 3, Skipped: 2, Failed: 1}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
	if got, want := Summary(&p), "2 approved, 3 run now, 2 skipped, 1 failed, 0 left alone"; got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
}

// TestActedSince: only a move into scheduled (approve, run now) by the
// redrive's actor after the listed time counts as its action.
func TestActedSince(t *testing.T) {
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	e := &store.Entry{History: []store.Transition{{By: "ops", At: at.Add(-time.Minute), To: "scheduled"}, {By: "replay", At: at.Add(time.Minute), To: "scheduled"},
		{By: "ops", At: at.Add(time.Minute), To: "discarded"}}}
	if ActedSince(e, "ops", at) {
		t.Error("ActedSince: an earlier transition, or a discard, by the actor counted")
	}
	e.History = append(e.History, store.Transition{By: "ops", At: at.Add(2 * time.Minute), To: "scheduled"})
	if !ActedSince(e, "ops", at) {
		t.Error("ActedSince: a later transition by the actor did not count")
	}
}

// A bucket never lets a second action through at once, however slow its
// rate: below about 1e-10/s the interval overflowed time.Duration and the
// bucket stopped waiting (a run stored before ParseRate's bound).
func TestBucketSlowRatesWait(t *testing.T) {
	for _, rate := range []float64{MinRate, 1e-10, 1e-300, math.SmallestNonzeroFloat64, 0, -1, math.NaN()} {
		b := NewBucket(rate)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		first, second := b.Wait(ctx), b.Wait(ctx)
		cancel()
		if first != nil || !errors.Is(second, context.DeadlineExceeded) {
			t.Errorf("NewBucket(%g): Wait, Wait = %v, %v, want nil, then waiting until the deadline", rate, first, second)
		}
	}
}

// TestBucketStopsWithContext: a cancelled context ends a wait at once
// (Ctrl-C, a cancelled console run), with its error.
func TestBucketStopsWithContext(t *testing.T) {
	b := NewBucket(1.0 / 3600) // one action an hour
	ctx, cancel := context.WithCancel(context.Background())
	if err := b.Wait(ctx); err != nil {
		t.Fatalf("first Wait = %v, want nil (the bucket starts full)", err)
	}
	cancel()
	if err := b.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait after cancel = %v, want context.Canceled", err)
	}
}
