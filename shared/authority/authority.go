// Package authority is who may do what to a dead task (docs/policy.md, "Who
// may approve"): the roles an actor acts in, the actions taken on entries and
// breakers, and the one rule that decides, May. The triage policy says, per
// rule, which roles may approve its entries (a Grant); shared/operator asks
// May before every action, whichever path it came by (the console, the tenant
// API, dlqctl, a bulk redrive, the triage agent), and records the actor and
// role in the entry's history.
package authority

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Role is the capacity an actor acts in.
type Role string

// Roles. Viewer, Operator and Approver are the console's (mapped from IAP
// identities and groups); dlqctl, which holds the store's credentials,
// acts as Approver; Tenant is a tenant key on the tenant API; TriageAgent
// is the triage agent's answers.
const (
	// Viewer reads every page and acts on nothing.
	Viewer Role = "viewer"
	// Operator replays now, discards, overrides breakers and runs bulk
	// redrives; it approves the entries of rules that grant operator.
	Operator Role = "operator"
	// Approver is an operator who also approves the entries of every rule,
	// among them those the policy keeps for a human (governance, poison,
	// unknown commit state by default).
	Approver Role = "approver"
	// Tenant acts on its own entries through the tenant API, only where
	// the entry's rule grants tenant.
	Tenant Role = "tenant"
	// TriageAgent answers triage tasks, only where the entry's rule grants
	// triage_agent.
	TriageAgent Role = "triage_agent"
)

// Roles are every role, least powerful human role first.
var Roles = []Role{Viewer, Operator, Approver, Tenant, TriageAgent}

// Grantable are the roles a policy rule's approvers may name. Approver is
// always implied: someone must be able to approve every entry.
var Grantable = []Role{Tenant, TriageAgent, Operator, Approver}

// Valid reports whether r is one of Roles.
func (r Role) Valid() bool { return slices.Contains(Roles, r) }

// Operates reports whether r is a console role that acts (operator or
// approver); a viewer only reads.
func (r Role) Operates() bool { return r == Operator || r == Approver }

// ParseRole reads a role by name.
func ParseRole(s string) (Role, error) {
	r := Role(strings.TrimSpace(s))
	if !r.Valid() {
		return "", fmt.Errorf("authority: unknown role %q (one of %s)", s, Join(Roles))
	}
	return r, nil
}

// Actor is who acts, and in which role: both are recorded in the history of
// what they change.
type Actor struct {
	Name string
	Role Role
}

// String is the actor as history notes and logs name it: "alice@example.com
// (approver)".
func (a Actor) String() string {
	if a.Role == "" {
		return a.Name
	}
	return a.Name + " (" + string(a.Role) + ")"
}

// Redact is note as a reader who is shown roles, never identities, reads
// it (a tenant: the tenant API, the tenant's webhooks): each of actors the
// note names, as String writes it ("alice@example.com (approver)") or by
// name alone, is replaced by its role. Actors without a name or a role
// (jsdlq's own functions) are no one's identity and stay as they are. The
// replacement is one pass over note, longer names first, so a name inside
// another, or inside a role put in place of one, is never half replaced;
// for a name that acted in two roles, the first of actors decides what its
// bare name becomes.
func Redact(note string, actors ...Actor) string {
	var named []Actor
	for _, a := range actors {
		if a.Name != "" && a.Role != "" {
			named = append(named, a)
		}
	}
	if len(named) == 0 || note == "" {
		return note
	}
	slices.SortStableFunc(named, func(a, b Actor) int { return cmp.Compare(len(b.Name), len(a.Name)) })
	pairs := make([]string, 0, 4*len(named))
	for _, a := range named {
		pairs = append(pairs, a.String(), string(a.Role))
	}
	for _, a := range named {
		pairs = append(pairs, a.Name, string(a.Role))
	}
	return strings.NewReplacer(pairs...).Replace(note)
}

// Action is what an actor does.
type Action string

// Actions.
const (
	// Approve replays an entry that waits for a human (awaiting approval,
	// quarantined, escalated): the approval answers the policy.
	Approve Action = "approve"
	// ReplayNow runs a scheduled replay now, or releases a held one; the
	// replay still meets every gate.
	ReplayNow Action = "replay_now"
	// Discard ends an entry.
	Discard Action = "discard"
	// Breaker closes a tenant's breaker or sends an entry as its probe.
	Breaker Action = "breaker"
	// Redrive confirms or cancels a bulk redrive (whose actions are each
	// Approve or ReplayNow, decided entry by entry).
	Redrive Action = "redrive"
)

