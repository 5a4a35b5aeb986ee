package store

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/authority"
)

// The states not closed are every state but closed, each once, so a list
// of them is every breaker that holds replays back; ListBreakers answers
// for each state list with exactly the breakers in those states.
func TestBreakerStates(t *testing.T) {
	all, notClosed := BreakerStates(), BreakerStatesNotClosed()
	if want := []string{BreakerOpen, BreakerHalfOpen, BreakerClosed}; !cmp.Equal(all, want) {
		t.Errorf("BreakerStates() = %v, want %v", all, want)
	}
	if want := slices.DeleteFunc(slices.Clone(all), func(s string) bool { return s == BreakerClosed }); !cmp.Equal(notClosed, want) {
		t.Errorf("BreakerStatesNotClosed() = %v, want %v (every state but closed)", notClosed, want)
	}
	// A caller that changes its slice changes no one else's.
	notClosed[0] = BreakerClosed
	if got := BreakerStatesNotClosed(); got[0] != BreakerOpen {
		t.Errorf("BreakerStatesNotClosed() after a caller changed its copy = %v, want %s first", got, BreakerOpen)
	}

	s, _ := newStore(t)
	ctx := testenv.Context(t)
	for _, tenant := range []string{"open", "probing", "calm"} {
		openBreaker(t, s, tenant)
	}
	if _, err := s.BreakerProbeNow(ctx, "probing", "TASKS.probing-1", authority.Actor{Name: "alice", Role: authority.Operator}, "provider is back"); err != nil {
		t.Fatalf("BreakerProbeNow(probing) = %v", err)
	}
	if _, err := s.BreakerClose(ctx, "calm", authority.Actor{Name: "alice", Role: authority.Operator}, "incident over"); err != nil {
		t.Fatalf("BreakerClose(calm) = %v", err)
	}
	tests := []struct {
		name   string
		states []string
		want   map[string]string
	}{
		{"not closed", BreakerStatesNotClosed(), map[string]string{"open": BreakerOpen, "probing": BreakerHalfOpen}},
		{"all", BreakerStates(), map[string]string{"open": BreakerOpen, "probing": BreakerHalfOpen, "calm": BreakerClosed}},
	}
	for _, tt := range tests {
		list, err := s.ListBreakers(ctx, tt.states, 10)
		if err != nil {
			t.Fatalf("ListBreakers(%s) = %v", tt.name, err)
		}
		got := map[string]string{}
		for _, b := range list {
			got[b.Tenant] = b.State
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ListBreakers(%s) tenants and states mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
}
