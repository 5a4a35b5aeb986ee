package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/authority"
)

// openBreaker records Threshold failures of tenant, which opens its breaker.
func openBreaker(t *testing.T, s *Store, tenant string) {
	t.Helper()
	ctx := testenv.Context(t)
	for i := 1; i <= DefaultBreaker.Threshold; i++ {
		e := entry(fmt.Sprintf("TASKS.%s-%d", tenant, i), nil)
		e.Tenant = tenant
		if _, err := s.Record(ctx, e, "classify"); err != nil {
			t.Fatalf("Record(%s) = %v", e.ID, err)
		}
	}
	if b, err := s.GetBreaker(ctx, tenant); err != nil || b.State != BreakerOpen {
		t.Fatalf("GetBreaker(%s) = %+v, %v, want open", tenant, b, err)
	}
}

// The two overrides of an open breaker need an actor and a reason, and the
// breaker's history says who did what and why.
func TestBreakerOverrides(t *testing.T) {
	s, _ := newStore(t)
	ctx := testenv.Context(t)
	openBreaker(t, s, "acme")

	alice := authority.Actor{Name: "alice", Role: authority.Operator}
	bob := authority.Actor{Name: "bob", Role: authority.Approver}
	for _, tc := range []struct {
		by     authority.Actor
		reason string
	}{{authority.Actor{Role: authority.Operator}, "x"}, {alice, " "}} {
		if _, err := s.BreakerClose(ctx, "acme", tc.by, tc.reason); !errors.Is(err, ErrBreakerOverride) {
			t.Errorf("BreakerClose(by %q, reason %q) = %v, want ErrBreakerOverride", tc.by, tc.reason, err)
		}
		if _, err := s.BreakerProbeNow(ctx, "acme", "TASKS.acme-1", tc.by, tc.reason); !errors.Is(err, ErrBreakerOverride) {
			t.Errorf("BreakerProbeNow(by %q, reason %q) = %v, want ErrBreakerOverride", tc.by, tc.reason, err)
		}
	}
	b, err := s.BreakerProbeNow(ctx, "acme", "TASKS.acme-3", alice, "provider is back")
	if err != nil || b.State != BreakerHalfOpen || b.ProbeEntry != "TASKS.acme-3" {
		t.Fatalf("BreakerProbeNow() = %+v, %v, want half-open with probe TASKS.acme-3", b, err)
	}
	if last := b.History[len(b.History)-1]; last.Actor() != alice || !strings.Contains(last.Note, "alice (operator): provider is back") {
		t.Errorf("breaker history after the probe = %+v, want alice as an operator, and her reason", last)
	}
	if ok, probe, err := s.BreakerAdmit(ctx, "acme", "TASKS.acme-3", "replay"); !ok || !probe || err != nil {
		t.Errorf("BreakerAdmit(the probe) = %v, %v, %v, want admitted as the probe", ok, probe, err)
	}
	if ok, _, err := s.BreakerAdmit(ctx, "acme", "TASKS.acme-4", "replay"); ok || err != nil {
		t.Errorf("BreakerAdmit(another entry) = %v, %v, want held", ok, err)
	}
	b, err = s.BreakerClose(ctx, "acme", bob, "incident closed")
	if err != nil || b.State != BreakerClosed {
		t.Fatalf("BreakerClose() = %+v, %v, want closed", b, err)
	}
	if last := b.History[len(b.History)-1]; last.Actor() != bob || !strings.Contains(last.Note, "closed by bob (approver): incident closed") {
		t.Errorf("breaker history after the close = %+v, want bob as an approver, and his reason", last)
	}
	if _, err := s.BreakerClose(ctx, "acme", bob, "again"); !errors.Is(err, ErrBreakerOverride) {
		t.Errorf("BreakerClose(closed) = %v, want ErrBreakerOverride", err)
	}
}

// A half-open probe whose outcome never arrives is settled after the
// timeout (the clock is the test's): with its completion visible the
// breaker closes; a keyed probe without one counts as died and reopens it;
// a probe without a key that did not die closes it.
func TestSettleProbe(t *testing.T) {
	tests := []struct {
		name      string
		key       string
		completed bool
		published bool // replayed, not only admitted
		want      string
		state     string
	}{
		{"keyed, never completed", "k-never", false, true, ProbeDied, BreakerOpen},
		{"keyed, completed", "k-done", true, true, ProbeRecovered, BreakerClosed},
		{"no idempotency key, published and not dead", "", false, true, ProbeRecovered, BreakerClosed},
		// Admitted, then never published (held back, escalated, its
		// publish still failing): nothing shows the tenant recovered.
		{"no idempotency key, never published", "", false, false, ProbeDied, BreakerOpen},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c := newStore(t)
			ctx := testenv.Context(t)
			tenant := fmt.Sprintf("tenant-%d", i)
			openBreaker(t, s, tenant)
			probe := entry("TASKS."+tenant+"-probe", nil)
			probe.Tenant, probe.IdempotencyKey = tenant, tt.key
			c.Add(DefaultBreaker.Cooldown)
			res, err := s.Record(ctx, probe, "classify")
			if err != nil || !res.Entry.BreakerProbe {
				t.Fatalf("Record(probe) = %+v, %v, want the half-open probe", res.Entry, err)
			}
			if tt.published {
				for _, step := range [][2]Status{{Scheduled, Replaying}, {Replaying, Replayed}} {
					if _, err := s.Transition(ctx, probe.ID, Change{From: []Status{step[0]}, To: step[1], By: "replay"}); err != nil {
						t.Fatalf("Transition(%s -> %s) = %v", step[0], step[1], err)
					}
				}
			}
			if tt.completed {
				now := c.Now()
				if _, err := s.fs.Collection(TaskIdempotency).Doc(agentkit.IdempotencyDocID(tenant, tt.key)).Set(ctx, agentkit.IdempotencyRecord{
					Key: tt.key, Tenant: tenant, Status: agentkit.StatusCompleted, CompletedAt: now, ExpireAt: now.Add(72 * time.Hour)}); err != nil {
					t.Fatal(err)
				}
			}
			c.Add(DefaultProbeTimeout - time.Second)
			if got, err := s.SettleProbe(ctx, tenant, DefaultProbeTimeout, "reconcile"); got != "" || err != nil {
				t.Errorf("SettleProbe() before the timeout = %q, %v, want nothing settled", got, err)
			}
			c.Add(time.Second)
			got, err := s.SettleProbe(ctx, tenant, DefaultProbeTimeout, "reconcile")
			if got != tt.want || err != nil {
				t.Errorf("SettleProbe() = %q, %v, want %q", got, err, tt.want)
			}
			b, _ := s.GetBreaker(ctx, tenant)
			if b.State != tt.state {
				t.Errorf("breaker after settling = %s, want %s", b.State, tt.state)
			}
			// Settling again finds nothing to settle: a retried reconcile run changes nothing.
			if got, err := s.SettleProbe(ctx, tenant, DefaultProbeTimeout, "reconcile"); got != "" || err != nil {
				t.Errorf("SettleProbe() again = %q, %v, want nothing", got, err)
			}
		})
	}
}
