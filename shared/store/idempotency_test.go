package store_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/store"
)

// task is an entry of tenant's task with key, published at published, as
// far as the completion lookups read it.
func task(id, tenant, key string, published time.Time) *store.Entry {
	return &store.Entry{ID: id, Tenant: tenant, IdempotencyKey: key, PublishedAt: published}
}

// done is what Completions found, by entry id: whether the task completed
// and whether an older kit's record said so.
func done(found map[string]store.Completion) map[string][2]bool {
	out := map[string][2]bool{}
	for id, c := range found {
		out[id] = [2]bool{c.Done, c.Legacy}
	}
	return out
}

// A completion record is its tenant's: another tenant's task with the same
// key is not done, and a claim is not a completion.
func TestCompletionsAreTheTenants(t *testing.T) {
	ctx, fs, s := newStore(t)
	coll := fs.Collection(store.TaskIdempotency)
	now := time.Now().UTC()
	recs := []agentkit.IdempotencyRecord{
		{Key: "done/1", Tenant: "acme", Status: agentkit.StatusCompleted, CompletedAt: now, ExpireAt: now.Add(time.Hour)},
		{Key: "claimed", Tenant: "acme", Status: agentkit.StatusInProgress, ClaimedAt: now, LeaseUntil: now.Add(time.Minute), ExpireAt: now.Add(time.Hour)},
		{Key: "beta-only", Tenant: "beta", Status: agentkit.StatusCompleted, CompletedAt: now, ExpireAt: now.Add(time.Hour)},
		{Key: "old", Tenant: "beta", Status: agentkit.StatusCompleted, CompletedAt: now.Add(-48 * time.Hour)},
	}
	for _, r := range recs {
		if _, err := coll.Doc(agentkit.IdempotencyDocID(r.Tenant, r.Key)).Set(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	published := now.Add(-time.Hour)
	entries := []*store.Entry{
		task("acme-done", "acme", "done/1", published),
		task("beta-done", "beta", "done/1", published),
		task("acme-claimed", "acme", "claimed", published),
		task("acme-beta-only", "acme", "beta-only", published),
		task("beta-beta-only", "beta", "beta-only", published),
		task("acme-keyless", "acme", "", published),
		task("default-done", "default", "done/1", published),
	}
	got, err := s.Completions(ctx, entries)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]bool{"acme-done": {true, false}, "acme-claimed": {false, false}, "beta-beta-only": {true, false}}
	if d := cmp.Diff(want, done(got)); d != "" {
		t.Errorf("Completions (-want +got):\n%s", d)
	}
	for _, e := range entries {
		c, err := s.Completion(ctx, e)
		if err != nil || c.Done != want[e.ID][0] {
			t.Errorf("Completion(%s: %s, %q) = %+v, %v; want done %v", e.ID, e.Tenant, e.IdempotencyKey, c, err, want[e.ID][0])
		}
	}
	if n, err := s.CountCompletions(ctx, now.Add(-time.Hour), now.Add(time.Minute)); err != nil || n != 2 {
		t.Errorf("CountCompletions(last hour) = %d, %v; want 2", n, err)
	}
}

// The migration: a record an older kit wrote under the key alone (no
// tenant) says a task is done while the window lasts, when it was
// completed at or after the task was published; one completed before
// belongs to another task (another tenant's with the same key, or an
// earlier one), and a task whose publish time is unknown cannot be told.
func TestCompletionsOfOlderKits(t *testing.T) {
	published := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	now := published.Add(time.Hour)
	legacy := func(key string, completed time.Time) agentkit.IdempotencyRecord {
		return agentkit.IdempotencyRecord{Key: key, Status: agentkit.StatusCompleted, CompletedAt: completed, ExpireAt: completed.Add(72 * time.Hour)}
	}
	type record struct {
		id  string
		rec agentkit.IdempotencyRecord
	}
	records := []record{
		{agentkit.LegacyIdempotencyDocID("after"), legacy("after", published.Add(time.Minute))},
		{agentkit.LegacyIdempotencyDocID("at/publish"), legacy("at/publish", published)},
		{agentkit.LegacyIdempotencyDocID("before"), legacy("before", published.Add(-time.Microsecond))},
		{agentkit.LegacyIdempotencyDocID("claimed"), agentkit.IdempotencyRecord{Key: "claimed", Status: agentkit.StatusInProgress,
			ClaimedAt: published.Add(time.Minute), LeaseUntil: now.Add(time.Minute), ExpireAt: now.Add(72 * time.Hour)}},
		// The tenant's own record answers first.
		{agentkit.IdempotencyDocID("acme", "both"), agentkit.IdempotencyRecord{Key: "both", Tenant: "acme", Status: agentkit.StatusCompleted,
			CompletedAt: published.Add(2 * time.Minute), ExpireAt: now.Add(72 * time.Hour)}},
		{agentkit.LegacyIdempotencyDocID("both"), legacy("both", published.Add(time.Minute))},
		// The tenant's own claim, an older kit's completion.
		{agentkit.IdempotencyDocID("acme", "own-claim"), agentkit.IdempotencyRecord{Key: "own-claim", Tenant: "acme", Status: agentkit.StatusInProgress,
			ClaimedAt: published.Add(time.Minute), LeaseUntil: now.Add(time.Minute), ExpireAt: now.Add(72 * time.Hour)}},
		{agentkit.LegacyIdempotencyDocID("own-claim"), legacy("own-claim", published.Add(2*time.Minute))},
	}
	entries := []*store.Entry{
		task("after", "acme", "after", published),
		task("at-publish", "acme", "at/publish", published),
		task("before", "acme", "before", published),
		task("unknown-publish", "acme", "after", time.Time{}),
		task("claimed", "acme", "claimed", published),
		task("both", "acme", "both", published),
		task("own-claim", "acme", "own-claim", published),
	}
	own := map[string][2]bool{"both": {true, false}, "own-claim": {false, false}}
	tests := []struct {
		name  string
		until time.Time // the window's end; zero: none set
		want  map[string][2]bool
		reads int64 // documents read
	}{
		{"no end set", time.Time{}, map[string][2]bool{"after": {true, true}, "at-publish": {true, true}, "both": {true, false},
			"own-claim": {true, true}}, 7 + 6},
		{"window ends a moment later", now.Add(time.Nanosecond), map[string][2]bool{"after": {true, true}, "at-publish": {true, true},
			"both": {true, false}, "own-claim": {true, true}}, 7 + 6},
		{"window over", now, own, 7},
		{"window long over", now.Add(-30 * 24 * time.Hour), own, 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, fs, s := newStore(t, store.WithClock(func() time.Time { return now }), store.WithLegacyCompletionsUntil(tc.until))
			for _, r := range records {
				if _, err := fs.Collection(store.TaskIdempotency).Doc(r.id).Set(ctx, r.rec); err != nil {
					t.Fatal(err)
				}
			}
			before := s.Ops()
			got, err := s.Completions(ctx, entries)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, done(got)); d != "" {
				t.Errorf("Completions (-want +got):\n%s", d)
			}
			// After the window a lookup reads the task's own record only.
			if reads := s.Ops().Reads - before.Reads; reads != tc.reads {
				t.Errorf("Completions read %d documents, want %d", reads, tc.reads)
			}
		})
	}
}
