package agentkit_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
)

// readRecord reads the task-idempotency document id.
func readRecord(t *testing.T, fs *firestore.Client, id string) agentkit.IdempotencyRecord {
	t.Helper()
	snap, err := fs.Collection(agentkit.DefaultIdempotencyCollection).Doc(id).Get(testenv.Context(t))
	if err != nil {
		t.Fatalf("task-idempotency/%s: %v", id, err)
	}
	var rec agentkit.IdempotencyRecord
	if err := snap.DataTo(&rec); err != nil {
		t.Fatalf("task-idempotency/%s: %v", id, err)
	}
	return rec
}

var (
	task1 = agentkit.Task{Tenant: "acme", Key: "task-1-v1"}
	taskK = agentkit.Task{Tenant: "acme", Key: "k"}
	crash = agentkit.Task{Tenant: "acme", Key: "crash"}
)

func TestOnceRunsOnceAcrossRedeliveries(t *testing.T) {
	fs, _ := testenv.Firestore(t)
	ctx := testenv.Context(t)
	kit := agentkit.New(nil, agentkit.WithFirestore(fs), agentkit.WithAgent("backend"))
	runs := 0
	fn := func(context.Context) error { runs++; return nil }
	ran, err := kit.Once(ctx, task1, fn)
	if !ran || err != nil {
		t.Fatalf("first Once = %v, %v; want true, nil", ran, err)
	}
	// A redelivery (the ack was lost) or a replay finds it completed.
	ran, err = kit.Once(ctx, task1, fn)
	if ran || err != nil || runs != 1 {
		t.Fatalf("second Once = %v, %v (runs %d); want false, nil, 1 run", ran, err, runs)
	}
	rec := readRecord(t, fs, agentkit.IdempotencyDocID("acme", "task-1-v1"))
	if rec.Status != agentkit.StatusCompleted || rec.CompletedAt.IsZero() ||
		rec.ExpireAt.Sub(rec.CompletedAt) != 72*time.Hour || rec.Agent != "backend" || rec.Tenant != "acme" || rec.Key != "task-1-v1" {
		t.Errorf("completion record = %+v", rec)
	}
}

func TestOnceConcurrentDuplicatesRunOnce(t *testing.T) {
	fs, _ := testenv.Firestore(t)
	ctx := testenv.Context(t)
	kit := agentkit.New(nil, agentkit.WithFirestore(fs))
	var runs atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	results := make([]error, 8)
	ranCount := atomic.Int32{}
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ran, err := kit.Once(ctx, agentkit.Task{Tenant: "acme", Key: "dup-key"}, func(context.Context) error {
				runs.Add(1)
				<-release
				return nil
			})
			if ran {
				ranCount.Add(1)
			}
			results[i] = err
		}()
	}
	// Let the claims race, then let the winner finish.
	time.Sleep(500 * time.Millisecond)
	close(release)
	wg.Wait()
	if runs.Load() != 1 || ranCount.Load() != 1 {
		t.Fatalf("fn ran %d times (%d reported ran), want once", runs.Load(), ranCount.Load())
	}
	for i, err := range results {
		if err != nil && !errors.Is(err, agentkit.ErrInProgress) {
			t.Errorf("duplicate %d: Once = %v, want nil or ErrInProgress", i, err)
		}
	}
}

func TestOnceFailureReleasesClaim(t *testing.T) {
	fs, _ := testenv.Firestore(t)
	ctx := testenv.Context(t)
	kit := agentkit.New(nil, agentkit.WithFirestore(fs))
	boom := errors.New("tool failed")
	ran, err := kit.Once(ctx, taskK, func(context.Context) error { return boom })
	if !ran || !errors.Is(err, boom) {
		t.Fatalf("Once(failing fn) = %v, %v; want true, boom", ran, err)
	}
	ran, err = kit.Once(ctx, taskK, func(context.Context) error { return nil })
	if !ran || err != nil {
		t.Fatalf("Once after a failure = %v, %v; want the retry to run", ran, err)
	}
}

