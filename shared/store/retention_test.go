package store

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// completionRef is where agentkit.Once records the completion of tenant's
// task with key.
func completionRef(s *Store, tenant, key string) *firestore.DocumentRef {
	return s.fs.Collection(TaskIdempotency).Doc(agentkit.IdempotencyDocID(tenant, key))
}

// readRecord reads the completion record at ref, and its update time.
func readRecord(t *testing.T, ref *firestore.DocumentRef) (agentkit.IdempotencyRecord, time.Time) {
	t.Helper()
	snap, err := ref.Get(testenv.Context(t))
	if err != nil {
		t.Fatalf("%s: %v", ref.Path, err)
	}
	var rec agentkit.IdempotencyRecord
	if err := snap.DataTo(&rec); err != nil {
		t.Fatalf("%s: %v", ref.Path, err)
	}
	return rec, snap.UpdateTime
}

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

	// A payload edit writes the new version's chunks; bound to the entry,
	// they carry its expiry, not the default given to chunks not yet bound.
	// The original's chunks stay as they were.
	edited := bytes.Repeat([]byte("y"), ChunkSize+5)
	if _, err := s.TransitionScoped(ctx, id, AllTenants, Change{From: []Status{Scheduled}, To: Scheduled, By: "op"}, &Edit{Payload: edited, By: "op"}); err != nil {
		t.Fatalf("TransitionScoped(edit payload) = %v", err)
	}
	got := checkExpiry(t, s, "payload edited", id, 7*day, 3)
	if v := got.Versions(); len(v) != 2 || v[1].Chunks != 2 {
		t.Fatalf("versions after the edit = %+v, want the original and an edit in 2 chunks", v)
	}
	checkVersionExpiry := func(what string) {
		t.Helper()
		cur, err := s.GetMeta(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chunkSets(cur.Versions()) {
			snap, err := s.fs.Collection(FailureLog).Doc(id).Collection(PayloadChunks).Doc(chunkID(c.sum, c.n)).Get(ctx)
			if err != nil {
				t.Fatalf("%s: chunk %s-%d: %v", what, c.sum[:8], c.n, err)
			}
			if at, _ := snap.Data()["expire_at"].(time.Time); !at.Equal(cur.ExpireAt) {
				t.Errorf("%s: chunk %s-%d expire_at = %v, want the entry's %v", what, c.sum[:8], c.n, at, cur.ExpireAt)
			}
		}
	}
	checkVersionExpiry("payload edited")
	if b, err := s.VersionPayload(ctx, got, 2); err != nil || !bytes.Equal(b, edited) {
		t.Errorf("VersionPayload(2) = %d bytes, %v, want the edit", len(b), err)
	}
	if err := s.LoadPayload(ctx, got); err != nil || !bytes.Equal(got.Payload, big) {
		t.Errorf("LoadPayload(original) = %d bytes, %v, want the original %d bytes", len(got.Payload), err, len(big))
	}
	// A re-evaluation to another retention moves every version's chunks.
	if _, err := s.Transition(ctx, id, Change{From: []Status{Scheduled}, To: Scheduled, By: "replay",
		Apply: func(cur *Entry) error {
			cur.Plan = PlanOf(triage.Decision{Action: triage.AutoReplay, Retention: 30 * day})
			return nil
		}}); err != nil {
		t.Fatalf("Transition(re-evaluate after the edit) = %v", err)
	}
	checkExpiry(t, s, "re-evaluated to 30 d after the edit", id, 30*day, 3)
	checkVersionExpiry("re-evaluated to 30 d after the edit")
}

