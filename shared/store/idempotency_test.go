package store_test

import (
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/store"
)

func TestTaskCompleted(t *testing.T) {
	ctx, fs, s := newStore(t)
	coll := fs.Collection(store.TaskIdempotency)
	now := time.Now().UTC()
	// Keys with '/' are stored under their hash: the lookup must agree
	// with agentkit's mapping.
	docs := map[string]agentkit.IdempotencyRecord{
		"done/1":  {Key: "done/1", Status: agentkit.StatusCompleted, CompletedAt: now, ExpireAt: now.Add(time.Hour)},
		"claimed": {Key: "claimed", Status: agentkit.StatusInProgress, ClaimedAt: now, LeaseUntil: now.Add(time.Minute), ExpireAt: now.Add(time.Hour)},
	}
	for k, rec := range docs {
		if _, err := coll.Doc(agentkit.IdempotencyDocID(k)).Set(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	for key, want := range map[string]bool{"done/1": true, "claimed": false, "absent": false, "": false} {
		got, err := s.TaskCompleted(ctx, key)
		if err != nil || got != want {
			t.Errorf("TaskCompleted(%q) = %v, %v, want %v", key, got, err, want)
		}
	}
}

func TestCompletedKeysIgnoresClaims(t *testing.T) {
	ctx, fs, s := newStore(t)
	now := time.Now().UTC()
	recs := map[string]agentkit.IdempotencyRecord{
		"done":     {Key: "done", Status: agentkit.StatusCompleted, CompletedAt: now},
		"claimed":  {Key: "claimed", Status: agentkit.StatusInProgress, LeaseUntil: now.Add(time.Minute)},
		"a/slash":  {Key: "a/slash", Status: agentkit.StatusCompleted, CompletedAt: now},
		"done-old": {Key: "done-old", Status: agentkit.StatusCompleted, CompletedAt: now.Add(-48 * time.Hour)},
	}
	for k, r := range recs {
		if _, err := fs.Collection(store.TaskIdempotency).Doc(agentkit.IdempotencyDocID(k)).Set(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.CompletedKeys(ctx, []string{"done", "claimed", "a/slash", "absent", ""})
	if err != nil {
		t.Fatal(err)
	}
	if !got["done"] || got["claimed"] || !got["a/slash"] || got["absent"] {
		t.Errorf("CompletedKeys = %v, want done and a/slash only", got)
	}
	if n, err := s.CountCompletions(ctx, now.Add(-time.Hour), now.Add(time.Minute)); err != nil || n != 2 {
		t.Errorf("CountCompletions(last hour) = %d, %v; want 2", n, err)
	}
}
