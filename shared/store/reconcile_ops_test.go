package store_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/store"
)

func TestLeaseHolderExpiryAndState(t *testing.T) {
	ctx := testenv.Context(t)
	fs, _ := testenv.Firestore(t)
	c := testenv.NewClock(time.Now().UTC())
	s := store.New(fs, store.WithClock(c.Now))

	if _, err := s.AcquireLease(ctx, "a", time.Minute); err != nil {
		t.Fatalf("AcquireLease(a) = %v", err)
	}
	if _, err := s.AcquireLease(ctx, "a", time.Minute); err != nil {
		t.Errorf("AcquireLease(a) again (its own lease) = %v, want renewed", err)
	}
	held, err := s.AcquireLease(ctx, "b", time.Minute)
	if !errors.Is(err, store.ErrLeaseHeld) || held.Holder != "a" {
		t.Fatalf("AcquireLease(b) = %+v, %v; want ErrLeaseHeld by a", held, err)
	}
	if err := s.WriteAuditState(ctx, "b", map[string]any{"x": 1}); !errors.Is(err, store.ErrLeaseHeld) {
		t.Errorf("WriteAuditState(b) without the lease = %v, want ErrLeaseHeld", err)
	}
	if err := s.WriteAuditState(ctx, "a", map[string]any{"resume": "tasks"}); err != nil {
		t.Errorf("WriteAuditState(a) = %v", err)
	}
	var st struct {
		Resume string `firestore:"resume"`
	}
	if found, err := s.ReadAuditState(ctx, &st); err != nil || !found || st.Resume != "tasks" {
		t.Errorf("ReadAuditState = %v, %v, %+v; want the state a wrote", found, err, st)
	}

	// a's lease expires: b takes over, and a (overrunning) may no longer
	// write the state nor release b's lease.
	c.Add(2 * time.Minute)
	if _, err := s.AcquireLease(ctx, "b", time.Minute); err != nil {
		t.Fatalf("AcquireLease(b) after expiry = %v", err)
	}
	if err := s.WriteAuditState(ctx, "a", map[string]any{"resume": "stale"}); !errors.Is(err, store.ErrLeaseHeld) {
		t.Errorf("WriteAuditState(a) after losing the lease = %v, want ErrLeaseHeld", err)
	}
	if err := s.ReleaseLease(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx, "c", time.Minute); !errors.Is(err, store.ErrLeaseHeld) {
		t.Errorf("AcquireLease(c) after a released = %v, want b's lease still held", err)
	}
	if err := s.ReleaseLease(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx, "c", time.Minute); err != nil {
		t.Errorf("AcquireLease(c) after b released = %v", err)
	}
}

// Pages continue exactly after the cursor even when many entries share the
// order field's value (the document id breaks ties).
func TestScanStatusPagesEveryEntryOnce(t *testing.T) {
	ctx := testenv.Context(t)
	fs, _ := testenv.Firestore(t)
	c := testenv.NewClock(time.Now().UTC())
	s := store.New(fs, store.WithClock(c.Now), store.WithBreaker(store.BreakerConfig{Threshold: 1000, Window: time.Minute, Cooldown: time.Minute}))
	at := c.Now().Add(time.Hour)
	want := map[string]bool{}
	for i := range 25 {
		id := fmt.Sprintf("TASKS.%d", i)
		e := &store.Entry{ID: id, EventID: id, Stream: "TASKS", StreamSeq: int64(i + 1), Tenant: "t", Kind: "max_deliver",
			Status: store.Scheduled, NextRetryAt: at.Add(time.Duration(i%3) * time.Second), Payload: []byte("x")}
		if _, err := s.Record(ctx, e, "test"); err != nil {
			t.Fatal(err)
		}
		want[id] = true
	}
	if _, err := s.Record(ctx, &store.Entry{ID: "TASKS.99", Tenant: "t", Status: store.Escalated, Payload: []byte("x")}, "test"); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	var cur store.PageCursor
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		page, next, err := s.ScanStatus(ctx, store.Scheduled, cur, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			if got[e.ID] {
				t.Errorf("entry %s returned twice", e.ID)
			}
			if len(e.Payload) != 0 {
				t.Errorf("scan returned the payload of %s", e.ID)
			}
			got[e.ID] = true
		}
		if len(page) < 7 {
			break
		}
		cur = next
	}
	if len(got) != len(want) {
		t.Errorf("scan returned %d scheduled entries, want %d", len(got), len(want))
	}
	n, err := s.CountCreated(ctx, c.Now().Add(-time.Minute), c.Now().Add(time.Minute))
	if err != nil || n != 26 {
		t.Errorf("CountCreated = %d, %v; want 26", n, err)
	}
}

func TestRewriteHourReplacesEveryShard(t *testing.T) {
	ctx := testenv.Context(t)
	fs, _ := testenv.Firestore(t)
	s := store.New(fs)
	at := time.Now().UTC().Add(-3 * time.Hour)
	hour := store.Hour(at)
	for i := range 5 {
		if err := s.AddMetrics(ctx, at, fmt.Sprint("k", i), store.Metrics{Total: 1, ByTenant: map[string]int64{"a": 1}, ReplaysPublished: 1}); err != nil {
			t.Fatal(err)
		}
	}
	want := store.Metrics{Total: 3, ByTenant: map[string]int64{"a": 2, "b": 1}}
	ok, err := s.RewriteHour(ctx, hour, func(cur store.Metrics) (store.Metrics, bool) {
		if cur.Total != 5 {
			t.Errorf("fix saw total %d, want the sum of all shards, 5", cur.Total)
		}
		w := want
		w.ReplaysPublished = cur.ReplaysPublished
		return w, true
	})
	if err != nil || !ok {
		t.Fatalf("RewriteHour = %v, %v", ok, err)
	}
	got, err := s.ReadMetrics(ctx, hour)
	if err != nil || got.Total != 3 || got.ByTenant["a"] != 2 || got.ByTenant["b"] != 1 || got.ReplaysPublished != 5 {
		t.Errorf("after rewrite ReadMetrics = %+v, %v; want total 3, a 2, b 1, published kept at 5", got, err)
	}
	ok, err = s.RewriteHour(ctx, hour, func(store.Metrics) (store.Metrics, bool) { return store.Metrics{}, false })
	if err != nil || ok {
		t.Errorf("RewriteHour declined = %v, %v; want nothing written", ok, err)
	}
}

func TestCompletedKeysIgnoresClaims(t *testing.T) {
	ctx := testenv.Context(t)
	fs, _ := testenv.Firestore(t)
	s := store.New(fs)
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