// Grant is who a policy rule lets approve its entries.
type Grant struct {
	// Rule is the rule's name ("" when the entry names none).
	Rule string
	// Approvers are the roles the rule names, or its category's default.
	Approvers []Role
	// Default: the rule names none; Approvers are the default of the
	// entry's category.
	Default bool
}

// Allows reports whether the grant names role r, operator implying
// approver, approver always allowed.
func (g Grant) Allows(r Role) bool {
	switch r {
	case Approver:
		return true
	case Operator:
		return slices.Contains(g.Approvers, Operator)
	case Tenant, TriageAgent:
		return slices.Contains(g.Approvers, r)
	}
	return false
}

// Who are the roles that may approve under the grant, in Roles' order.
func (g Grant) Who() []Role {
	var out []Role
	for _, r := range Roles {
		if g.Allows(r) {
			out = append(out, r)
		}
	}
	return out
}

// ErrPermissionDenied is wrapped by every refusal of May (a *Denied).
var ErrPermissionDenied = errors.New("authority: permission denied")

// Denied is a refused action: who, what, under which rule, and the roles
// that may.
type Denied struct {
	Actor  Actor
	Action Action
	// Rule is the entry's rule for an entry action ("" for a breaker or
	// redrive action, or an entry that names no rule).
	Rule string
	// Need are the roles that may take the action.
	Need []Role
}

// Reason says what was refused and what it needs, without the actor's
// name (the tenant API shows it to tenants).
func (d *Denied) Reason() string {
	role := string(d.Actor.Role)
	if role == "" {
		role = "(no role)"
	}
	verb := verbs[d.Action]
	if verb == "" {
		verb = string(d.Action)
	}
	switch {
	case d.Rule != "":
		return fmt.Sprintf("rule %q does not let the %s role %s its entries; it needs %s", d.Rule, role, verb, Join(d.Need))
	case slices.Contains(entryActions, d.Action):
		return fmt.Sprintf("the %s role may not %s this entry; it needs %s", role, verb, Join(d.Need))
	}
	return fmt.Sprintf("the %s role may not %s; it needs %s", role, verb, Join(d.Need))
}

// verbs name the actions in a sentence.
var verbs = map[Action]string{Approve: "approve", ReplayNow: "replay now", Discard: "discard",
	Breaker: "override tenant breakers", Redrive: "run bulk redrives"}

func (d *Denied) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrPermissionDenied, d.Actor.Name, d.Reason())
}

// Is makes errors.Is(err, ErrPermissionDenied) true.
func (d *Denied) Is(target error) bool { return target == ErrPermissionDenied }

// entryActions are the actions on one entry, which the entry's rule decides
// for tenants and the triage agent.
var entryActions = []Action{Approve, ReplayNow, Discard}

// operatorActions are what every acting console role may do whatever the
// entry's rule.
var operatorActions = []Action{ReplayNow, Discard, Breaker, Redrive}

// May is the rule: nil when a, in its role, may take act on an entry whose
// rule grants g (the zero Grant for a breaker or redrive action), else a
// *Denied.
//
//   - approver: everything.
//   - operator: replay now, discard, breakers, bulk redrives; approve where
//     the rule grants operator.
//   - tenant and triage_agent: approve, replay now and discard where the
//     rule grants their role; nothing else.
//   - viewer, or no role: nothing.
func May(a Actor, act Action, g Grant) error {
	entry := slices.Contains(entryActions, act)
	rule := g.Rule
	if !entry {
		rule = "" // a breaker or a redrive is no entry's rule's to grant
	}
	deny := func(need ...Role) error {
		return &Denied{Actor: a, Action: act, Rule: rule, Need: need}
	}
	switch {
	case a.Role == Approver:
		return nil
	case act == Approve:
		if g.Allows(a.Role) {
			return nil
		}
		return deny(g.Who()...)
	case slices.Contains(operatorActions, act) && a.Role == Operator:
		return nil
	case entry && (a.Role == Tenant || a.Role == TriageAgent):
		if g.Allows(a.Role) {
			return nil
		}
		need := []Role{Operator, Approver}
		if g.Allows(Tenant) {
			need = append(need, Tenant)
		}
		if g.Allows(TriageAgent) {
			need = append(need, TriageAgent)
		}
		return deny(need...)
	case slices.Contains(operatorActions, act):
		return deny(Operator, Approver)
	}
	return deny(Approver)
}

// Join names roles, comma-separated.
func Join(roles []Role) string {
	s := make([]string, len(roles))
	for i, r := range roles {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}
