package triage

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
)

// keyed gives in an idempotency key when it has none: the engine's other
// tests are about their own rules, not the keyless one (TestKeyless).
func keyed(in Input) Input {
	if in.IdempotencyKey == "" {
		in.IdempotencyKey = "task-1"
	}
	return in
}

func TestKeyless(t *testing.T) {
	defaultsOff := bytes.Replace(defaultYAML, []byte("defaults:\n"), []byte("defaults:\n  require_idempotency_key: false\n"), 1)
	ruleOn := testenv.WithRules(t, defaultsOff, `  - name: keyed-only-devops
    match: {agent: [devops], category: [transient]}
    action: auto_replay
    strategy: transient
    require_idempotency_key: true
`)
	policies := map[string][]byte{
		"default":                 defaultYAML,
		"rule off":                testenv.WithRules(t, defaultYAML, testenv.KeylessOKMarketing),
		"defaults off":            defaultsOff,
		"defaults off, rule on":   ruleOn,
		"defaults off (explicit)": bytes.Replace(defaultsOff, []byte("false"), []byte("false # may run twice"), 1),
	}
	timeout := &event.Failure{Code: "timeout"}
	type got struct {
		Action   Action
		Strategy string
		Note     string
		Budget   int
		Delayed  bool
	}
	replays := got{Action: AutoReplay, Strategy: "transient", Budget: 3, Delayed: true}
	waits := got{Action: RequireApproval, Strategy: "transient", Note: NoteKeyless, Budget: 3}
	tests := []struct {
		policy string
		in     Input
		want   got
	}{
		{"default", Input{Agent: "backend", Failure: timeout}, waits},
		{"default", Input{Agent: "backend", Failure: timeout, IdempotencyKey: "  "}, waits},
		{"default", Input{Agent: "backend", Failure: timeout, IdempotencyKey: "task-1"}, replays},
		// Actions that wait for a human already are left as they are.
		{"default", Input{Agent: "backend", Failure: &event.Failure{Code: "impossible_task"}}, got{Action: Escalate, Strategy: "none"}},
		{"default", Input{Agent: "backend", Failure: &event.Failure{Code: "parse_error"}}, got{Action: Quarantine, Strategy: "none"}},
		{"rule off", Input{Agent: "backend", Failure: timeout}, waits},
		{"rule off", Input{Agent: "marketing", Failure: timeout}, replays},
		{"defaults off", Input{Agent: "backend", Failure: timeout}, replays},
		{"defaults off (explicit)", Input{Agent: "backend", Failure: timeout}, replays},
		{"defaults off, rule on", Input{Agent: "devops", Failure: timeout}, waits},
		{"defaults off, rule on", Input{Agent: "backend", Failure: timeout}, replays},
	}
	for _, tt := range tests {
		p, err := Parse(policies[tt.policy], WithRand(func() float64 { return 0 }))
		if err != nil {
			t.Fatalf("Parse(%s) = %v", tt.policy, err)
		}
		d := p.Evaluate(tt.in, Chain{})
		g := got{Action: d.Action, Strategy: d.Strategy, Note: d.Note, Budget: d.ReplayBudget, Delayed: d.Delay > 0}
		if diff := cmp.Diff(tt.want, g); diff != "" {
			t.Errorf("%s: Evaluate(agent %s, key %q) mismatch (-want +got):\n%s", tt.policy, tt.in.Agent, tt.in.IdempotencyKey, diff)
		}
	}
}

// A keyless entry the policy holds keeps the plan its rule's strategy
// makes, so an approval replays it as the policy would have.
func TestKeylessKeepsThePlan(t *testing.T) {
	in := Input{Agent: "backend", Subject: "agents.backend.tasks.code_review", TaskType: "code_review",
		Failure: &event.Failure{Code: "hallucination_loop", Detail: "loop"}}
	p := Default()
	held, replayed := p.Evaluate(in, Chain{}), p.Evaluate(keyed(in), Chain{})
	if held.Action != RequireApproval || replayed.Action != AutoReplay {
		t.Fatalf("Evaluate(keyless, keyed) actions = %s, %s; want %s, %s", held.Action, replayed.Action, RequireApproval, AutoReplay)
	}
	if diff := cmp.Diff(replayed.Modifications, held.Modifications); diff != "" {
		t.Errorf("keyless modifications differ from the keyed ones (-keyed +keyless):\n%s", diff)
	}
	if held.ReplayBudget != replayed.ReplayBudget || held.Strategy != replayed.Strategy {
		t.Errorf("keyless plan = %s budget %d, want %s budget %d", held.Strategy, held.ReplayBudget, replayed.Strategy, replayed.ReplayBudget)
	}
}

func TestKeylessValidation(t *testing.T) {
	tests := []struct {
		name string
		doc  []byte
		want string // in the error; "" parses
	}{
		{"not a bool", bytes.Replace(defaultYAML, []byte("defaults:\n"), []byte("defaults:\n  require_idempotency_key: sometimes\n"), 1),
			"cannot unmarshal !!str `sometimes` into bool"},
		{"on a predictions switch", testenv.WithRules(t, defaultYAML,
			"  - name: switch\n    match: {agent: [devops]}\n    predictions: off\n    require_idempotency_key: false\n"),
			"rule 1 (name switch): require_idempotency_key: a rule with no action decides no replay"},
		{"on a rule", testenv.WithRules(t, defaultYAML, testenv.KeylessOKMarketing), ""},
	}
	for _, tt := range tests {
		_, err := Parse(tt.doc)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: Parse() = %v, want nil", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !IsInvalid(err)):
			t.Errorf("%s: Parse() = %v, want an ErrInvalid naming %q", tt.name, err, tt.want)
		}
	}
}
