package agentkit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
)

func TestOnceRunsOnceAcrossRedeliveries(t *testing.T) {
	fs, _ := testenv.Firestore(t)
	ctx := testenv.Context(t)
	kit := agentkit.New(nil, agentkit.WithFirestore(fs), agentkit.WithAgent("backend"))
	runs := 0
	fn := func(context.Context) error { runs++; return nil }
	ran, err := kit.Once(ctx, "task-1-v1", fn)
	if !ran || err != nil {
		t.Fatalf("first Once = %v, %v; want true, nil", ran, err)
	}
	// A redelivery (the ack was lost) or a replay finds it completed.
	ran, err = kit.Once(ctx, "task-1-v1", fn)
	if ran || err != nil || runs != 1 {
		t.Fatalf("second Once = %v, %v (runs %d); want false, nil, 1 run", ran, err, runs)
	}
	snap, err := fs.Collection("task-idempotency").Doc("task-1-v1").Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rec agentkit.IdempotencyRecord
	if err := snap.DataTo(&rec); err != nil {
		t.Fatal(err)
	}
	if rec.Status != agentkit.StatusCompleted || rec.CompletedAt.IsZero() ||
		rec.ExpireAt.Sub(rec.CompletedAt) != 72*time.Hour || rec.Agent != "backend" {
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
			ran, err := kit.Once(ctx, "dup-key", func(context.Context) error {
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
	ran, err := kit.Once(ctx, "k", func(context.Context) error { return boom })
	if !ran || !errors.Is(err, boom) {
		t.Fatalf("Once(failing fn) = %v, %v; want true, boom", ran, err)
	}
	ran, err = kit.Once(ctx, "k", func(context.Context) error { return nil })
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
	_, err := kit.Once(ctx, "crash", func(context.Context) error {
		// While this "crashed" attempt holds the claim, a duplicate must wait.
		ran, err := kit.Once(ctx, "crash", func(context.Context) error { return nil })
		if ran || !errors.Is(err, agentkit.ErrInProgress) {
			t.Errorf("duplicate during the lease = %v, %v; want ErrInProgress", ran, err)
		}
		now = now.Add(2 * time.Minute)
		ran, err = kit.Once(ctx, "crash", func(context.Context) error { return nil })
		if !ran || err != nil {
			t.Errorf("duplicate after the lease = %v, %v; want it to run", ran, err)
		}
		return errors.New("crashed")
	})
	if err == nil {
		t.Fatal("want the crashed attempt's error")
	}
	// The takeover completed; the crashed attempt's release must not undo it.
	ran, err := kit.Once(ctx, "crash", func(context.Context) error { return nil })
	if ran || err != nil {
		t.Errorf("Once after the takeover completed = %v, %v; want skipped", ran, err)
	}
}

func TestOnceWithoutFirestore(t *testing.T) {
	_, err := agentkit.New(nil).Once(context.Background(), "k", func(context.Context) error { return nil })
	if !errors.Is(err, agentkit.ErrNoFirestore) {
		t.Errorf("Once without Firestore = %v, want ErrNoFirestore", err)
	}
}
