package store_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/store"
)

// newStore is the external tests' fixture: the test's context, a Firestore
// project of its own and a store on it.
func newStore(t *testing.T, opts ...store.Option) (context.Context, *firestore.Client, *store.Store) {
	t.Helper()
	fs, _ := testenv.Firestore(t)
	return testenv.Context(t), fs, store.New(fs, opts...)
}

// lenientBreaker keeps the tenant breaker from holding entries of tests that
// record many failures of one tenant within a minute.
var lenientBreaker = store.WithBreaker(store.BreakerConfig{Threshold: 1000, Window: time.Minute, Cooldown: time.Minute})

// Pages continue exactly after the cursor even when many entries share the
// order field's value (the document id breaks ties), and the last page says
// so (a zero Next).
func TestEntriesPagesEveryEntryOnce(t *testing.T) {
	c := testenv.NewClock(time.Now().UTC())
	ctx, _, s := newStore(t, store.WithClock(c.Now), lenientBreaker)
	at := c.Now().Add(time.Hour)
	want := map[string]bool{}
	for i := range 21 {
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
	var cur store.Cursor
	var due []time.Time
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		p, err := s.Entries(ctx, store.Query{Status: store.Scheduled, Order: store.DueFirst, View: store.ScanView, After: cur, Limit: 7})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Entries {
			if got[e.ID] {
				t.Errorf("entry %s returned twice", e.ID)
			}
			if len(e.Payload) != 0 {
				t.Errorf("scan returned the payload of %s", e.ID)
			}
			got[e.ID] = true
			due = append(due, e.NextRetryAt)
		}
		if p.Next.IsZero() {
			// 21 entries in pages of 7: the third page is full and last.
			if pages != 2 || len(p.Entries) != 7 {
				t.Errorf("last page is page %d with %d entries, want page 2 with 7", pages, len(p.Entries))
			}
			break
		}
		cur = p.Next
	}
	if len(got) != len(want) {
		t.Errorf("scan returned %d scheduled entries, want %d", len(got), len(want))
	}
	if !slices.IsSortedFunc(due, func(a, b time.Time) int { return a.Compare(b) }) {
		t.Errorf("DueFirst returned next_retry_at out of order: %v", due)
	}
	n, err := s.Count(ctx, store.Query{CreatedFrom: c.Now().Add(-time.Minute), CreatedTo: c.Now().Add(time.Minute)})
	if err != nil || n != 22 {
		t.Errorf("Count(created in the last minute) = %d, %v; want 22", n, err)
	}
}

