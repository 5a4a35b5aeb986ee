package store

import (
	"bytes"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// chunkExpiry reads the expire_at of each of an entry's payload chunks.
func chunkExpiry(t *testing.T, s *Store, e *Entry) []time.Time {
	t.Helper()
	ctx := testenv.Context(t)
	var out []time.Time
	for n := range e.PayloadChunkCount {
		snap, err := s.fs.Collection(FailureLog).Doc(e.ID).Collection(PayloadChunks).Doc(chunkID(e.PayloadSHA256, n)).Get(ctx)
		if err != nil {
			t.Fatalf("chunk %d of %s: %v", n, e.ID, err)
		}
		at, _ := snap.Data()["expire_at"].(time.Time)
		out = append(out, at)
	}
	return out
}

func checkExpiry(t *testing.T, s *Store, what, id string, want time.Duration, chunks int) *Entry {
	t.Helper()
	got, err := s.GetMeta(testenv.Context(t), id)
	if err != nil {
		t.Fatalf("%s: GetMeta(%s) = %v", what, id, err)
	}
	if d := got.ExpireAt.Sub(got.CreatedAt); d != want {
		t.Errorf("%s: expire_at - created_at = %v, want %v", what, d, want)
	}
	if got.PayloadChunkCount != chunks {
		t.Fatalf("%s: %d chunks, want %d", what, got.PayloadChunkCount, chunks)
	}
	for n, at := range chunkExpiry(t, s, got) {
		if !at.Equal(got.ExpireAt) {
			t.Errorf("%s: chunk %d expire_at = %v, want the entry's %v", what, n, at, got.ExpireAt)
		}
	}
	return got
}

// TestRetentionFollowsThePlan: the decision's retention is the entry's
// expire_at from its creation, for a new entry and when a re-evaluation
// changes it, and the chunks of a large payload carry the same expiry.
func TestRetentionFollowsThePlan(t *testing.T) {
	s, clock := newStore(t)
	ctx := testenv.Context(t)
	const day = 24 * time.Hour
	big := bytes.Repeat([]byte("x"), 2*ChunkSize+1)

	tests := []struct {
		name      string
		id        string
		retention time.Duration
		payload   []byte
		chunks    int
		want      time.Duration
	}{
		{"decided 180 d, large payload", "TASKS.r180", 180 * day, big, 3, 180 * day},
		{"decided 7 d, inline payload", "TASKS.r7", 7 * day, []byte("small"), 0, 7 * day},
		{"decided 36 h", "TASKS.r36h", 36 * time.Hour, nil, 0, 36 * time.Hour},
		{"no retention in the plan (decided before policies set it)", "TASKS.r0", 0, big, 3, Retention},
	}
	for _, tc := range tests {
		e := entry(tc.id, tc.payload)
		e.Decide(triage.Decision{Action: triage.Escalate, Retention: tc.retention}, clock.Now())
		if _, err := s.Record(ctx, e, "classify"); err != nil {
			t.Fatalf("%s: Record() = %v", tc.name, err)
		}
		checkExpiry(t, s, tc.name, e.ID, tc.want, tc.chunks)
	}

	// A re-evaluation an hour later changes the retention: expire_at counts
	// from the creation, and the chunks follow in the same transaction.
	// Applying it twice (a retried task) sets the same values: idempotent.
	id := "TASKS.r180"
	clock.Add(time.Hour)
	for range 2 {
		_, err := s.Transition(ctx, id, Change{From: []Status{Escalated, Scheduled}, To: Scheduled, By: "replay",
			Apply: func(cur *Entry) error {
				cur.Plan = PlanOf(triage.Decision{Action: triage.AutoReplay, Retention: 7 * day})
				return nil
			}})
		if err != nil {
			t.Fatalf("Transition(re-evaluate) = %v", err)
		}
		checkExpiry(t, s, "re-evaluated to 7 d", id, 7*day, 3)
	}

	// A payload edit writes new chunks; bound to the entry, they carry its
	// expiry, not the default given to chunks not yet bound.
	edited := bytes.Repeat([]byte("y"), ChunkSize+5)
	if _, err := s.TransitionScoped(ctx, id, AllTenants, Change{From: []Status{Scheduled}, To: AwaitingApproval, By: "op"}, edited); err != nil {
		t.Fatalf("TransitionScoped(edit payload) = %v", err)
	}
	got := checkExpiry(t, s, "payload edited", id, 7*day, 2)
	if err := s.LoadPayload(ctx, got); err != nil || !bytes.Equal(got.Payload, edited) {
		t.Errorf("LoadPayload(edited) = %d bytes, %v, want the edit", len(got.Payload), err)
	}
}
