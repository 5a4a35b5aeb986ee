package triage

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/authority"
)

// A rule's approvers are checked when the policy loads; an unknown role is
// an error naming the rule.
func TestParseApprovers(t *testing.T) {
	const governance = "  - name: governance\n    match: {category: [governance]}\n    action: require_approval\n    strategy: none\n    approvers: [approver]\n"
	tests := []struct {
		name    string
		replace [2]string
		want    []string
	}{
		{
			name:    "unknown role",
			replace: [2]string{governance, "  - name: governance\n    match: {category: [governance]}\n    action: require_approval\n    strategy: none\n    approvers: [approver, tenants]\n"},
			want:    []string{"rule 14 (name governance): approvers", `unknown role "tenants"`},
		},
		{
			name:    "viewer cannot approve",
			replace: [2]string{governance, "  - name: governance\n    match: {category: [governance]}\n    action: require_approval\n    strategy: none\n    approvers: [viewer]\n"},
			want:    []string{"rule 14 (name governance): approvers", `unknown role "viewer"`},
		},
		{
			name:    "named twice",
			replace: [2]string{governance, "  - name: governance\n    match: {category: [governance]}\n    action: require_approval\n    strategy: none\n    approvers: [tenant, tenant]\n"},
			want:    []string{"rule 14 (name governance): approvers", `role "tenant" named twice`},
		},
		{
			name:    "empty",
			replace: [2]string{governance, "  - name: governance\n    match: {category: [governance]}\n    action: require_approval\n    strategy: none\n    approvers: []\n"},
			want:    []string{"rule 14 (name governance): approvers: empty"},
		},
		{
			name:    "not a list",
			replace: [2]string{governance, "  - name: governance\n    match: {category: [governance]}\n    action: require_approval\n    strategy: none\n    approvers: {tenant: true}\n"},
			want:    []string{"yaml"},
		},
		{
			name:    "a rule that decides nothing",
			replace: [2]string{"rules:\n", "rules:\n  - name: quiet\n    match: {agent: [cso]}\n    predictions: off\n    approvers: [tenant]\n"},
			want:    []string{"rule 1 (name quiet): approvers: a rule without an action"},
		},
	}
	for _, tc := range tests {
		_, err := Parse([]byte(edited(t, tc.replace)))
		wantInvalid(t, tc.name, err, tc.want)
	}
}

func TestGrant(t *testing.T) {
	granting := edited(t, [2]string{"  - name: governance\n    match: {category: [governance]}\n    action: require_approval\n    strategy: none\n    approvers: [approver]\n",
		"  - name: governance\n    match: {category: [governance]}\n    action: require_approval\n    strategy: none\n    approvers: [tenant, operator]\n"})
	custom, err := Parse([]byte(granting))
	if err != nil {
		t.Fatal(err)
	}
	def := Default()
	anyone := []authority.Role{authority.Tenant, authority.TriageAgent, authority.Operator}
	approver := []authority.Role{authority.Approver}
	tests := []struct {
		p        *Policy
		rule     string
		category Category
		want     authority.Grant
	}{
		{def, "governance", Governance, authority.Grant{Rule: "governance", Approvers: approver}},
		{def, "poison", Poison, authority.Grant{Rule: "poison", Approvers: approver}},
		{def, "poison-chain", Poison, authority.Grant{Rule: "poison-chain", Approvers: approver}},
		{def, "commit-state", UnknownCommitState, authority.Grant{Rule: "commit-state", Approvers: approver}},
		{def, "uncertain-side-effects", UnknownCommitState, authority.Grant{Rule: "uncertain-side-effects", Approvers: approver}},
		// Rules that name none: the category decides.
		{def, "permanent", Permanent, authority.Grant{Rule: "permanent", Approvers: anyone, Default: true}},
		{def, "predicted-failure", ConditionallyRecoverable, authority.Grant{Rule: "predicted-failure", Approvers: anyone, Default: true}},
		{def, "default", Governance, authority.Grant{Rule: "default", Approvers: approver, Default: true}},
		// A rule the policy does not have, or none.
		{def, "gone", Poison, authority.Grant{Rule: "gone", Approvers: approver, Default: true}},
		{def, "", UnknownCommitState, authority.Grant{Approvers: approver, Default: true}},
		{def, "", "", authority.Grant{Approvers: anyone, Default: true}},
		// A rule that grants tenants explicitly.
		{custom, "governance", Governance, authority.Grant{Rule: "governance", Approvers: []authority.Role{authority.Tenant, authority.Operator}}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, tt.p.Grant(tt.rule, tt.category)); diff != "" {
			t.Errorf("Grant(%q, %s) (-want +got):\n%s", tt.rule, tt.category, diff)
		}
	}
	// The grant is a copy: editing it changes no later answer.
	g := def.Grant("governance", Governance)
	g.Approvers[0] = authority.Tenant
	if got := def.Grant("governance", Governance).Approvers; !slices.Equal(got, approver) {
		t.Errorf("Grant after editing an earlier answer = %v, want %v", got, approver)
	}
}

// The default policy names approver on exactly the rules whose entries are
// of the categories kept for approvers, so naming them changes nothing the
// category default would have decided: it only shows it.
func TestDefaultApproversAgreeWithCategories(t *testing.T) {
	p := Default()
	for _, r := range p.rules {
		if len(r.doc.Approvers) == 0 {
			continue
		}
		cats := r.doc.Match.Category
		if r.doc.SetCategory != "" {
			cats = []Category{r.doc.SetCategory}
		}
		for _, c := range cats {
			if got := CategoryApprovers(c); !slices.Equal(got, []authority.Role(r.doc.Approvers)) {
				t.Errorf("rule %s names %v, its category %s defaults to %v", r.doc.Name, r.doc.Approvers, c, got)
			}
		}
		if len(cats) == 0 {
			t.Errorf("rule %s names approvers but no category", r.doc.Name)
		}
	}
}