// Every filter selects on its own field, in the order asked for.
func TestEntriesFiltersAndOrder(t *testing.T) {
	c := testenv.NewClock(time.Date(2026, 11, 21, 13, 0, 0, 0, time.UTC))
	ctx, _, s := newStore(t, store.WithClock(c.Now), lenientBreaker)
	start := c.Now()
	rows := []struct {
		id, tenant, category, reason, agent, taskType, taskID, root string
		status                                                      store.Status
	}{
		{"TASKS.1", "a", "transient", "timeout", "x", "summarise", "t1", "", store.Scheduled},
		{"TASKS.2", "a", "poison", "bad_input", "y", "translate", "t2", "", store.Quarantined},
		{"TASKS.3", "b", "transient", "timeout", "x", "summarise", "t3", "TASKS.1", store.Scheduled},
		{"TASKS.4", "b", "poison", "bad_input", "y", "summarise", "t4", "TASKS.1", store.Escalated},
	}
	for _, r := range rows {
		c.Add(time.Minute)
		e := &store.Entry{ID: r.id, EventID: r.id, Stream: "TASKS", Tenant: r.tenant, Category: r.category, ReasonCode: r.reason,
			Agent: r.agent, TaskType: r.taskType, TaskID: r.taskID, RootID: r.root, Status: r.status, Payload: []byte("p")}
		if _, err := s.Record(ctx, e, "test"); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		q    store.Query
		want []string
	}{
		{"all, newest first", store.Query{}, []string{"TASKS.4", "TASKS.3", "TASKS.2", "TASKS.1"}},
		{"oldest first", store.Query{Order: store.OldestFirst}, []string{"TASKS.1", "TASKS.2", "TASKS.3", "TASKS.4"}},
		{"tenant", store.Query{Tenant: "a"}, []string{"TASKS.2", "TASKS.1"}},
		{"status", store.Query{Status: store.Scheduled}, []string{"TASKS.3", "TASKS.1"}},
		{"category", store.Query{Category: "poison"}, []string{"TASKS.4", "TASKS.2"}},
		{"reason", store.Query{Reason: "timeout"}, []string{"TASKS.3", "TASKS.1"}},
		{"agent", store.Query{Agent: "y"}, []string{"TASKS.4", "TASKS.2"}},
		{"task type", store.Query{TaskType: "summarise"}, []string{"TASKS.4", "TASKS.3", "TASKS.1"}},
		{"task id", store.Query{TaskID: "t2"}, []string{"TASKS.2"}},
		{"root id", store.Query{RootID: "TASKS.1"}, []string{"TASKS.4", "TASKS.3", "TASKS.1"}},
		{"tenant and status", store.Query{Tenant: "b", Status: store.Escalated}, []string{"TASKS.4"}},
		{"any of statuses, oldest first", store.Query{Statuses: []store.Status{store.Quarantined, store.Escalated}, Order: store.OldestFirst}, []string{"TASKS.2", "TASKS.4"}},
		{"tenant and any of statuses", store.Query{Tenant: "a", Statuses: []store.Status{store.Quarantined, store.Escalated, store.Scheduled}}, []string{"TASKS.2", "TASKS.1"}},
		{"created range", store.Query{CreatedFrom: start.Add(2 * time.Minute), CreatedTo: start.Add(4 * time.Minute)}, []string{"TASKS.3", "TASKS.2"}},
		{"nothing", store.Query{Tenant: "c"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, view := range []store.View{store.FullView, store.ListView, store.ScanView} {
				q := tc.q
				q.View, q.Limit = view, 10
				p, err := s.Entries(ctx, q)
				if err != nil {
					t.Fatalf("Entries(%+v) = %v", q, err)
				}
				var got []string
				for _, e := range p.Entries {
					got = append(got, e.ID)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" || !p.Next.IsZero() {
					t.Errorf("Entries(%+v) ids mismatch (-want +got):\n%s next %+v", q, diff, p.Next)
				}
			}
			n, err := s.Count(ctx, tc.q)
			if err != nil || n != int64(len(tc.want)) {
				t.Errorf("Count(%+v) = %d, %v; want %d", tc.q, n, err, len(tc.want))
			}
		})
	}

	// A view reads only its fields: a listing has no payload or history,
	// a scan has the history but no payload.
	for _, tc := range []struct {
		view                store.View
		payload, hasHistory bool
	}{{store.FullView, true, true}, {store.ListView, false, false}, {store.ScanView, false, true}} {
		p, err := s.Entries(ctx, store.Query{TaskID: "t1", View: tc.view, Limit: 1})
		if err != nil || len(p.Entries) != 1 {
			t.Fatalf("Entries(view %d) = %+v, %v", tc.view, p, err)
		}
		e := p.Entries[0]
		if (len(e.Payload) > 0) != tc.payload || (len(e.History) > 0) != tc.hasHistory || e.CreatedAt.IsZero() || e.Status != store.Scheduled {
			t.Errorf("Entries(view %d) = payload %q, history %d, created %s, status %s; want payload %v, history %v",
				tc.view, e.Payload, len(e.History), e.CreatedAt, e.Status, tc.payload, tc.hasHistory)
		}
	}

	for _, q := range []store.Query{
		{Limit: 0},
		{Limit: 1, Order: store.DueFirst, CreatedFrom: start},
		{Limit: 1, Order: store.Order(9)},
		{Limit: 1, View: store.View(9)},
		{Limit: 1, Status: store.Scheduled, Statuses: []store.Status{store.Escalated}},
		{Limit: 1, Statuses: []store.Status{"waiting"}},
		{Limit: 1, Statuses: slices.Repeat([]store.Status{store.Escalated}, store.MaxStatuses+1)},
	} {
		if _, err := s.Entries(ctx, q); !errors.Is(err, store.ErrBadQuery) {
			t.Errorf("Entries(%+v) = %v, want ErrBadQuery", q, err)
		}
	}
}

func TestCursorEncoding(t *testing.T) {
	at := time.Date(2026, 11, 21, 13, 4, 5, 123456789, time.UTC)
	for _, c := range []store.Cursor{{}, {At: at, ID: "TASKS.42"}, {At: at, ID: "a%2Fb"}} {
		got, err := store.ParseCursor(c.Encode())
		if err != nil || !got.At.Equal(c.At) || got.ID != c.ID {
			t.Errorf("ParseCursor(%+v.Encode()) = %+v, %v; want it back", c, got, err)
		}
	}
	if got := (store.Cursor{}).Encode(); got != "" {
		t.Errorf("Cursor{}.Encode() = %q, want \"\"", got)
	}
	forged := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, tok := range []string{
		"garbage!",
		forged("1700000000|"),      // no id
		forged("soon|TASKS.1"),     // no time
		forged("1700000000"),       // no separator
		forged("1700000000|a/b"),   // a path, not a document id
		forged("1700000000|%41"),   // not EntryID's encoding
		forged("1700000000|__x__"), // an id Firestore reserves
		forged("1700000000|.."),    // likewise
	} {
		if c, err := store.ParseCursor(tok); !errors.Is(err, store.ErrBadCursor) {
			t.Errorf("ParseCursor(%q) = %+v, %v; want ErrBadCursor", tok, c, err)
		}
	}
}
