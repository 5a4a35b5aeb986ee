package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/event"
)

// chainKey is the idempotency key every entry of these tests carries: a
// replay keeps its task's key.
const chainKey = "job-1"

// dead records entry id of tenant as classify records a dead message whose
// Jsdlq-Replay-Of header names replayOf ("" for none): linked, then
// recorded. It returns the stored entry, what Record did, and why it was not
// linked ("" when linked or not a replay).
func dead(t *testing.T, s *Store, id, tenant, replayOf string) (*Entry, RecordResult, string) {
	t.Helper()
	e := entry(id, []byte(`{"task":1}`))
	e.Tenant, e.IdempotencyKey = tenant, chainKey
	headers := map[string][]string{}
	if replayOf != "" {
		headers[event.HeaderReplayOf] = []string{replayOf}
	}
	_, unlinked, err := s.LinkReplay(testenv.Context(t), e, headers)
	if err != nil {
		t.Fatalf("LinkReplay(%s) = %v", id, err)
	}
	res, err := s.Record(testenv.Context(t), e, "classify")
	if err != nil {
		t.Fatalf("Record(%s) = %v", id, err)
	}
	return res.Entry, res, unlinked
}

// replayedEntry records entry id and moves it through its replay, as
// classify and replay do: its check is then due at once.
func replayedEntry(t *testing.T, s *Store, id, replayOf string) *Entry {
	t.Helper()
	dead(t, s, id, "acme", replayOf)
	claim(t, s, id)
	e, err := s.Transition(testenv.Context(t), id, Change{From: []Status{Replaying}, To: Replayed, By: "replay"})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// due reports whether a scan of the replayed entries due by at reads id.
func due(t *testing.T, s *Store, id string, at time.Time) bool {
	t.Helper()
	p, err := s.Entries(testenv.Context(t), Query{Status: Replayed, Order: DueFirst, DueBy: at, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range p.Entries {
		if e.ID == id {
			return true
		}
	}
	return false
}

// A replay that dies again is a new entry carrying the task on: its
// parent's completion check moves to a day before the parent expires (the
// chain's recovery recovers it first), by a write conditioned on the parent
// being as LinkReplay read it. Recording the death again (Pub/Sub
// redelivers) writes nothing more, which is what makes the hand-off safe to
// repeat; a parent that moved meanwhile, or one that is not replayed yet,
// keeps its schedule, and one reconcile put off meanwhile is read once more;
// a header naming another tenant's entry links nothing.
func TestReplayDeathHandsTheCheckToTheChain(t *testing.T) {
	s, clock := newStore(t, WithBreaker(BreakerConfig{Threshold: 1000, Window: time.Minute, Cooldown: time.Minute}))
	ctx := testenv.Context(t)
	tests := []struct {
		name      string
		parent    func(t *testing.T, id string) *Entry
		tenant    string
		meanwhile func(t *testing.T, id string)
		handed    bool
		unlinked  string
	}{
		{name: "replayed", parent: func(t *testing.T, id string) *Entry { return replayedEntry(t, s, id, "") },
			tenant: "acme", handed: true},
		{name: "not yet marked replayed", parent: func(t *testing.T, id string) *Entry { dead(t, s, id, "acme", ""); return claim(t, s, id) },
			tenant: "acme"},
		{name: "moved on meanwhile", parent: func(t *testing.T, id string) *Entry { return replayedEntry(t, s, id, "") },
			tenant: "acme", meanwhile: func(t *testing.T, id string) {
				if _, err := s.Transition(ctx, id, Change{From: []Status{Replayed}, To: Discarded, By: "operator"}); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "put off by reconcile meanwhile", parent: func(t *testing.T, id string) *Entry { return replayedEntry(t, s, id, "") },
			tenant: "acme", handed: true, meanwhile: func(t *testing.T, id string) {
				// Still replayed, but no longer as LinkReplay read it:
				// read once more and handed off.
				if ok, err := s.DeferCheck(ctx, get(t, s, id), clock.Now().Add(15*time.Minute)); err != nil || !ok {
					t.Fatalf("DeferCheck(%s) = %v, %v; want written", id, ok, err)
				}
			}},
		{name: "another tenant's entry", parent: func(t *testing.T, id string) *Entry { return replayedEntry(t, s, id, "") },
			tenant: "other", unlinked: "belongs to another tenant"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parentID, childID := fmt.Sprintf("TASKS.%d", 400+2*i), fmt.Sprintf("TASKS.%d", 401+2*i)
			tc.parent(t, parentID)
			clock.Add(time.Minute)
			child := entry(childID, []byte(`{"task":1}`))
			child.Tenant, child.IdempotencyKey = tc.tenant, chainKey
			_, unlinked, err := s.LinkReplay(ctx, child, map[string][]string{event.HeaderReplayOf: {parentID}})
			if err != nil {
				t.Fatal(err)
			}
			if tc.meanwhile != nil {
				tc.meanwhile(t, parentID)
			}
			before := get(t, s, parentID)
			res, err := s.Record(ctx, child, "classify")
			if err != nil || res.HandOff != nil {
				t.Fatalf("Record(%s) = %+v, %v; want no error", childID, res, err)
			}
			if tc.unlinked == "" && (unlinked != "" || res.Entry.ReplayOf != parentID) {
				t.Fatalf("LinkReplay(%s) unlinked %q, replay_of %q; want linked to %s", childID, unlinked, res.Entry.ReplayOf, parentID)
			}
			if tc.unlinked != "" && (!strings.Contains(unlinked, tc.unlinked) || res.Entry.ReplayOf != "") {
				t.Fatalf("LinkReplay(%s) unlinked %q, replay_of %q; want %q and no link", childID, unlinked, res.Entry.ReplayOf, tc.unlinked)
			}
			after := get(t, s, parentID)
			want := before.NextRetryAt
			if tc.handed {
				want = before.ExpireAt.Add(-ChainCheckMargin)
			}
			if !after.NextRetryAt.Equal(want) {
				t.Errorf("parent's next check = %s, want %s", after.NextRetryAt, want)
			}
			if diff := cmp.Diff(before, after, cmpopts.IgnoreFields(Entry{}, "NextRetryAt"), cmpopts.IgnoreUnexported(Entry{})); diff != "" {
				t.Errorf("the hand-off changed more than next_retry_at (-before +after):\n%s", diff)
			}
			if tc.handed && due(t, s, parentID, clock.Now().Add(7*24*time.Hour)) {
				t.Errorf("parent due within a week of its replay's death, want its check handed to %s", childID)
			}

			// Pub/Sub redelivers the death: linked and recorded again,
			// nothing more is written to the parent.
			stored := get(t, s, parentID)
			again := entry(childID, []byte(`{"task":1}`))
			again.Tenant, again.IdempotencyKey = tc.tenant, chainKey
			if _, _, err := s.LinkReplay(ctx, again, map[string][]string{event.HeaderReplayOf: {parentID}}); err != nil {
				t.Fatal(err)
			}
			if res, err := s.Record(ctx, again, "classify"); err != nil || res.Created || res.HandOff != nil {
				t.Fatalf("Record(%s) again = %+v, %v; want the stored entry", childID, res, err)
			}
			if now := get(t, s, parentID); !now.seen.Equal(stored.seen) {
				t.Errorf("the redelivered death wrote the parent (updated %s, was %s), want no write", now.seen, stored.seen)
			}
		})
	}
}

// When the task of a replay chain completes, the entry recovered with it
// takes the replayed entries before it along: each counted once, its
// completion record kept as long as it is. An entry of the chain that an
// operator moved on is left as it is and the walk goes past it; repeating
// the recovery (replay's Cloud Tasks retry) counts nothing twice.
func TestRecoveryRecoversTheChain(t *testing.T) {
	for _, tc := range []struct {
		name string
		// discarded: an operator gives the middle up (the status table
		// has no other way out of replayed but a recovery).
		discarded bool
		// otherTask gives the root another task's key and the middle
		// none: each link passes, the chain does not.
		otherTask bool
	}{
		{"all replayed", false, false},
		{"the middle discarded by an operator", true, false},
		{"a keyless middle between two tasks", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, clock := newStore(t, WithBreaker(BreakerConfig{Threshold: 1000, Window: time.Minute, Cooldown: time.Minute}))
			ctx := testenv.Context(t)
			root := replayedEntry(t, s, "TASKS.1", "")
			clock.Add(time.Hour)
			mid := replayedEntry(t, s, "TASKS.2", root.EventID)
			clock.Add(time.Hour)
			leaf := replayedEntry(t, s, "TASKS.3", mid.EventID)
			if leaf.ReplayOf != mid.ID || mid.ReplayOf != root.ID {
				t.Fatalf("chain = %s <- %s <- %s, want linked", root.ID, leaf.ReplayOf, mid.ReplayOf)
			}
			if tc.discarded {
				if _, err := s.Transition(ctx, mid.ID, Change{From: []Status{Replayed}, To: Discarded, By: "operator"}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.otherTask {
				for id, key := range map[string]any{root.ID: "another-task", mid.ID: firestore.Delete} {
					if _, err := s.entryRef(id).Update(ctx, []firestore.Update{{Path: "idempotency_key", Value: key}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			now := clock.Now()
			if _, err := completionRef(s, "acme", chainKey).Set(ctx, agentkit.IdempotencyRecord{Key: chainKey, Tenant: "acme", Status: agentkit.StatusCompleted,
				CompletedAt: now, ExpireAt: now.Add(agentkit.DefaultIdempotencyTTL)}); err != nil {
				t.Fatal(err)
			}
			clock.Add(time.Minute)
			for i := range 2 {
				before := s.Ops()
				if got, err := s.MarkRecovered(ctx, leaf.ID, []Status{Replayed}, "reconcile", "done"); err != nil || got.Status != Recovered {
					t.Fatalf("MarkRecovered(%s) = %v, %v; want recovered", leaf.ID, got, err)
				}
				// The leaf's move and its completion record, then one read
				// per ancestor: the record the leaf kept outlasts them.
				if got := s.Ops().Reads - before.Reads; i == 0 && !tc.discarded && !tc.otherTask && got != 4 {
					t.Errorf("MarkRecovered(%s) read %d documents, want 4", leaf.ID, got)
				}
			}
			want := map[string]Status{root.ID: Recovered, mid.ID: Recovered, leaf.ID: Recovered}
			recovered := int64(3)
			if tc.discarded {
				want[mid.ID], recovered = Discarded, 2
			}
			if tc.otherTask {
				want[root.ID], recovered = Replayed, 2
			}
			got := map[string]Status{}
			for id := range want {
				got[id] = get(t, s, id).Status
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("statuses after the leaf's recovery (-want +got):\n%s", diff)
			}
			m, err := s.ReadMetrics(ctx, Hour(clock.Now()))
			if err != nil || m.ReplaysRecovered != recovered {
				t.Errorf("replays_recovered = %d, %v; want %d", m.ReplaysRecovered, err, recovered)
			}
			var rec agentkit.IdempotencyRecord
			snap, err := completionRef(s, "acme", chainKey).Get(ctx)
			if err == nil {
				err = snap.DataTo(&rec)
			}
			if err != nil || (!tc.otherTask && rec.ExpireAt.Before(root.ExpireAt)) {
				t.Errorf("completion record expires %s (%v), want no sooner than the root entry (%s)", rec.ExpireAt, err, root.ExpireAt)
			}
		})
	}
}

// A recovery walks at most maxChainWalk entries up its chain: a chain that
// long is recovered whole, a longer one up to the bound, and the caller is
// told (ErrChainTooLong: repeating the call cannot help) while the entry
// itself is recovered.
func TestRecoveryWalksAtMostTheBound(t *testing.T) {
	for _, tc := range []struct {
		ancestors int
		wantErr   error
	}{
		{maxChainWalk, nil},
		{maxChainWalk + 1, ErrChainTooLong},
	} {
		t.Run(fmt.Sprint(tc.ancestors, " ancestors"), func(t *testing.T) {
			s, clock := newStore(t, WithBreaker(BreakerConfig{Threshold: 1000, Window: time.Minute, Cooldown: time.Minute}))
			ctx := testenv.Context(t)
			chain := []*Entry{replayedEntry(t, s, "TASKS.1", "")}
			for i := range tc.ancestors {
				clock.Add(time.Minute)
				chain = append(chain, replayedEntry(t, s, fmt.Sprint("TASKS.", i+2), chain[i].EventID))
			}
			leaf := chain[len(chain)-1]
			got, err := s.MarkRecovered(ctx, leaf.ID, []Status{Replayed}, "reconcile", "done")
			if !errors.Is(err, tc.wantErr) || got == nil || got.Status != Recovered {
				t.Fatalf("MarkRecovered(leaf of %d) = %v, %v; want recovered, %v", len(chain), got, err, tc.wantErr)
			}
			wantRoot := Recovered
			if tc.wantErr != nil {
				wantRoot = Replayed
			}
			if st := get(t, s, chain[0].ID).Status; st != wantRoot {
				t.Errorf("root after the walk = %s, want %s", st, wantRoot)
			}
			if st := get(t, s, chain[1].ID).Status; st != Recovered {
				t.Errorf("the walk's last entry = %s, want recovered", st)
			}
		})
	}
}
