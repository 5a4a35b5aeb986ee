package reconciler_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// olderRecord writes the completion record an agentkit from before tenant
// scoping wrote: under the key alone, with no tenant.
func (f *fixture) olderRecord(key string, completed time.Time) {
	f.t.Helper()
	rec := agentkit.IdempotencyRecord{Key: key, Status: agentkit.StatusCompleted, Agent: "backend", CompletedAt: completed, ExpireAt: completed.Add(72 * time.Hour)}
	if _, err := f.fs.Collection(store.TaskIdempotency).Doc(agentkit.LegacyIdempotencyDocID(key)).Set(f.ctx, rec); err != nil {
		f.t.Fatalf("write an older kit's record: %v", err)
	}
}

// A replayed entry is recovered by its own tenant's completion record only:
// another tenant's completion of the same key leaves it replayed. While
// the migration window lasts, a record an older kit wrote (no tenant)
// recovers it when completed at or after the dead task was published (and
// the run counts it, legacy_completions, so the operator sees when older
// records stop mattering); one completed before belongs to another task.
// After the window no older record is read.
func TestReplayedRecoveredByItsTenantsCompletion(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	now := time.Now().UTC()
	published := now.Add(-2 * time.Hour).Truncate(time.Microsecond)
	at := f.storeAt(now.Add(-time.Hour))
	replayed := func(seq uint64, tenant, key string) string {
		in := entry(seq, tenant, store.Scheduled)
		in.IdempotencyKey, in.PublishedAt = key, published
		e := f.seed(at, in)
		f.move(at, e.ID, store.Scheduled, store.Replaying, "replay")
		f.move(at, e.ID, store.Replaying, store.Replayed, "replay")
		return e.ID
	}
	ids := map[string]string{
		"acme, completed":                 replayed(1, "acme", "shared-v1"),
		"globex, acme's completion":       replayed(2, "globex", "shared-v1"),
		"older record after the publish":  replayed(3, "acme", "after-v1"),
		"older record before the publish": replayed(4, "globex", "before-v1"),
	}
	f.complete("acme", "shared-v1")
	f.olderRecord("after-v1", published.Add(time.Minute))
	f.olderRecord("before-v1", published.Add(-time.Microsecond))

	statuses := func() map[string]store.Status {
		out := map[string]store.Status{}
		for name, id := range ids {
			out[name] = f.get(id).Status
		}
		return out
	}
	// A run after the window: only the tenants' own records count.
	open := f.st
	f.st = store.New(f.fs, store.WithLegacyCompletionsUntil(now.Add(-time.Second)))
	rep := f.run(f.handler(reconciler.Config{TimeBudget: time.Minute}, nil), false)
	want := map[string]store.Status{
		"acme, completed": store.Recovered, "globex, acme's completion": store.Replayed, "older record after the publish": store.Replayed,
		"older record before the publish": store.Replayed,
	}
	if d := cmp.Diff(want, statuses()); d != "" {
		t.Errorf("after a run past the window (-want +got):\n%s", d)
	}
	if c := section(t, rep, reconciler.SectionReplayed).Counts; c["legacy_completions"] != 0 {
		t.Errorf("counts past the window = %v, want no legacy_completions", c)
	}

	// A run in the window (the default: no end set), once the checks the
	// first run put off (by an hour, as long as they had waited) are due.
	f.st = open
	later := now.Add(3 * time.Hour)
	rep = f.run(f.handler(reconciler.Config{TimeBudget: time.Minute}, func() time.Time { return later }), false)
	want["older record after the publish"] = store.Recovered
	if d := cmp.Diff(want, statuses()); d != "" {
		t.Errorf("after a run in the window (-want +got):\n%s", d)
	}
	if c := section(t, rep, reconciler.SectionReplayed).Counts; c["legacy_completions"] != 1 {
		t.Errorf("counts in the window = %v, want 1 legacy_completions", c)
	}
	h := f.get(ids["older record after the publish"]).History
	if note := h[len(h)-1].Note; !strings.Contains(note, "older agentkit") {
		t.Errorf("history note = %q, want it to name the older kit's record", note)
	}
	// The recovered entry's tenant now has a record of its own.
	if c, err := store.New(f.fs, store.WithLegacyCompletionsUntil(now)).Completion(f.ctx, f.get(ids["older record after the publish"])); err != nil || !c.Done || c.Legacy {
		t.Errorf("acme's own record after the recovery = %+v, %v; want done", c, err)
	}
}