// TestRecoveredKeepsTheCompletionRecord: an entry recovered because its
// task completed makes the completion record last as long as the entry; a
// record that lasts longer already, or a claim that is not a completion, is
// left as it is. Recovering again (a retried task) changes nothing more.
func TestRecoveredKeepsTheCompletionRecord(t *testing.T) {
	s, clock := newStore(t)
	ctx := testenv.Context(t)
	now := clock.Now()
	const day = 24 * time.Hour
	tests := []struct {
		name   string
		rec    agentkit.IdempotencyRecord
		keep   time.Duration // the entry's retention
		expire time.Time     // the record's expire_at afterwards
	}{
		{"completed, 72 h, entry kept 180 d", agentkit.IdempotencyRecord{Status: agentkit.StatusCompleted, CompletedAt: now, ExpireAt: now.Add(72 * time.Hour)},
			180 * day, now.Add(180 * day)},
		{"completed, lasting longer than the entry", agentkit.IdempotencyRecord{Status: agentkit.StatusCompleted, CompletedAt: now, ExpireAt: now.Add(400 * day)},
			7 * day, now.Add(400 * day)},
		{"a claim, not a completion", agentkit.IdempotencyRecord{Status: agentkit.StatusInProgress, ExpireAt: now.Add(time.Hour)},
			180 * day, now.Add(time.Hour)},
	}
	for i, tc := range append(tests, tests...) {
		// The second time through, the record was read by the caller
		// (reconcile's Completions) and the write relies on it.
		seen := i >= len(tests)
		e := entry("TASKS.keep"+string(rune('0'+i)), []byte("p"))
		e.IdempotencyKey = "key-" + e.ID
		e.Decide(triage.Decision{Action: triage.Escalate, Retention: tc.keep}, now)
		if _, err := s.Record(ctx, e, "classify"); err != nil {
			t.Fatalf("%s: Record() = %v", tc.name, err)
		}
		ref := completionRef(s, e.Tenant, e.IdempotencyKey)
		tc.rec.Key, tc.rec.Tenant = e.IdempotencyKey, e.Tenant
		if _, err := ref.Set(ctx, tc.rec); err != nil {
			t.Fatal(err)
		}
		walk(t, s, e.ID, Escalated, Scheduled, Replaying)
		for range 2 {
			var err error
			if seen {
				var c Completion
				if c, err = s.Completion(ctx, e); err != nil {
					t.Fatal(err)
				}
				_, err = s.MarkRecoveredSeen(ctx, scanned(t, s, e.ID), []Status{Replaying}, "test", "completed", c)
			} else {
				_, err = s.MarkRecovered(ctx, e.ID, []Status{Replaying}, "test", "completed")
			}
			if err != nil {
				t.Fatalf("%s (seen %v): MarkRecovered() = %v", tc.name, seen, err)
			}
		}
		if got, _ := readRecord(t, ref); !got.ExpireAt.Equal(tc.expire) {
			t.Errorf("%s (seen %v): record expire_at = %v, want %v", tc.name, seen, got.ExpireAt, tc.expire)
		}
	}

	// A record changed after the caller read it (another entry of the same
	// key kept it longer): the conditioned write is refused and the record
	// read again, so it is not shortened.
	e := entry("TASKS.keep-changed", []byte("p"))
	e.IdempotencyKey = "key-changed"
	e.Decide(triage.Decision{Action: triage.Escalate, Retention: 7 * day}, now)
	if _, err := s.Record(ctx, e, "classify"); err != nil {
		t.Fatal(err)
	}
	ref := completionRef(s, e.Tenant, e.IdempotencyKey)
	rec := agentkit.IdempotencyRecord{Key: e.IdempotencyKey, Tenant: e.Tenant, Status: agentkit.StatusCompleted, CompletedAt: now, ExpireAt: now.Add(72 * time.Hour)}
	if _, err := ref.Set(ctx, rec); err != nil {
		t.Fatal(err)
	}
	c, err := s.Completion(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ref.Update(ctx, []firestore.Update{{Path: "expire_at", Value: now.Add(400 * day)}}); err != nil {
		t.Fatal(err)
	}
	walk(t, s, e.ID, Escalated, Scheduled, Replaying)
	if _, err := s.MarkRecoveredSeen(ctx, scanned(t, s, e.ID), []Status{Replaying}, "test", "completed", c); err != nil {
		t.Fatalf("MarkRecoveredSeen(changed record) = %v", err)
	}
	snap, err := ref.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if at, _ := snap.Data()["expire_at"].(time.Time); !at.Equal(now.Add(400 * day)) {
		t.Errorf("record changed since it was read: expire_at = %v, want the longer %v kept", at, now.Add(400*day))
	}
}

// An entry recovered through an older kit's record (no tenant) gets a
// record of its own tenant, with the older record's completion time and as
// long as the entry, so the decision outlasts the migration window; the
// older record, which another tenant's task may share, is left as it is,
// and another tenant's task with the key is not done by it. Recovering
// again (a retried task, reconcile after replay) writes nothing more.
func TestRecoveryThroughAnOlderKitsRecord(t *testing.T) {
	s, clock := newStore(t)
	ctx := testenv.Context(t)
	now := clock.Now()
	const day = 24 * time.Hour
	published := now.Add(-time.Hour)
	old := agentkit.IdempotencyRecord{Key: "old-kit", Status: agentkit.StatusCompleted, Agent: "backend", Owner: "0123456789abcdef",
		CompletedAt: now.Add(-30 * time.Minute), ExpireAt: now.Add(72*time.Hour - 30*time.Minute)}
	legacy := s.fs.Collection(TaskIdempotency).Doc(agentkit.LegacyIdempotencyDocID(old.Key))
	if _, err := legacy.Set(ctx, old); err != nil {
		t.Fatal(err)
	}
	record := func(id, tenant string, published time.Time) *Entry {
		e := entry(id, []byte("p"))
		e.Tenant, e.IdempotencyKey, e.PublishedAt = tenant, old.Key, published
		e.Decide(triage.Decision{Action: triage.Escalate, Retention: 180 * day}, now)
		res, err := s.Record(ctx, e, "classify")
		if err != nil {
			t.Fatalf("Record(%s) = %v", id, err)
		}
		return res.Entry
	}
	for _, seen := range []bool{false, true} {
		e := record(fmt.Sprintf("TASKS.old-kit-%v", seen), fmt.Sprintf("acme-%v", seen), published)
		c, err := s.Completion(ctx, e)
		if err != nil || !c.Done || !c.Legacy {
			t.Fatalf("Completion(%s) = %+v, %v; want done by the older kit's record", e.ID, c, err)
		}
		var updated time.Time
		walk(t, s, e.ID, Escalated, Scheduled, Replaying)
		for i := range 2 {
			if seen {
				_, err = s.MarkRecoveredSeen(ctx, scanned(t, s, e.ID), []Status{Replaying}, "test", c.Note(e), c)
			} else {
				_, err = s.MarkRecovered(ctx, e.ID, []Status{Replaying}, "test", c.Note(e))
			}
			if err != nil {
				t.Fatalf("MarkRecovered(%s, seen %v) = %v", e.ID, seen, err)
			}
			got, at := readRecord(t, completionRef(s, e.Tenant, e.IdempotencyKey))
			want := agentkit.IdempotencyRecord{Key: old.Key, Tenant: e.Tenant, Status: agentkit.StatusCompleted, Agent: old.Agent,
				CompletedAt: old.CompletedAt, ExpireAt: e.ExpireAt}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("the tenant's record (seen %v, -want +got):\n%s", seen, d)
			}
			if i == 1 && !at.Equal(updated) {
				t.Errorf("recovering %s again wrote its record (seen %v)", e.ID, seen)
			}
			updated = at
		}
		if h := get(t, s, e.ID).History; !strings.Contains(h[len(h)-1].Note, "older agentkit") {
			t.Errorf("history note = %q, want it to name the older kit's record", h[len(h)-1].Note)
		}
	}
	after, _ := readRecord(t, legacy)
	if d := cmp.Diff(old, after); d != "" {
		t.Errorf("the older kit's record changed (-before +after):\n%s", d)
	}

	// After the window the recovered task is still done: its own record.
	over := New(s.fs, WithClock(clock.Now), WithLegacyCompletionsUntil(now))
	if c, err := over.Completion(ctx, get(t, s, "TASKS.old-kit-false")); err != nil || !c.Done || c.Legacy {
		t.Errorf("Completion after the window = %+v, %v; want done by the tenant's own record", c, err)
	}
	// Another tenant's task of the key, published after the older record
	// was completed, is not done by it, and keeping writes nothing.
	beta := record("TASKS.beta", "beta", now.Add(-10*time.Minute))
	if c, err := s.Completion(ctx, beta); err != nil || c.Done {
		t.Errorf("Completion(beta, published after the older record) = %+v, %v; want not done", c, err)
	}
	if err := s.KeepCompletion(ctx, beta); err != nil {
		t.Fatal(err)
	}
	if _, err := completionRef(s, "beta", old.Key).Get(ctx); status.Code(err) != codes.NotFound {
		t.Errorf("beta's record after KeepCompletion: %v, want none", err)
	}
}
