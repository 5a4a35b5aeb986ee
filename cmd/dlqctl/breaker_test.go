package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/store"
)

// TestBreakerOverrides opens acme's breaker (its replays are held) and uses
// the two explicit ways past it, each with an actor and a reason: the
// override is in the breaker's history (dlqctl breaker show) and, for the
// probe, in the entry's (dlqctl show). Another tenant's caller sees neither
// the breaker nor the entry.
func TestBreakerOverrides(t *testing.T) {
	e := newEnv(t)
	e.openBreaker("acme")
	// Scheduled while the breaker is open: classify holds them.
	e.seed(seed{id: "H.1", tenant: "acme", agent: "backend", category: "transient", reason: "timeout", status: store.Scheduled},
		seed{id: "H.2", tenant: "acme", agent: "backend", category: "transient", reason: "timeout", status: store.Scheduled},
		seed{id: "G.1", tenant: "globex", agent: "backend", category: "transient", reason: "timeout", status: store.Scheduled})
	for _, id := range []string{"H.1", "H.2"} {
		if got := e.entry(id); got.Status != store.Held {
			t.Fatalf("%s with acme's breaker open = %s, want held", id, got.Status)
		}
	}

	code, out, stderr := e.run(nil, "breaker", "ls")
	if code != 0 || !strings.Contains(out, "acme") || !strings.Contains(out, "open") || strings.Contains(out, "globex") {
		t.Errorf("breaker ls = %d %q %q, want acme open only", code, out, stderr)
	}
	code, out, _ = e.run(nil, "breaker", "ls", "--json")
	var ls struct{ Breakers []breakerJSON }
	if err := json.Unmarshal([]byte(out), &ls); code != 0 || err != nil || len(ls.Breakers) != 1 || ls.Breakers[0].Held != 2 || ls.Breakers[0].State != store.BreakerOpen {
		t.Errorf("breaker ls --json = %d %s (%v), want acme open with 2 held", code, out, err)
	}
	if code, out, _ := e.run(nil, "breaker", "show", "acme"); code != 0 || !strings.Contains(out, "open since") || !strings.Contains(out, "held      2 entries") {
		t.Errorf("breaker show acme = %d:\n%s", code, out)
	}

	// globex's caller: acme's breaker and entries do not exist for it.
	globex := map[string]string{"DLQCTL_TENANT": "globex"}
	for _, args := range [][]string{
		{"breaker", "show", "acme"},
		{"breaker", "close", "acme", "--reason", "not mine"},
		{"breaker", "probe", "H.1", "--reason", "not mine"},
	} {
		if code, _, stderr := e.run(globex, args...); code != exitNotFound || stderr == "" {
			t.Errorf("globex: dlqctl %v = %d %q, want %d", args, code, stderr, exitNotFound)
		}
	}
	if code, out, _ := e.run(globex, "breaker", "ls"); code != 0 || strings.Contains(out, "acme") {
		t.Errorf("globex: breaker ls = %d %q, want no acme", code, out)
	}
	if got := e.entry("H.1"); got.Status != store.Held || len(got.History) != 1 {
		t.Errorf("H.1 after globex's attempts: %s, %d transitions; want untouched", got.Status, len(got.History))
	}

	// Overrides need a reason.
	for _, args := range [][]string{{"breaker", "probe", "H.1"}, {"breaker", "close", "acme"}, {"breaker", "close"}, {"breaker", "frob"}, {"breaker"}} {
		if code, _, _ := e.run(nil, args...); code != exitUsage {
			t.Errorf("dlqctl %v = %d, want %d", args, code, exitUsage)
		}
	}

	// The probe: H.1 gets a task now as the half-open breaker's one probe.
	code, out, stderr = e.run(nil, "breaker", "probe", "H.1", "--reason", "dependency fixed", "--by", "alice")
	if code != 0 || !strings.Contains(out, "H.1: the half-open probe") {
		t.Fatalf("breaker probe = %d %q %q", code, out, stderr)
	}
	if got := e.entry("H.1"); got.Status != store.Scheduled || !got.BreakerProbe {
		t.Errorf("H.1 after the probe: %s probe %v, want scheduled as the probe", got.Status, got.BreakerProbe)
	}
	if code, out, _ := e.run(nil, "show", "H.1"); code != 0 || !strings.Contains(out, "held -> scheduled  by alice (approver)  breaker probe sent by alice (approver): dependency fixed") {
		t.Errorf("show H.1 lacks the probe in its history (%d):\n%s", code, out)
	}
	code, out, _ = e.run(nil, "breaker", "show", "acme")
	if code != 0 || !strings.Contains(out, "half-open since") || !strings.Contains(out, "probe     H.1") ||
		!strings.Contains(out, "open -> half_open  by alice (approver)  probe H.1 sent by alice (approver): dependency fixed") {
		t.Errorf("breaker show after the probe (%d):\n%s", code, out)
	}
	e.waitDispatchedOnce(1)

	// The close, by acme's own caller: its history says who and why.
	acme := map[string]string{"DLQCTL_TENANT": "acme", "DLQCTL_ACTOR": "bob"}
	if code, out, stderr := e.run(acme, "breaker", "close", "acme", "--reason", "probe looked fine"); code != 0 || !strings.Contains(out, "closed; 1 held entries") {
		t.Fatalf("acme: breaker close = %d %q %q", code, out, stderr)
	}
	code, out, _ = e.run(acme, "breaker", "show", "acme")
	if code != 0 || !strings.Contains(out, "closed: replays go through") || !strings.Contains(out, "half_open -> closed  by bob (approver)  closed by bob (approver): probe looked fine") {
		t.Errorf("breaker show after the close (%d):\n%s", code, out)
	}
	b, err := e.st.GetBreaker(testenv.Context(t), "acme")
	if err != nil || b.State != store.BreakerClosed {
		t.Errorf("acme's breaker = %+v, %v; want closed", b, err)
	}
	// Nothing left to override: a conflict.
	if code, _, stderr := e.run(acme, "breaker", "close", "acme", "--reason", "again"); code != exitConflict || !strings.Contains(stderr, "closed") {
		t.Errorf("close of a closed breaker = %d %q, want %d", code, stderr, exitConflict)
	}
	if code, out, _ := e.run(nil, "breaker", "ls"); code != 0 || !strings.Contains(out, "no breaker is open") {
		t.Errorf("breaker ls after the close = %d %q", code, out)
	}
	// The other held entry stays held: closing releases nothing by itself
	// (reconcile does), and redrive never does.
	if got := e.entry("H.2"); got.Status != store.Held {
		t.Errorf("H.2 after the close = %s, want held until reconcile releases it", got.Status)
	}
}