func TestOnceTakesOverAnExpiredClaim(t *testing.T) {
	// A worker that died holding a claim blocks duplicates only until its
	// lease ends; then the redelivery runs fn (the documented double run).
	fs, _ := testenv.Firestore(t)
	ctx := testenv.Context(t)
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	kit := agentkit.New(nil, agentkit.WithFirestore(fs), agentkit.WithClock(clock), agentkit.WithLease(time.Minute))
	_, err := kit.Once(ctx, crash, func(context.Context) error {
		// While this "crashed" attempt holds the claim, a duplicate must wait.
		ran, err := kit.Once(ctx, crash, func(context.Context) error { return nil })
		if ran || !errors.Is(err, agentkit.ErrInProgress) {
			t.Errorf("duplicate during the lease = %v, %v; want ErrInProgress", ran, err)
		}
		now = now.Add(2 * time.Minute)
		ran, err = kit.Once(ctx, crash, func(context.Context) error { return nil })
		if !ran || err != nil {
			t.Errorf("duplicate after the lease = %v, %v; want it to run", ran, err)
		}
		return errors.New("crashed")
	})
	if err == nil {
		t.Fatal("want the crashed attempt's error")
	}
	// The takeover completed; the crashed attempt's release must not undo it.
	ran, err := kit.Once(ctx, crash, func(context.Context) error { return nil })
	if ran || err != nil {
		t.Errorf("Once after the takeover completed = %v, %v; want skipped", ran, err)
	}
}

func TestOnceWithoutFirestore(t *testing.T) {
	_, err := agentkit.New(nil).Once(context.Background(), taskK, func(context.Context) error { return nil })
	if !errors.Is(err, agentkit.ErrNoFirestore) {
		t.Errorf("Once without Firestore = %v, want ErrNoFirestore", err)
	}
}

