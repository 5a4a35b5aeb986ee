package authority_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// The rule itself, role × rule × action, over the default policy's grants:
// the rules that keep their entries for approvers (governance, poison,
// unknown commit state), a rule of any other category, a rule that grants
// tenants explicitly, and no rule at all (a breaker or redrive action).
func TestMay(t *testing.T) {
	p := triage.Default()
	grants := map[string]authority.Grant{
		"governance":   p.Grant("governance", triage.Governance),
		"poison":       p.Grant("poison", triage.Poison),
		"poison-chain": p.Grant("poison-chain", triage.Poison),
		"commit-state": p.Grant("commit-state", triage.UnknownCommitState),
		"uncertain":    p.Grant("uncertain-side-effects", triage.UnknownCommitState),
		"permanent":    p.Grant("permanent", triage.Permanent),
		"predicted":    p.Grant("predicted-failure", triage.ConditionallyRecoverable),
		// A rule the policy does not have: its category decides.
		"gone governance": p.Grant("renamed-since", triage.Governance),
		"gone permanent":  p.Grant("renamed-since", triage.Permanent),
		"tenants granted": {Rule: "self-service", Approvers: []authority.Role{authority.Tenant}},
		"operators only":  {Rule: "ops", Approvers: []authority.Role{authority.Operator}},
		"none":            {},
	}
	const (
		yes = true
		no  = false
	)
	tests := []struct {
		role   authority.Role
		act    authority.Action
		grant  string
		want   bool
		needed string // the roles a refusal names
	}{
		// Approve: the rule decides, approver always may.
		{authority.Approver, authority.Approve, "governance", yes, ""},
		{authority.Approver, authority.Approve, "poison-chain", yes, ""},
		{authority.Approver, authority.Approve, "tenants granted", yes, ""},
		{authority.Operator, authority.Approve, "governance", no, "approver"},
		{authority.Operator, authority.Approve, "poison", no, "approver"},
		{authority.Operator, authority.Approve, "commit-state", no, "approver"},
		{authority.Operator, authority.Approve, "uncertain", no, "approver"},
		{authority.Operator, authority.Approve, "gone governance", no, "approver"},
		{authority.Operator, authority.Approve, "permanent", yes, ""},
		{authority.Operator, authority.Approve, "predicted", yes, ""},
		{authority.Operator, authority.Approve, "gone permanent", yes, ""},
		{authority.Operator, authority.Approve, "operators only", yes, ""},
		{authority.Operator, authority.Approve, "tenants granted", no, "approver, tenant"},
		{authority.Tenant, authority.Approve, "governance", no, "approver"},
		{authority.Tenant, authority.Approve, "poison", no, "approver"},
		{authority.Tenant, authority.Approve, "commit-state", no, "approver"},
		{authority.Tenant, authority.Approve, "permanent", yes, ""},
		{authority.Tenant, authority.Approve, "tenants granted", yes, ""},
		{authority.Tenant, authority.Approve, "operators only", no, "operator, approver"},
		{authority.TriageAgent, authority.Approve, "governance", no, "approver"},
		{authority.TriageAgent, authority.Approve, "permanent", yes, ""},
		{authority.TriageAgent, authority.Approve, "tenants granted", no, "approver, tenant"},
		{authority.Viewer, authority.Approve, "permanent", no, "operator, approver, tenant, triage_agent"},
		{"", authority.Approve, "permanent", no, "operator, approver, tenant, triage_agent"},
		// Replay now and discard: any acting console role; a tenant or the
		// triage agent only where the rule grants it.
		{authority.Operator, authority.ReplayNow, "governance", yes, ""},
		{authority.Operator, authority.Discard, "poison", yes, ""},
		{authority.Approver, authority.Discard, "governance", yes, ""},
		{authority.Tenant, authority.ReplayNow, "governance", no, "operator, approver"},
		{authority.Tenant, authority.Discard, "poison", no, "operator, approver"},
		{authority.Tenant, authority.ReplayNow, "permanent", yes, ""},
		{authority.Tenant, authority.Discard, "tenants granted", yes, ""},
		{authority.TriageAgent, authority.Discard, "governance", no, "operator, approver"},
		{authority.TriageAgent, authority.Discard, "permanent", yes, ""},
		{authority.Viewer, authority.ReplayNow, "permanent", no, "operator, approver"},
		{authority.Viewer, authority.Discard, "permanent", no, "operator, approver"},
		// Breakers and bulk redrives: operators and approvers only.
		{authority.Operator, authority.Breaker, "none", yes, ""},
		{authority.Operator, authority.Redrive, "none", yes, ""},
		{authority.Approver, authority.Redrive, "none", yes, ""},
		{authority.Viewer, authority.Breaker, "none", no, "operator, approver"},
		{authority.Viewer, authority.Redrive, "none", no, "operator, approver"},
		{authority.Tenant, authority.Breaker, "none", no, "operator, approver"},
		{authority.TriageAgent, authority.Redrive, "none", no, "operator, approver"},
		// An action the rule does not know: approvers only.
		{authority.Operator, "rewrite_policy", "none", no, "approver"},
		{authority.Approver, "rewrite_policy", "none", yes, ""},
	}
	for _, tt := range tests {
		g, ok := grants[tt.grant]
		if !ok {
			t.Fatalf("no grant %q", tt.grant)
		}
		a := authority.Actor{Name: "someone", Role: tt.role}
		err := authority.May(a, tt.act, g)
		if got := err == nil; got != tt.want {
			t.Errorf("May(%s, %s, %s) = %v, want allowed %v", tt.role, tt.act, tt.grant, err, tt.want)
			continue
		}
		if err == nil {
			continue
		}
		var d *authority.Denied
		if !errors.As(err, &d) || !errors.Is(err, authority.ErrPermissionDenied) {
			t.Errorf("May(%s, %s, %s) = %#v, want a *Denied wrapping ErrPermissionDenied", tt.role, tt.act, tt.grant, err)
			continue
		}
		if got := authority.Join(d.Need); got != tt.needed {
			t.Errorf("May(%s, %s, %s) needs %q, want %q", tt.role, tt.act, tt.grant, got, tt.needed)
		}
		if d.Rule != g.Rule || d.Action != tt.act || d.Actor != a {
			t.Errorf("May(%s, %s, %s) = %+v, want rule %q, action %s, actor %v", tt.role, tt.act, tt.grant, d, g.Rule, tt.act, a)
		}
		if g.Rule != "" && !strings.Contains(err.Error(), `rule "`+g.Rule+`"`) {
			t.Errorf("May(%s, %s, %s) = %q, want it to name the rule", tt.role, tt.act, tt.grant, err)
		}
	}
}

