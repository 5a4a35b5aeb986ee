package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/jsdlq/jsdlq/internal/testenv"
)

// TransitionSeen stores what Transition stores, reading nothing while the
// entry is as the caller saw it; changed meanwhile (even into the status
// the change wants: a stale entry is no refusal), or held as a projection
// the move cannot be made from (one without history would lose it), it
// reads the entry again and decides as Transition does (a replay that lost
// its claim to an operator must not mark it replayed).
func TestTransitionSeen(t *testing.T) {
	s, clock := newStore(t, WithBreaker(BreakerConfig{Threshold: 1000, Window: time.Minute, Cooldown: time.Minute}))
	ctx := testenv.Context(t)
	published := func(e *Entry) error { e.PublishedSeq, e.Replays = 42, e.Replays+1; return nil }
	tests := []struct {
		name string
		// held is the entry the caller holds, after setup.
		held   func(t *testing.T, id string) *Entry
		change Change
		reads  int64
		err    error
	}{
		{"claimed and unchanged", func(t *testing.T, id string) *Entry {
			return claim(t, s, id)
		}, Change{From: []Status{Replaying}, To: Replayed, By: "test", Apply: published, Count: &Metrics{ReplaysPublished: 1}}, 0, nil},
		{"read by Get", func(t *testing.T, id string) *Entry {
			claim(t, s, id)
			e, err := s.GetMeta(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return e
		}, Change{From: []Status{Replaying}, To: Escalated, By: "test", Note: "payload_missing"}, 0, nil},
		{"projection, status move only", func(t *testing.T, id string) *Entry {
			claim(t, s, id)
			return scanned(t, s, id)
		}, Change{From: []Status{Replaying}, To: Recovered, By: "test", Count: &Metrics{ReplaysRecovered: 1}}, 0, nil},
		{"projection, with Apply", func(t *testing.T, id string) *Entry {
			claim(t, s, id)
			return scanned(t, s, id)
		}, Change{From: []Status{Replaying}, To: Replayed, By: "test", Apply: published}, 1, nil},
		{"projection, into a notified status", func(t *testing.T, id string) *Entry {
			claim(t, s, id)
			return scanned(t, s, id)
		}, Change{From: []Status{Replaying}, To: Escalated, By: "test"}, 1, nil},
		{"listed (no history)", func(t *testing.T, id string) *Entry {
			claim(t, s, id)
			return viewed(t, s, id, ListView)
		}, Change{From: []Status{Replaying}, To: Recovered, By: "test", Count: &Metrics{ReplaysRecovered: 1}}, 1, nil},
		{"stale: held scheduled, claimed since", func(t *testing.T, id string) *Entry {
			e, err := s.GetMeta(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			claim(t, s, id)
			return e
		}, Change{From: []Status{Replaying}, To: Replayed, By: "test", Apply: published, Count: &Metrics{ReplaysPublished: 1}}, 1, nil},
		{"moved on meanwhile", func(t *testing.T, id string) *Entry {
			e := claim(t, s, id)
			if _, err := s.Transition(ctx, id, Change{From: []Status{Replaying}, To: Escalated, By: "replay"}); err != nil {
				t.Fatal(err)
			}
			return e
		}, Change{From: []Status{Replaying}, To: Replayed, By: "test", Apply: published}, 1, ErrWrongStatus},
		{"changed meanwhile, same status", func(t *testing.T, id string) *Entry {
			e := claim(t, s, id)
			// Requeued by reconcile and claimed again: replaying, as
			// the caller saw it, but not the document it read.
			if _, err := s.Transition(ctx, id, Change{From: []Status{Replaying}, To: Scheduled, By: "reconcile"}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Transition(ctx, id, Change{From: []Status{Scheduled}, To: Replaying, By: "replay",
				Apply: func(e *Entry) error { e.TaskName = "other-r2"; return nil }}); err != nil {
				t.Fatal(err)
			}
			return e
		}, Change{From: []Status{Replaying}, To: Replayed, By: "test", Apply: published}, 1, nil},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seenID, twinID := fmt.Sprintf("TASKS.%d", 100+2*i), fmt.Sprintf("TASKS.%d", 101+2*i)
			for _, id := range []string{seenID, twinID} {
				if _, err := s.Record(ctx, entry(id, []byte(`{"task":1}`)), "test"); err != nil {
					t.Fatal(err)
				}
			}
			held, twin := tc.held(t, seenID), tc.held(t, twinID)
			clock.Add(time.Second)
			before := s.Ops()
			got, err := s.TransitionSeen(ctx, held, tc.change)
			if reads := s.Ops().Reads - before.Reads; reads != tc.reads {
				t.Errorf("TransitionSeen read %d documents, want %d", reads, tc.reads)
			}
			_, twinErr := s.Transition(ctx, twin.ID, tc.change)
			if !errors.Is(err, tc.err) || !errors.Is(twinErr, tc.err) {
				t.Fatalf("TransitionSeen() = %v, Transition() = %v, want %v", err, twinErr, tc.err)
			}
			if err != nil {
				return
			}
			stored, twinStored := get(t, s, seenID), get(t, s, twinID)
			ignore := cmpopts.IgnoreFields(Entry{}, "ID", "EventID", "RootID")
			if diff := cmp.Diff(twinStored, stored, ignore, cmpopts.IgnoreUnexported(Entry{})); diff != "" {
				t.Errorf("stored after TransitionSeen differs from Transition's (-Transition +TransitionSeen):\n%s", diff)
			}
			if held.view != FullView {
				return // a projection stays one
			}
			if diff := cmp.Diff(stored, got, ignore, cmpopts.IgnoreUnexported(Entry{})); diff != "" {
				t.Errorf("TransitionSeen() returned what was not stored (-stored +returned):\n%s", diff)
			}
		})
	}
}

// walk moves the entry id from status to status along path, each a move
// the status table allows, by "test".
func walk(t *testing.T, s *Store, id string, path ...Status) {
	t.Helper()
	for i := 1; i < len(path); i++ {
		if _, err := s.Transition(testenv.Context(t), id, Change{From: path[i-1 : i], To: path[i], By: "test"}); err != nil {
			t.Fatalf("walk %s %s -> %s: %v", id, path[i-1], path[i], err)
		}
	}
}

// claim moves the recorded entry id into replaying, as replay's claim does.
func claim(t *testing.T, s *Store, id string) *Entry {
	t.Helper()
	e, err := s.Transition(testenv.Context(t), id, Change{From: []Status{Scheduled}, To: Replaying, By: "test"})
	if err != nil {
		t.Fatalf("claim %s: %v", id, err)
	}
	return e
}

// scanned is entry id as an audit's scan reads it.
func scanned(t *testing.T, s *Store, id string) *Entry {
	t.Helper()
	return viewed(t, s, id, ScanView)
}

// viewed is entry id as a query through view reads it.
func viewed(t *testing.T, s *Store, id string, view View) *Entry {
	t.Helper()
	e, err := s.GetMeta(testenv.Context(t), id)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Entries(testenv.Context(t), Query{Status: e.Status, CreatedFrom: e.CreatedAt, CreatedTo: e.CreatedAt.Add(time.Nanosecond),
		Order: OldestFirst, View: view, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range p.Entries {
		if p.ID == id {
			return p
		}
	}
	t.Fatalf("query through view %d did not return %s", view, id)
	return nil
}

func get(t *testing.T, s *Store, id string) *Entry {
	t.Helper()
	e, err := s.Get(testenv.Context(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// DeferCheck writes next_retry_at alone, reading nothing, while the entry is
// as the caller saw it; an entry changed meanwhile (moved on, or changed in
// the same status) keeps what the change wrote, so a deferral never undoes
// a move. A scan due by a time leaves out what was put off past it. Calling
// it again writes the same value: the retry of a run that failed after it
// changes nothing.
func TestDeferCheck(t *testing.T) {
	s, clock := newStore(t, WithBreaker(BreakerConfig{Threshold: 1000, Window: time.Minute, Cooldown: time.Minute}))
	ctx := testenv.Context(t)
	replayed := func(t *testing.T, id string) *Entry {
		claim(t, s, id)
		if _, err := s.Transition(ctx, id, Change{From: []Status{Replaying}, To: Replayed, By: "test"}); err != nil {
			t.Fatal(err)
		}
		return scanned(t, s, id)
	}
	tests := []struct {
		name     string
		held     func(t *testing.T, id string) *Entry
		deferred bool
		status   Status
	}{
		{"unchanged", replayed, true, Replayed},
		{"moved on meanwhile", func(t *testing.T, id string) *Entry {
			e := replayed(t, id)
			if _, err := s.Transition(ctx, id, Change{From: []Status{Replayed}, To: Recovered, By: "replay"}); err != nil {
				t.Fatal(err)
			}
			return e
		}, false, Recovered},
		{"unknown to the store", func(t *testing.T, id string) *Entry {
			e := *replayed(t, id)
			e.seen = time.Time{}
			return &e
		}, false, Replayed},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("TASKS.%d", 300+i)
			if _, err := s.Record(ctx, entry(id, []byte(`{"task":1}`)), "test"); err != nil {
				t.Fatal(err)
			}
			held := tc.held(t, id)
			clock.Add(time.Second)
			before := get(t, s, id)
			at := clock.Now().Add(time.Hour)
			for range 2 {
				ops := s.Ops()
				deferred, err := s.DeferCheck(ctx, held, at)
				if err != nil || deferred != tc.deferred {
					t.Fatalf("DeferCheck() = %v, %v; want %v, nil", deferred, err, tc.deferred)
				}
				if reads := s.Ops().Reads - ops.Reads; reads != 0 {
					t.Errorf("DeferCheck read %d documents, want none", reads)
				}
				if !tc.deferred {
					break
				}
				held = scanned(t, s, id) // as the retried run would read it
			}
			stored := get(t, s, id)
			want := before.NextRetryAt
			if tc.deferred {
				want = at.UTC()
			}
			if stored.Status != tc.status || !stored.NextRetryAt.Equal(want) {
				t.Errorf("stored = %s due %s, want %s due %s", stored.Status, stored.NextRetryAt, tc.status, want)
			}
			if diff := cmp.Diff(before, stored, cmpopts.IgnoreFields(Entry{}, "NextRetryAt"), cmpopts.IgnoreUnexported(Entry{})); diff != "" {
				t.Errorf("DeferCheck changed more than next_retry_at (-before +after):\n%s", diff)
			}
			p, err := s.Entries(ctx, Query{Status: Replayed, Order: DueFirst, DueBy: clock.Now(), Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			due := false
			for _, e := range p.Entries {
				due = due || e.ID == id
			}
			if wantDue := tc.status == Replayed && !tc.deferred; due != wantDue {
				t.Errorf("due by now: %v, want %v", due, wantDue)
			}
		})
	}
	if _, err := s.Entries(ctx, Query{Order: NewestFirst, DueBy: clock.Now(), Limit: 1}); !errors.Is(err, ErrBadQuery) {
		t.Errorf("Entries(DueBy without the due order) = %v, want ErrBadQuery", err)
	}
}
