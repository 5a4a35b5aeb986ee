package store_test

import (
	"errors"
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
			Examples: []string{"TASKS.1"}, Message: "m", Value: 0.5, Threshold: 0.8, Repair: &audit.Repair{Action: "recreate_task", Planned: 1, Done: 1}}},
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