// A refusal says what the tenant API tells a tenant: the rule and the
// roles it needs, not who asked.
func TestDeniedReason(t *testing.T) {
	tests := []struct {
		d    authority.Denied
		want string
	}{
		{authority.Denied{Actor: authority.Actor{Name: "tenant-api:acme:key-1", Role: authority.Tenant}, Action: authority.Approve, Rule: "governance", Need: []authority.Role{authority.Approver}},
			`rule "governance" does not let the tenant role approve its entries; it needs approver`},
		{authority.Denied{Actor: authority.Actor{Name: "v@example.com", Role: authority.Viewer}, Action: authority.ReplayNow, Need: []authority.Role{authority.Operator, authority.Approver}},
			"the viewer role may not replay now this entry; it needs operator, approver"},
		{authority.Denied{Actor: authority.Actor{Name: "v@example.com", Role: authority.Viewer}, Action: authority.Breaker, Need: []authority.Role{authority.Operator, authority.Approver}},
			"the viewer role may not override tenant breakers; it needs operator, approver"},
		{authority.Denied{Actor: authority.Actor{Name: "x"}, Action: authority.Redrive, Need: []authority.Role{authority.Operator}},
			"the (no role) role may not run bulk redrives; it needs operator"},
	}
	for _, tt := range tests {
		if got := tt.d.Reason(); got != tt.want {
			t.Errorf("Reason(%+v) = %q, want %q", tt.d, got, tt.want)
		}
		if strings.Contains(tt.d.Reason(), tt.d.Actor.Name) {
			t.Errorf("Reason(%+v) names the actor", tt.d)
		}
	}
}

