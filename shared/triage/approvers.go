package triage

import (
	"slices"

	"github.com/jsdlq/jsdlq/shared/authority"
)

// This file is who may approve the entries a rule decides (docs/policy.md,
// "Who may approve"): a rule's approvers, or its entry's category's default.
// shared/authority.May applies the grant; shared/operator asks it.

// approverList is a rule's approvers as written.
type approverList []authority.Role

// KeptForApprovers are the categories whose entries only an approver may
// approve when their rule names no approvers: a governance denial, a
// payload known to be broken, a task whose side effects may have happened.
// Replaying any of them unchanged is rarely right, and never a tenant's or
// an agent's call unless a rule says so.
var KeptForApprovers = []Category{Governance, Poison, UnknownCommitState}

// defaultApprovers approve the entries of every other category when their
// rule names none: whoever could before roles existed (a tenant key, the
// triage agent, any operator).
var defaultApprovers = []authority.Role{authority.Tenant, authority.TriageAgent, authority.Operator}

// CategoryApprovers are the approvers of an entry of category c whose rule
// names none.
func CategoryApprovers(c Category) []authority.Role {
	if slices.Contains(KeptForApprovers, c) {
		return []authority.Role{authority.Approver}
	}
	return slices.Clone(defaultApprovers)
}

// checkApprovers validates a rule's approvers: roles a rule may grant, each
// once, on a rule that decides entries.
func checkApprovers(v *validator, where string, rd ruleDoc) {
	if rd.Approvers == nil {
		return
	}
	where += ": approvers"
	if len(rd.Approvers) == 0 {
		v.add(where, "empty: leave it out for the category's default, or name roles (approver keeps the rule's entries for approvers)")
	}
	if rd.Action == "" {
		v.add(where, "a rule without an action decides no entry, so no one approves its entries")
	}
	for i, r := range rd.Approvers {
		switch {
		case !slices.Contains(authority.Grantable, r):
			v.add(where, "unknown role %q (a rule grants tenant, triage_agent, operator or approver)", r)
		case slices.Contains(rd.Approvers[:i], r):
			v.add(where, "role %q named twice", r)
		}
	}
}

// Grant is who may approve an entry that the rule named rule decided into
// category c: the rule's approvers when it names them, else c's default
// (CategoryApprovers). An entry whose rule this policy does not have (the
// rule was renamed or removed since, or the entry names none) gets its
// category's default too.
func (p *Policy) Grant(rule string, c Category) authority.Grant {
	for _, r := range p.rules {
		if r.doc.Name == rule && !r.switchOnly && len(r.doc.Approvers) > 0 {
			return authority.Grant{Rule: rule, Approvers: slices.Clone(r.doc.Approvers)}
		}
	}
	return authority.Grant{Rule: rule, Approvers: CategoryApprovers(c), Default: true}
}
