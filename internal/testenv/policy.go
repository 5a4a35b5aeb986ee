package testenv

import (
	"bytes"
	"strings"
	"testing"
)

// Rules that tests of several packages put in front of a policy's own
// (WithRules): the engine's tests and those of the functions and tools that
// run it then mean the same rule, and their expectations cannot drift apart.
const (
	// RetentionRules keep permanent failures of agent devops 180 days and
	// transient ones of agent marketing 7 days.
	RetentionRules = `  - name: devops-permanent
    match: {agent: [devops], category: [permanent]}
    action: escalate
    strategy: none
    retention: 180d
  - name: marketing-transient
    match: {agent: [marketing], category: [transient]}
    action: auto_replay
    strategy: transient
    retention: 7d
`
	// NoPredictionsDevops switches predictions off for agent devops; it
	// decides nothing else, so the rules below it still classify.
	NoPredictionsDevops = "  - name: no-predictions-devops\n    match: {agent: [devops]}\n    predictions: off\n"
	// KeylessOKMarketing replays transient failures of agent marketing
	// even without an idempotency key (their effects may happen twice);
	// every other keyless task waits for a human, the default.
	KeylessOKMarketing = `  - name: keyless-ok-marketing
    match: {agent: [marketing], category: [transient]}
    action: auto_replay
    strategy: transient
    require_idempotency_key: false
`
)

// WithRules is the policy document doc with rules placed before its own,
// where they are matched first. A document without a rules list fails the
// test: the rules would silently not apply.
func WithRules(t testing.TB, doc []byte, rules ...string) []byte {
	t.Helper()
	const list = "rules:\n"
	if !bytes.Contains(doc, []byte(list)) {
		t.Fatalf("testenv: the policy has no %q line to put rules under", list)
	}
	return bytes.Replace(doc, []byte(list), []byte(list+strings.Join(rules, "")), 1)
}