// Two tenants publish a task with the same id: each runs once. The
// completion record is written before the ack and named by tenant and key,
// so a redelivery (the ack lost) or a second publish of a tenant's task
// finds that tenant's record and is skipped, while the other tenant's task
// finds none and runs.
func TestOnceTwoTenantsSameTaskID(t *testing.T) {
	f := newFixture(t, jetstream.WorkQueuePolicy, false)
	fs, _ := testenv.Firestore(t)
	ctx := testenv.Context(t)
	kit := agentkit.New(f.js, agentkit.WithFirestore(fs), agentkit.WithAgent("backend"))
	runs := map[string]int{}
	for _, tenant := range []string{"acme", "beta", "acme", "beta", ""} {
		hdr := map[string]string{"X-Task-ID": "task-1", "X-Task-Version": "v1"}
		if tenant != "" {
			hdr["X-Tenant-ID"] = tenant
		}
		f.publish(t, "agents.backend.tasks.review", []byte(tenant), hdr)
	}
	type outcome struct {
		Tenant string
		Ran    bool
	}
	// Fetch until every task is settled (acked), not a fixed number of
	// times: the fixture's consumer backs off 100 ms then 200 ms, and a
	// slow machine can let an ack deadline pass, which redelivers a task
	// once more; such a redelivery must be skipped like any other.
	var got []outcome
	acked := map[uint64]bool{}
	for fetched := 0; len(acked) < 5; fetched++ {
		if fetched == 30 {
			t.Fatalf("after %d deliveries, settled %v of 5 tasks", fetched, acked)
		}
		m := f.next(t)
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		task := agentkit.TaskOf(m)
		ran, err := kit.Once(ctx, task, func(context.Context) error { runs[task.Tenant]++; return nil })
		if err != nil {
			t.Fatalf("Once(%+v) = %v", task, err)
		}
		got = append(got, outcome{task.Tenant, ran})
		// The first delivery of each of the first two tasks loses its
		// ack: the redelivery must be skipped.
		if md.NumDelivered == 1 && md.Sequence.Stream <= 2 {
			if err := m.Nak(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
		acked[md.Sequence.Stream] = true
	}
	// Each tenant's task ran exactly once; every other delivery (the two
	// lost acks' redeliveries, the second publish of acme and beta, any
	// redelivery of a late ack) was skipped.
	ranBy, skippedBy := map[string]int{}, map[string]int{}
	for _, o := range got {
		if o.Ran {
			ranBy[o.Tenant]++
		} else {
			skippedBy[o.Tenant]++
		}
	}
	if d := cmp.Diff(map[string]int{"acme": 1, "beta": 1, "default": 1}, ranBy); d != "" {
		t.Errorf("Once ran per tenant (-want +got):\n%s\noutcomes %+v", d, got)
	}
	if skippedBy["acme"] < 2 || skippedBy["beta"] < 2 || skippedBy["default"] != 0 {
		t.Errorf("Once skipped per tenant = %v, want acme and beta at least 2 each (a lost ack, a second publish), default none; outcomes %+v", skippedBy, got)
	}
	if d := cmp.Diff(map[string]int{"acme": 1, "beta": 1, "default": 1}, runs); d != "" {
		t.Errorf("runs per tenant (-want +got):\n%s", d)
	}
	for _, tenant := range []string{"acme", "beta", "default"} {
		if rec := readRecord(t, fs, agentkit.IdempotencyDocID(tenant, "task-1-v1")); rec.Tenant != tenant || rec.Key != "task-1-v1" || !rec.Completed() {
			t.Errorf("%s's record = %+v; want its tenant, the key, completed", tenant, rec)
		}
	}
}

// One tenant's claim does not hold another tenant's task of the same key.
func TestOnceClaimIsTheTenants(t *testing.T) {
	fs, _ := testenv.Firestore(t)
	ctx := testenv.Context(t)
	kit := agentkit.New(nil, agentkit.WithFirestore(fs))
	ran, err := kit.Once(ctx, agentkit.Task{Tenant: "acme", Key: "shared"}, func(ctx context.Context) error {
		// While acme's task holds its claim, beta's runs; acme's own
		// duplicate waits.
		if ran, err := kit.Once(ctx, agentkit.Task{Tenant: "beta", Key: "shared"}, func(context.Context) error { return nil }); !ran || err != nil {
			t.Errorf("beta's Once during acme's claim = %v, %v; want it to run", ran, err)
		}
		if ran, err := kit.Once(ctx, agentkit.Task{Tenant: "acme", Key: "shared"}, func(context.Context) error { return nil }); ran || !errors.Is(err, agentkit.ErrInProgress) {
			t.Errorf("acme's duplicate during its claim = %v, %v; want ErrInProgress", ran, err)
		}
		return nil
	})
	if !ran || err != nil {
		t.Fatalf("acme's Once = %v, %v", ran, err)
	}
}

func TestOnceRefusesInvalidTasks(t *testing.T) {
	fs, _ := testenv.Firestore(t)
	ctx := testenv.Context(t)
	kit := agentkit.New(nil, agentkit.WithFirestore(fs))
	for _, task := range []agentkit.Task{
		{Tenant: "acme"},
		{Key: "k"},
		{Tenant: "ac\xffme", Key: "k"},
		{Tenant: "acme", Key: "k\xfe"},
		{Tenant: " acme", Key: "k"},
		{Tenant: "acme", Key: "k\n"},
	} {
		runs := 0
		ran, err := kit.Once(ctx, task, func(context.Context) error { runs++; return nil })
		if ran || runs != 0 || !errors.Is(err, agentkit.ErrInvalidTask) {
			t.Errorf("Once(%+v) = %v, %v (runs %d); want ErrInvalidTask and no run", task, ran, err, runs)
		}
	}
	docs, err := fs.Collection(agentkit.DefaultIdempotencyCollection).Documents(ctx).GetAll()
	if err != nil || len(docs) != 0 {
		t.Errorf("records after refused tasks: %d, %v; want none", len(docs), err)
	}
}

// Records an older kit wrote under the key alone (no tenant) count while
// the migration window lasts, and only when written at or after the task
// was published: one written before belongs to another task (another
// tenant's, or an earlier one).
func TestOnceHonoursOlderKitsRecords(t *testing.T) {
	fs, _ := testenv.Firestore(t)
	ctx := testenv.Context(t)
	published := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	now := published.Add(10 * time.Minute)
	clock := func() time.Time { return now }
	completed := func(at time.Time) agentkit.IdempotencyRecord {
		return agentkit.IdempotencyRecord{Status: agentkit.StatusCompleted, Agent: "old", CompletedAt: at, ExpireAt: at.Add(72 * time.Hour)}
	}
	claimed := func(at, until time.Time) agentkit.IdempotencyRecord {
		return agentkit.IdempotencyRecord{Status: agentkit.StatusInProgress, Owner: "0123456789abcdef", ClaimedAt: at, LeaseUntil: until, ExpireAt: at.Add(72 * time.Hour)}
	}
	tests := []struct {
		name      string
		old       agentkit.IdempotencyRecord
		published time.Time
		until     time.Time // the window's end (zero: none)
		ran       bool
		err       error
	}{
		{"completed after the publish: done", completed(published.Add(time.Minute)), published, time.Time{}, false, nil},
		{"completed at the publish: done", completed(published), published, time.Time{}, false, nil},
		{"completed before the publish: another task's", completed(published.Add(-time.Microsecond)), published, time.Time{}, true, nil},
		{"publish time unknown: cannot be told", completed(published.Add(time.Minute)), time.Time{}, time.Time{}, true, nil},
		{"live claim after the publish: in progress", claimed(published.Add(5*time.Minute), now.Add(time.Minute)), published, time.Time{}, false, agentkit.ErrInProgress},
		{"live claim before the publish: another task's", claimed(published.Add(-time.Minute), now.Add(time.Minute)), published, time.Time{}, true, nil},
		{"expired claim after the publish: runs", claimed(published.Add(time.Minute), now.Add(-time.Second)), published, time.Time{}, true, nil},
		{"window open a moment longer: done", completed(published.Add(time.Minute)), published, now.Add(time.Nanosecond), false, nil},
		{"window over: not read", completed(published.Add(time.Minute)), published, now, true, nil},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprintf("legacy/%d", i) // hashed by the older kit's mapping
			tc.old.Key = key
			legacy := fs.Collection(agentkit.DefaultIdempotencyCollection).Doc(agentkit.LegacyIdempotencyDocID(key))
			if _, err := legacy.Set(ctx, tc.old); err != nil {
				t.Fatal(err)
			}
			kit := agentkit.New(nil, agentkit.WithFirestore(fs), agentkit.WithClock(clock), agentkit.WithLegacyCompletionsUntil(tc.until))
			task := agentkit.Task{Tenant: "acme", Key: key, PublishedAt: tc.published}
			ran, err := kit.Once(ctx, task, func(context.Context) error { return nil })
			if ran != tc.ran || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Errorf("Once(%+v) = %v, %v; want %v, %v", task, ran, err, tc.ran, tc.err)
			}
			// The older record is only read, never changed.
			if d := cmp.Diff(tc.old, readRecord(t, fs, legacy.ID)); d != "" {
				t.Errorf("the older kit's record changed (-before +after):\n%s", d)
			}
			_, err = fs.Collection(agentkit.DefaultIdempotencyCollection).Doc(task.DocID()).Get(ctx)
			if exists := err == nil; exists != tc.ran {
				t.Errorf("acme's own record exists = %v (%v), want %v", exists, err, tc.ran)
			}
		})
	}
}
