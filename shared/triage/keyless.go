package triage

import "strings"

// NoteKeyless is the note of a decision the keyless rule turned from a
// replay into a wait for a human.
const NoteKeyless = "the task carries no idempotency key (X-Idempotency-Key, or X-Task-ID): " +
	"no completion record can tell whether it already ran, so a replay could run it twice; " +
	"a human decides (require_idempotency_key)"

// holdKeyless is the keyless rule: a task without an idempotency key
// cannot be recognised as done (the replay's completion gate and agentkit's
// Once have nothing to look up), so a replay the policy would make on its
// own waits for a human instead, unless the policy says the task's effects
// may happen twice (require_idempotency_key: false, for the rule or as the
// default). The plan stays what the rule's strategy asks for: an approval
// replays the task with it, at once.
func (p *Policy) holdKeyless(d *Decision, r rule, in Input) {
	if d.Action != AutoReplay || strings.TrimSpace(in.IdempotencyKey) != "" || !p.requiresKey(r) {
		return
	}
	d.Action, d.Delay, d.Note = RequireApproval, 0, NoteKeyless
}

// requiresKey is the rule's require_idempotency_key, else the default's,
// else true.
func (p *Policy) requiresKey(r rule) bool {
	if v := r.doc.RequireIdempotencyKey; v != nil {
		return *v
	}
	if v := p.doc.Defaults.RequireIdempotencyKey; v != nil {
		return *v
	}
	return true
}

// checkKeyless refuses the setting on a rule that never decides an action
// (a predictions switch), where it would read as if it did something.
func checkKeyless(v *validator, where string, rd ruleDoc, switchOnly bool) {
	if rd.RequireIdempotencyKey != nil && switchOnly {
		v.add(where+": require_idempotency_key", "a rule with no action decides no replay; set it on the rule that does")
	}
}
