package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// What the Firestore client cannot send (a string that is not UTF-8, an id
// with a '/') is refused before any I/O: the store here reads a Firestore
// that never answers, so a query that reached it would hang. Such a query
// used to be retried inside the client until the caller gave up.
func TestMalformedQueriesAndIDsAreRefusedBeforeFirestore(t *testing.T) {
	st := store.New(testenv.BlackHoleFirestore(t))
	ctx := testenv.Context(t)
	for _, q := range []store.Query{
		{Tenant: "acme\xff"}, {Agent: "\xfe"}, {TaskType: "t\xff"}, {Category: "\xff"}, {Reason: "\xc3"},
		{TaskID: "\xff"}, {RootID: "\xff"}, {Tenant: strings.Repeat("t", store.MaxIDBytes+1)},
	} {
		q.Limit = 1
		if _, err := st.Entries(ctx, q); !errors.Is(err, store.ErrBadQuery) {
			t.Errorf("Entries(%+v) = %v, want ErrBadQuery", q, err)
		}
		if _, err := st.Count(ctx, q); !errors.Is(err, store.ErrBadQuery) {
			t.Errorf("Count(%+v) = %v, want ErrBadQuery", q, err)
		}
	}
	for _, id := range []string{"", "a/b", "\xff", "TASKS.1%", "%41", strings.Repeat("a", store.MaxIDBytes+1)} {
		if _, err := st.GetMeta(ctx, id); !errors.Is(err, store.ErrBadID) {
			t.Errorf("GetMeta(%q) = %v, want ErrBadID", id, err)
		}
	}
	if _, err := st.GetAudit(ctx, "run\xff"); !errors.Is(err, store.ErrBadID) {
		t.Errorf("GetAudit(not UTF-8) = %v, want ErrBadID", err)
	}
}

// The advisory of a message whose explicit record names an invalid tenant
// arrives first (no headers: the default tenant); the record moves the
// entry to the reserved tenant and brings the names it carried, counted
// once, under the reserved tenant only. A redelivery changes nothing.
func TestRecordUnderTheReservedTenantMergesTheInvalidNames(t *testing.T) {
	ctx, fs, st := newStore(t)
	c := event.DefaultConventions
	now := time.Now().UTC()
	adv := event.Event{Schema: event.Schema, ID: event.ID("TASKS", 9), Kind: event.KindTerminated, Stream: "TASKS", StreamSeq: 9,
		Tenant: c.Tenant(nil), ObservedAt: now,
		Advisory: &event.Advisory{Type: event.AdvisoryTerminated, Stream: "TASKS", StreamSeq: 9, Consumer: "w", Timestamp: now}}
	adv.Message.SetMissing(event.MissingNotFound)
	rec := event.Record{Meta: event.RecordMeta{Schema: event.RecordSchema, Stream: "TASKS", StreamSeq: 9, Subject: "agents.a.tasks.t",
		PublishedAt: now, Failure: event.Failure{Code: "impossible_task"}},
		Headers: map[string][]string{event.HeaderTenant: {"acme\u202e"}, event.HeaderIdempotencyKey: {"k1"}}, Data: []byte("{}")}.Event(c, now)
	id, err := store.EntryID(adv.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []event.Event{adv, rec, rec} {
		headers, err := event.DecodeHeaders(ev.Message.Headers)
		if err != nil {
			t.Fatal(err)
		}
		e := store.NewEntry(id, ev, headers, c)
		e.Category, e.ReasonCode, e.Action, e.Status = "permanent", "impossible_task", "escalate", store.Escalated
		if _, err := st.Record(ctx, e, "classify"); err != nil {
			t.Fatalf("Record(%s) = %v", ev.Kind, err)
		}
	}
	got, err := st.GetMeta(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	want := []event.InvalidName{{Field: "tenant", Value: "acme\u202e", Size: 7, Problem: `tenant "acme\u202e" holds the invisible or control character U+202E`}}
	if got.Tenant != event.ReservedTenant || !cmp.Equal(got.InvalidNames, want) {
		t.Errorf("entry under %q flagged %+v, want %s with %+v", got.Tenant, got.InvalidNames, event.ReservedTenant, want)
	}
	// The agent's kit records the task's completion under the tenant its
	// header names: the scan of reconcile (a projection) finds it there.
	if got.TaskTenant != "acme\u202e" {
		t.Errorf("TaskTenant = %q, want the header's tenant", got.TaskTenant)
	}
	if _, err := fs.Collection(store.TaskIdempotency).Doc(agentkit.IdempotencyDocID("acme\u202e", "k1")).Set(ctx,
		agentkit.IdempotencyRecord{Key: "k1", Tenant: "acme\u202e", Status: agentkit.StatusCompleted, CompletedAt: now, ExpireAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	page, err := st.Entries(ctx, store.Query{Tenant: event.ReservedTenant, View: store.ScanView, Limit: 10})
	if err != nil || len(page.Entries) != 1 {
		t.Fatalf("Entries(reserved tenant) = %d entries, %v", len(page.Entries), err)
	}
	if done, err := st.Completions(ctx, page.Entries); err != nil || !done[id].Done {
		t.Errorf("Completions(the flagged entry) = %+v, %v, want the kit's record of tenant %q", done, err, "acme\u202e")
	}
	m, err := st.ReadMetrics(ctx, store.Hour(got.CreatedAt))
	if err != nil {
		t.Fatal(err)
	}
	if m.Total != 1 || m.ByTenant[event.ReservedTenant] != 1 || m.ByTenant[event.DefaultTenant] != 0 {
		t.Errorf("metrics total %d by tenant %v, want the one entry under %s", m.Total, m.ByTenant, event.ReservedTenant)
	}
}
