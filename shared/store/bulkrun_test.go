package store

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
)

// TestBulkRunLease walks a bulk run through its lease: claimed by one
// instance, not by a second while the lease holds, taken over once it
// expires, after which the first instance's updates are refused and change
// nothing.
func TestBulkRunLease(t *testing.T) {
	s, clock := newStore(t)
	ctx := testenv.Context(t)
	run := &BulkRun{Filter: BulkFilter{Tenant: "acme", Status: Escalated}, Rate: 5, Actor: "ops@example.com", Reason: "fixed",
		Plan: RedrivePlan{Matched: 3, Approve: 3, ByTenant: map[string]int{"acme": 3}}, Total: 3}
	if err := s.CreateBulkRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	if err := CheckBulkRunID(run.ID); err != nil || run.State != BulkPlanned {
		t.Fatalf("CreateBulkRun: id %q (%v), state %s; want a valid id, planned", run.ID, err, run.State)
	}
	got, err := s.GetBulkRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(run, got); diff != "" {
		t.Errorf("GetBulkRun(created) (-want +got):\n%s", diff)
	}

	a, err := s.ClaimBulkRun(ctx, "a", time.Minute)
	if err != nil || a == nil || a.ID != run.ID || a.State != BulkRunning || a.LeaseOwner != "a" {
		t.Fatalf("ClaimBulkRun(a) = %+v, %v; want the run, running, held by a", a, err)
	}
	if b, err := s.ClaimBulkRun(ctx, "b", time.Minute); err != nil || b != nil {
		t.Fatalf("ClaimBulkRun(b) while a's lease holds = %+v, %v; want nothing", b, err)
	}
	_, err = s.UpdateBulkRun(ctx, run.ID, "a", func(r *BulkRun) error {
		r.Progress = RedriveProgress{Seen: 1, Approved: 1, Pending: &RedrivePending{At: Cursor{At: clock.Now(), ID: "TASKS.1"}, Action: "approve"}}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	clock.Add(2 * time.Minute) // a stopped renewing: its lease expired
	b, err := s.ClaimBulkRun(ctx, "b", time.Minute)
	if err != nil || b == nil || b.LeaseOwner != "b" || b.State != BulkRunning || b.Progress.Seen != 1 || b.Progress.Pending == nil {
		t.Fatalf("ClaimBulkRun(b) after the lease expired = %+v, %v; want it held by b with a's progress", b, err)
	}
	if _, err := s.UpdateBulkRun(ctx, run.ID, "a", func(r *BulkRun) error { r.Progress.Seen = 99; return nil }); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("UpdateBulkRun(a) after b took over = %v, want ErrLeaseLost", err)
	}
	if cur, _ := s.GetBulkRun(ctx, run.ID); cur.Progress.Seen != 1 {
		t.Errorf("a refused update wrote seen %d, want 1", cur.Progress.Seen)
	}

	// Cancel: running -> cancelling (the runner ends it), again: no change.
	for range 2 {
		c, err := s.CancelBulkRun(ctx, run.ID, "ops@example.com")
		if err != nil || c.State != BulkCancelling || c.CancelledBy != "ops@example.com" {
			t.Fatalf("CancelBulkRun = %+v, %v; want cancelling", c, err)
		}
	}
	if _, err := s.UpdateBulkRun(ctx, run.ID, "b", func(r *BulkRun) error { r.State = BulkCancelled; return nil }); err != nil {
		t.Fatal(err)
	}
	if c, err := s.CancelBulkRun(ctx, run.ID, "x"); err != nil || c.State != BulkCancelled || c.CancelledBy != "ops@example.com" {
		t.Errorf("CancelBulkRun(cancelled) = %+v, %v; want unchanged", c, err)
	}
	if r, err := s.ClaimBulkRun(ctx, "c", time.Minute); err != nil || r != nil {
		t.Errorf("ClaimBulkRun after the run ended = %+v, %v; want nothing", r, err)
	}
}

// TestBulkRunCancelPlanned: a run no runner has claimed is cancelled at
// once; a finished run cannot be cancelled; the newest run lists first.
func TestBulkRunCancelPlanned(t *testing.T) {
	s, clock := newStore(t)
	ctx := testenv.Context(t)
	first, second := &BulkRun{Rate: 1, Actor: "x"}, &BulkRun{Rate: 1, Actor: "y"}
	for _, r := range []*BulkRun{first, second} {
		if err := s.CreateBulkRun(ctx, r); err != nil {
			t.Fatal(err)
		}
		clock.Add(time.Second)
	}
	if c, err := s.CancelBulkRun(ctx, first.ID, "x"); err != nil || c.State != BulkCancelled || c.FinishedAt.IsZero() {
		t.Errorf("CancelBulkRun(planned) = %+v, %v; want cancelled and finished", c, err)
	}
	claimed, err := s.ClaimBulkRun(ctx, "a", time.Minute)
	if err != nil || claimed == nil || claimed.ID != second.ID {
		t.Fatalf("ClaimBulkRun = %+v, %v; want the second run (the first is cancelled)", claimed, err)
	}
	if _, err := s.UpdateBulkRun(ctx, second.ID, "a", func(r *BulkRun) error { r.State = BulkDone; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CancelBulkRun(ctx, second.ID, "y"); !errors.Is(err, ErrWrongStatus) {
		t.Errorf("CancelBulkRun(done) = %v, want ErrWrongStatus", err)
	}
	runs, err := s.ListBulkRuns(ctx, 10)
	if err != nil || len(runs) != 2 || runs[0].ID != second.ID {
		t.Errorf("ListBulkRuns = %d runs (%v), want 2, newest first", len(runs), err)
	}
}

// TestBulkRunBadIDs: an id CreateBulkRun cannot have made never reaches
// Firestore as a path.
func TestBulkRunBadIDs(t *testing.T) {
	s, _ := newStore(t)
	ctx := testenv.Context(t)
	for _, id := range []string{"", "x", strings.Repeat("A", 32), strings.Repeat("0", 31) + "/", "../" + strings.Repeat("0", 29), strings.Repeat("0", 33)} {
		if _, err := s.GetBulkRun(ctx, id); !errors.Is(err, ErrBadID) {
			t.Errorf("GetBulkRun(%q) = %v, want ErrBadID", id, err)
		}
		if _, err := s.CancelBulkRun(ctx, id, "x"); !errors.Is(err, ErrBadID) {
			t.Errorf("CancelBulkRun(%q) = %v, want ErrBadID", id, err)
		}
		if _, err := s.UpdateBulkRun(ctx, id, "a", func(*BulkRun) error { return nil }); !errors.Is(err, ErrBadID) {
			t.Errorf("UpdateBulkRun(%q) = %v, want ErrBadID", id, err)
		}
	}
	if _, err := s.GetBulkRun(ctx, strings.Repeat("0", 32)); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetBulkRun(unknown) = %v, want ErrNotFound", err)
	}
}

// A plan's totals and the order of its counts, which dlqctl's printed plan
// and the console's plan page both show.
func TestRedrivePlanFigures(t *testing.T) {
	p := RedrivePlan{Held: 2, Nothing: 3, Excluded: map[string]int{"poison": 4, "quarantined": 1},
		PolicyStops: map[string]int{"escalated": 2, "quarantined": 5}, BreakerHeld: map[string]int{"acme": 7}}
	for _, tt := range []struct {
		name      string
		got, want int
	}{
		{"LeftAlone", p.LeftAlone(), 10},
		{"PolicyStopped", p.PolicyStopped(), 7},
		{"BreakerHolds", p.BreakerHolds(), 7},
		{"LeftAlone of an empty plan", RedrivePlan{}.LeftAlone(), 0},
	} {
		if tt.got != tt.want {
			t.Errorf("%s() = %d, want %d", tt.name, tt.got, tt.want)
		}
	}
	for _, tt := range []struct {
		in   map[string]int
		want []string
	}{
		{map[string]int{"b": 1, "a": 1, "c": 5, "": 2}, []string{"c", "", "a", "b"}},
		{map[string]int{}, nil},
		{nil, nil},
	} {
		if diff := cmp.Diff(tt.want, Ranked(tt.in)); diff != "" {
			t.Errorf("Ranked(%v) (-want +got):\n%s", tt.in, diff)
		}
	}
}

// The one rule of every lease the store keeps (reconcile's run lease, a bulk
// run's, a notification's claim): free when no one holds it, when the asker
// holds it already, or once it expired (at its until, not after).
func TestLeaseFree(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		holder string
		until  time.Time
		want   bool
	}{
		{"", time.Time{}, true},
		{"", now.Add(time.Minute), true},
		{"me", now.Add(time.Minute), true},
		{"other", now.Add(time.Minute), false},
		{"other", now.Add(time.Nanosecond), false},
		{"other", now, true},
		{"other", now.Add(-time.Minute), true},
	}
	for _, tt := range tests {
		if got := leaseFree(tt.holder, tt.until, "me", now); got != tt.want {
			t.Errorf("leaseFree(%q, now%+v, %q, now) = %v, want %v", tt.holder, tt.until.Sub(now), "me", got, tt.want)
		}
	}
}