func TestParseRole(t *testing.T) {
	for _, r := range authority.Roles {
		got, err := authority.ParseRole(" " + string(r) + " ")
		if err != nil || got != r {
			t.Errorf("ParseRole(%q) = %q, %v, want %q", r, got, err, r)
		}
	}
	for _, s := range []string{"", "admin", "Approver", "operator,approver"} {
		if got, err := authority.ParseRole(s); err == nil {
			t.Errorf("ParseRole(%q) = %q, want an error", s, got)
		}
	}
}

func TestActorString(t *testing.T) {
	got := []string{
		authority.Actor{Name: "alice@example.com", Role: authority.Approver}.String(),
		authority.Actor{Name: "classify"}.String(),
	}
	want := []string{"alice@example.com (approver)", "classify"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Actor.String() (-want +got):\n%s", diff)
	}
}

// A note a tenant reads names roles only: every actor given, in any of the
// forms notes name them, whoever the note's own move was made by.
func TestRedact(t *testing.T) {
	alice := authority.Actor{Name: "alice@example.com", Role: authority.Approver}
	bob := authority.Actor{Name: "bob", Role: authority.Operator}
	key := authority.Actor{Name: "tenant-api:acme:key-0123456789abcdef", Role: authority.Tenant}
	ceo := authority.Actor{Name: "agent:ceo", Role: authority.TriageAgent}
	for _, tt := range []struct {
		note   string
		actors []authority.Actor
		want   string
	}{
		{"approved by alice@example.com; headers set: X-A", []authority.Actor{alice}, "approved by approver; headers set: X-A"},
		{"approved by alice@example.com (approver)", []authority.Actor{alice}, "approved by approver"},
		{"replay now requested by tenant-api:acme:key-0123456789abcdef", []authority.Actor{key}, "replay now requested by tenant"},
		{"breaker probe sent by bob: bob checked the downstream", []authority.Actor{bob}, "breaker probe sent by operator: operator checked the downstream"},
		{"approved by agent:ceo (triage_agent)", []authority.Actor{ceo}, "approved by triage_agent"},
		{"discarded: obsolete", []authority.Actor{alice}, "discarded: obsolete"},
		{"", []authority.Actor{alice}, ""},
		// Someone besides the mover: the author of the version approved.
		{"approved by tenant-api:acme:key-0123456789abcdef (tenant); payload v2 (by alice@example.com (approver), 7 B)",
			[]authority.Actor{key, alice}, "approved by tenant; payload v2 (by approver, 7 B)"},
		// A name inside a longer one is not half replaced, whatever the order.
		{"approved by bob@example.com (approver) after bob", []authority.Actor{bob, {Name: "bob@example.com", Role: authority.Approver}},
			"approved by approver after operator"},
		// A role put in place of a name is not taken for another name.
		{"closed by bob: see operator notes", []authority.Actor{bob, {Name: "operator notes", Role: authority.Approver}}, "closed by operator: see approver"},
		// jsdlq's functions are no one's identity; their names stay.
		{"task replay-r1 of replay", []authority.Actor{{Name: "replay"}}, "task replay-r1 of replay"},
	} {
		if got := authority.Redact(tt.note, tt.actors...); got != tt.want {
			t.Errorf("Redact(%q, %v) = %q, want %q", tt.note, tt.actors, got, tt.want)
		}
	}
}
