package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/store"
)

func TestLeaseHolderExpiryAndState(t *testing.T) {
	c := testenv.NewClock(time.Now().UTC())
	ctx, _, s := newStore(t, store.WithClock(c.Now))

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

// A stored report reads back typed and equal, and the newest by finished_at
// wins; the lease and state documents are never taken for a report.
func TestLatestAudit(t *testing.T) {
	ctx, _, s := newStore(t)
	if r, err := s.LatestAudit(ctx); err != nil || r != nil {
		t.Fatalf("LatestAudit() on an empty store = %+v, %v; want nil, nil", r, err)
	}
	if _, err := s.AcquireLease(ctx, "run", time.Minute); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 21, 13, 0, 0, 0, time.UTC)
	older := &audit.Report{Schema: audit.Schema, RunID: "r1", StartedAt: at, FinishedAt: at.Add(time.Second), Alerts: []string{}}
	newer := &audit.Report{Schema: audit.Schema, RunID: "r2", StartedAt: at.Add(time.Hour), FinishedAt: at.Add(time.Hour + 1500*time.Millisecond),
		Complete: true, Alerts: []string{audit.AlertMissingTask},
		Sections: []*audit.Section{{Name: "tasks", Status: audit.StatusComplete, Counts: map[string]int64{"scheduled": 3}}},
		Findings: []*audit.Finding{{Name: audit.AlertMissingTask, Severity: audit.SevWarning, Alert: true, Section: "tasks", Count: 1,
			Examples: []string{"TASKS.1"}, Message: "m", Value: 0.5, Threshold: 0.8, Repair: &audit.Repair{Action: "recreate_task", RepairTotals: audit.RepairTotals{Planned: 1, Done: 1}}}},
		Repairs: audit.RepairTotals{Planned: 1, Done: 1},
		Tenants: []*audit.TenantHealth{{Tenant: "t", Entries: 4, Recovered: 2, Settled: 3, LastFailure: at, RecoveryRate: 2.0 / 3}},
		Traffic: &audit.Traffic{From: at, To: at.Add(time.Hour), Published: 10, Dead: 1, DLQRate: 0.1,
			Streams: []audit.StreamTraffic{{Stream: "TASKS", LastSeq: 10, Published: 10, Acked: map[string]int64{"c": 9}}}}}
	for _, r := range []*audit.Report{newer, older} {
		if err := s.SaveAudit(ctx, r); err != nil {
			t.Fatalf("SaveAudit(%s) = %v", r.RunID, err)
		}
	}
	got, err := s.LatestAudit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(newer, got); diff != "" {
		t.Errorf("LatestAudit() mismatch (-want +got):\n%s", diff)
	}
}

// Reports list newest first in pages that continue after the last run id,
// as summaries (no findings); GetAudit reads one whole; the lease and state
// documents are never listed, and ids or page tokens that name no report are
// refused.
func TestListAndGetAudits(t *testing.T) {
	ctx, _, s := newStore(t)
	if _, err := s.AcquireLease(ctx, "run", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteAuditState(ctx, "run", map[string]any{"resume": "tasks"}); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 21, 13, 0, 0, 0, time.UTC)
	var want []string // newest first
	for i := range 5 {
		id := fmt.Sprintf("r%d", i)
		r := &audit.Report{Schema: audit.Schema, RunID: id, StartedAt: at.Add(time.Duration(i) * time.Hour), FinishedAt: at.Add(time.Duration(i)*time.Hour + time.Minute),
			Alerts:   []string{audit.AlertMissingTask},
			Findings: []*audit.Finding{{Name: audit.AlertMissingTask, Severity: audit.SevWarning, Alert: true, Section: "tasks", Count: i + 1, Examples: []string{"TASKS.1"}, Message: "m"}}}
		if err := s.SaveAudit(ctx, r); err != nil {
			t.Fatal(err)
		}
		want = append([]string{id}, want...)
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatalf("ListAudits did not end after %d pages: %v", pages, got)
		}
		rs, next, err := s.ListAudits(ctx, 2, after)
		if err != nil {
			t.Fatalf("ListAudits(2, %q) = %v", after, err)
		}
		for _, r := range rs {
			got = append(got, r.RunID)
			if len(r.Findings) != 0 || len(r.Alerts) != 1 || r.FinishedAt.IsZero() {
				t.Errorf("ListAudits summary of %s = %+v, want alerts and times but no findings", r.RunID, r)
			}
		}
		if next == "" {
			break
		}
		after = next
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListAudits pages, run ids (-want +got):\n%s", diff)
	}

	r, err := s.GetAudit(ctx, "r3")
	if err != nil || len(r.Findings) != 1 || r.Findings[0].Count != 4 {
		t.Errorf("GetAudit(r3) = %+v, %v; want its finding counting 4", r, err)
	}
	for _, tc := range []struct {
		id   string
		want error
	}{
		{"nope", store.ErrNotFound},
		{store.AuditLease, store.ErrBadID},
		{store.AuditState, store.ErrBadID},
		{"a/b", store.ErrBadID},
		{"", store.ErrBadID},
	} {
		if _, err := s.GetAudit(ctx, tc.id); !errors.Is(err, tc.want) {
			t.Errorf("GetAudit(%q) = %v, want %v", tc.id, err, tc.want)
		}
	}
	for _, after := range []string{"nope", store.AuditLease, "../x", strings.Repeat("x", 200)} {
		if _, _, err := s.ListAudits(ctx, 2, after); !errors.Is(err, store.ErrBadCursor) {
			t.Errorf("ListAudits(2, %q) = %v, want ErrBadCursor", after, err)
		}
	}
	if _, _, err := s.ListAudits(ctx, 0, ""); !errors.Is(err, store.ErrBadQuery) {
		t.Errorf("ListAudits(0) = %v, want ErrBadQuery", err)
	}
}
