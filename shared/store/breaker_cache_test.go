package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/authority"
)

// TestRecordKnownOpenBreaker: once an instance has seen a tenant's breaker
// open, further entries of the tenant are held without reading or writing
// the breaker document (the one-tenant storm's hot spot), with the same
// outcome the document would give: held until the cooldown ends, then the
// half-open probe. Another instance, without the cache, decides the same
// from the document.
func TestRecordKnownOpenBreaker(t *testing.T) {
	s, c := newStore(t)
	other := New(s.fs, WithClock(c.Now))
	ctx := testenv.Context(t)
	record := func(st *Store, i int) (*Entry, Ops) {
		t.Helper()
		before := st.Ops()
		res, err := st.Record(ctx, entry(fmt.Sprintf("TASKS.%d", i), nil), "classify")
		if err != nil {
			t.Fatalf("Record(%d) = %v", i, err)
		}
		after := st.Ops()
		return res.Entry, Ops{Reads: after.Reads - before.Reads, Writes: after.Writes - before.Writes}
	}
	for i := 1; i <= DefaultBreaker.Threshold; i++ {
		record(s, i)
	}
	opened, err := s.GetBreaker(ctx, "acme")
	if err != nil || opened.State != BreakerOpen {
		t.Fatalf("GetBreaker() = %+v, %v, want open after %d failures", opened, err, DefaultBreaker.Threshold)
	}
	for i := 11; i <= 20; i++ {
		c.Add(time.Second)
		e, ops := record(s, i)
		if e.Status != Held {
			t.Errorf("entry %d = %s, want held", i, e.Status)
		}
		// The entry, its metrics shard, its day rollup shard and its
		// row of the change feed.
		if ops != (Ops{Reads: 0, Writes: 4}) {
			t.Errorf("Record(%d) with the breaker known open cost %+v, want 0 reads and 4 writes", i, ops)
		}
	}
	if e, ops := record(other, 21); e.Status != Held || ops != (Ops{Reads: 1, Writes: 5}) {
		t.Errorf("another instance: entry 21 = %s at %+v, want held at 1 read and 5 writes", e.Status, ops)
	}
	b, err := s.GetBreaker(ctx, "acme")
	if err != nil || !b.UpdatedAt.Equal(c.Now()) || b.OpenedAt != opened.OpenedAt {
		t.Errorf("breaker after the cached entries = %+v, %v; want it written only by the other instance", b, err)
	}
	c.Add(DefaultBreaker.Cooldown)
	if e, ops := record(s, 22); !e.BreakerProbe || e.Status != Scheduled || ops.Reads != 1 {
		t.Errorf("entry 22 after the cooldown = %s probe=%v at %+v, want the scheduled half-open probe read from the document", e.Status, e.BreakerProbe, ops)
	}
	if e, _ := record(s, 23); e.Status != Held {
		t.Errorf("entry 23 while the probe runs = %s, want held", e.Status)
	}
	m, err := s.ReadMetrics(ctx, Hour(c.Now()))
	if err != nil || m.Total != 23 {
		t.Errorf("ReadMetrics() total = %d, %v, want 23 (each entry counted once)", m.Total, err)
	}
}

// An operator can close an open breaker at any moment, on another
// instance: an instance that saw it open holds the tenant's new entries
// for at most KnownOpenFor after it last read it, then reads it again and
// schedules them. It trusted the cache until the cooldown ended, holding
// every entry (and counting none of its failures) for up to 15 minutes.
func TestKnownOpenBreakerClosedByAnOperator(t *testing.T) {
	s, c := newStore(t)
	ops := New(s.fs, WithClock(c.Now))
	ctx := testenv.Context(t)
	for i := 1; i <= DefaultBreaker.Threshold; i++ {
		if _, err := s.Record(ctx, entry(fmt.Sprintf("TASKS.%d", i), nil), "classify"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ops.BreakerClose(ctx, "acme", authority.Actor{Name: "alice", Role: authority.Operator}, "provider is back"); err != nil {
		t.Fatal(err)
	}
	c.Add(KnownOpenFor - time.Second)
	if res, err := s.Record(ctx, entry("TASKS.100", nil), "classify"); err != nil || res.Entry.Status != Held {
		t.Errorf("entry within KnownOpenFor of the last read = %+v, %v, want held (the bound the cache allows)", res.Entry, err)
	}
	c.Add(2 * time.Second)
	if res, err := s.Record(ctx, entry("TASKS.101", nil), "classify"); err != nil || res.Entry.Status != Scheduled {
		t.Errorf("entry after KnownOpenFor = %+v, %v, want scheduled: the operator closed the breaker", res.Entry, err)
	}
}
