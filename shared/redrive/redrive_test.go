package redrive

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/authority"
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

// stepAuthority is the operator's authority rule over the default policy,
// without a store.
var stepAuthority = operator.New(nil, nil, operator.WithPolicy(func(context.Context) (*triage.Policy, error) { return triage.Default(), nil }, 0))

// StepFor asks the operator's authority rule: entries whose rule keeps
// approval for approvers are excluded without the opt-in, and left alone
// (denied) when the actor's role may not act on them anyway.
func TestStepFor(t *testing.T) {
	ops := authority.Actor{Name: "ops@example.com", Role: authority.Operator}
	boss := authority.Actor{Name: "boss@example.com", Role: authority.Approver}
	viewer := authority.Actor{Name: "v@example.com", Role: authority.Viewer}
	in := []string{OptInApproverRules}
	for _, tc := range []struct {
		by       authority.Actor
		status   store.Status
		rule     string
		category triage.Category
		include  []string
		want     Step
	}{
		{ops, store.Escalated, "permanent", triage.Permanent, nil, Step{Action: Approve}},
		{ops, store.AwaitingApproval, "predicted-failure", triage.ConditionallyRecoverable, nil, Step{Action: Approve}},
		{ops, store.Quarantined, "second-context-overflow", triage.ConditionallyRecoverable, nil, Step{Action: Approve}},
		{ops, store.Scheduled, "transient", triage.Transient, nil, Step{Action: RunNow}},
		{ops, store.Held, "transient", triage.Transient, in, Step{Leave: LeaveHeld}},
		{boss, store.Held, "poison", triage.Poison, in, Step{Leave: LeaveHeld}},
		// Kept for approvers: excluded without the opt-in, whoever asks.
		{ops, store.AwaitingApproval, "governance", triage.Governance, nil, Step{Leave: LeaveExcluded}},
		{boss, store.AwaitingApproval, "governance", triage.Governance, nil, Step{Leave: LeaveExcluded}},
		{boss, store.Escalated, "poison-chain", triage.Poison, nil, Step{Leave: LeaveExcluded}},
		{boss, store.Scheduled, "commit-state", triage.UnknownCommitState, nil, Step{Leave: LeaveExcluded}},
		{ops, store.Quarantined, "", triage.Poison, nil, Step{Leave: LeaveExcluded}},
		// Opted in: an approver approves them; an operator may only run
		// the scheduled ones now.
		{boss, store.AwaitingApproval, "governance", triage.Governance, in, Step{Action: Approve}},
		{boss, store.AwaitingApproval, "uncertain-side-effects", triage.UnknownCommitState, in, Step{Action: Approve}},
		{ops, store.AwaitingApproval, "governance", triage.Governance, in, Step{Leave: LeaveDenied}},
		{ops, store.Quarantined, "poison", triage.Poison, in, Step{Leave: LeaveDenied}},
		{ops, store.Scheduled, "governance", triage.Governance, in, Step{Action: RunNow}},
		// A redrive saved with the categories it opted into keeps exactly
		// those.
		{boss, store.Quarantined, "poison", triage.Poison, []string{string(triage.Governance)}, Step{Leave: LeaveExcluded}},
		{boss, store.Quarantined, "poison", triage.Poison, []string{string(triage.Poison)}, Step{Action: Approve}},
		// Held entries are released only by a breaker close's own run
		// (OptInReleaseHeld), and then as any run now: by the same rule.
		{ops, store.Held, "transient", triage.Transient, []string{OptInReleaseHeld}, Step{Action: RunNow}},
		{ops, store.Held, "governance", triage.Governance, []string{OptInReleaseHeld}, Step{Leave: LeaveExcluded}},
		{ops, store.Held, "governance", triage.Governance, []string{OptInReleaseHeld, OptInApproverRules}, Step{Action: RunNow}},
		{viewer, store.Held, "transient", triage.Transient, []string{OptInReleaseHeld}, Step{Leave: LeaveDenied}},
		{ops, store.Scheduled, "transient", triage.Transient, []string{OptInReleaseHeld}, Step{Action: RunNow}},
		// A viewer acts on nothing.
		{viewer, store.Escalated, "permanent", triage.Permanent, nil, Step{Leave: LeaveDenied}},
		{viewer, store.Scheduled, "transient", triage.Transient, in, Step{Leave: LeaveDenied}},
		{ops, store.Replaying, "transient", triage.Transient, nil, Step{Leave: LeaveNothing}},
		{ops, store.Replayed, "transient", triage.Transient, nil, Step{Leave: LeaveNothing}},
		{ops, store.Recovered, "transient", triage.Transient, nil, Step{Leave: LeaveNothing}},
		{boss, store.Discarded, "poison", triage.Poison, in, Step{Leave: LeaveNothing}},
	} {
		e := &store.Entry{Status: tc.status, Rule: tc.rule, Category: string(tc.category)}
		got, err := StepFor(context.Background(), stepAuthority, tc.by, e, tc.include)
		if err != nil || got != tc.want {
			t.Errorf("StepFor(%s, %s %s/%s, include %v) = %+v, %v, want %+v", tc.by, tc.status, tc.rule, tc.category, tc.include, got, err, tc.want)
		}
	}
	// Without the policy, nothing is decided.
	blind := operator.New(nil, nil, operator.WithPolicy(func(context.Context) (*triage.Policy, error) { return nil, errors.New("firestore unavailable") }, 0))
	e := &store.Entry{Status: store.Escalated, Rule: "permanent", Category: string(triage.Permanent)}
	if got, err := StepFor(context.Background(), blind, ops, e, nil); err == nil || errors.Is(err, authority.ErrPermissionDenied) {
		t.Errorf("StepFor without a readable policy = %+v, %v, want the read error", got, err)
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
		// The policy changed between listing and acting: left as it is,
		// and said.
		{Approve, fmt.Errorf("approve: %w", &authority.Denied{Action: authority.Approve, Rule: "governance"}), true},
	} {
		if got := Tally(&p, tc.action, tc.err); got != tc.failed {
			t.Errorf("Tally(%s, %v) = %v, want %v", tc.action, tc.err, got, tc.failed)
		}
	}
	want := store.RedriveProgress{Approved: 2, RunNow: 3, Skipped: 3, Failed: 1}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
	if got, want := Summary(&p), "2 approved, 3 run now, 3 skipped, 1 failed, 0 left alone"; got != want {
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
