package triage

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/predict"
)

// edited is the default policy with each replacement applied; it fails the
// test when one does not apply, so a changed default cannot make a case
// test nothing.
func edited(t *testing.T, replacements ...[2]string) string {
	t.Helper()
	doc := string(defaultYAML)
	for _, r := range replacements {
		if !strings.Contains(doc, r[0]) {
			t.Fatalf("the default policy does not contain %q", r[0])
		}
		doc = strings.Replace(doc, r[0], r[1], 1)
	}
	return doc
}

// wantInvalid checks that Parse refused the policy of case name with an
// ErrInvalid error naming each of want.
func wantInvalid(t *testing.T, name string, err error, want []string) {
	t.Helper()
	if !IsInvalid(err) {
		t.Errorf("%s: Parse() = %v, want an ErrInvalid error", name, err)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: Parse() = %q, want it to contain %q", name, err, w)
		}
	}
}

// devopsOff is the edit that puts testenv.NoPredictionsDevops before the
// default policy's rules.
var devopsOff = [2]string{"rules:\n", "rules:\n" + testenv.NoPredictionsDevops}

func mustParse(t *testing.T, doc string) *Policy {
	t.Helper()
	p, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse() = %v", err)
	}
	return p
}

func TestPredictedDefaultPolicy(t *testing.T) {
	overflow := event.Replay{Strategy: "context_window_overflow", TargetModel: "large-context", MaxContextTokens: 80000,
		Instructions: []string{"Focus on the core task. Skip background context."}}
	tests := []struct {
		agent, taskType, reason string
		want                    predict.Action
		wantOK                  bool
	}{
		{agent: "backend", taskType: "code_review", reason: "context_window_overflow", wantOK: true,
			want: predict.Action{Action: predict.ActionStrategy, Strategy: "context_window_overflow", Replay: overflow}},
		{agent: "backend", taskType: "code_review", reason: "hallucination_loop", wantOK: true,
			want: predict.Action{Action: predict.ActionStrategy, Strategy: "hallucination_loop", AlternateAgent: "cto", Replay: event.Replay{
				Strategy: "hallucination_loop", TargetModel: "alternate", Instructions: []string{
					"Previous attempts produced incorrect output: tasks like this one often fail with hallucination_loop",
					"Validate your output against the schema before submitting.",
				}}}},
		// The output budget is the policy's default: there are no task
		// headers before the first attempt.
		{agent: "marketing", taskType: "social_media", reason: "token_budget_exceeded", wantOK: true,
			want: predict.Action{Action: predict.ActionStrategy, Strategy: "token_budget_exceeded", Replay: event.Replay{
				Strategy: "token_budget_exceeded", MaxOutputTokens: 4800,
				Instructions: []string{"Produce a concise response. Prioritize accuracy over completeness."}}}},
		{agent: "cto", taskType: "architecture", reason: "model_confusion", wantOK: true,
			want: predict.Action{Action: predict.ActionStrategy, Strategy: "model_confusion", Replay: event.Replay{
				Strategy: "model_confusion", TargetModel: "alternate",
				Instructions: []string{"Re-read the task statement and answer only what it asks."}}}},
		// Reasons apply does not name are only shown.
		{agent: "cto", taskType: "architecture", reason: "impossible_task"},
		{agent: "cto", taskType: "architecture", reason: "llm_provider_timeout"},
		{agent: "cto", taskType: "architecture", reason: "no_such_reason"},
		{agent: "cto", taskType: "architecture", reason: predict.ReasonPredictedFailure},
	}
	p := Default()
	for _, tc := range tests {
		got, ok := p.Predicted(tc.agent, tc.taskType, tc.reason)
		if ok != tc.wantOK {
			t.Errorf("Predicted(%q, %q, %q) ok = %v, want %v", tc.agent, tc.taskType, tc.reason, ok, tc.wantOK)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("Predicted(%q, %q, %q) mismatch (-want +got):\n%s", tc.agent, tc.taskType, tc.reason, diff)
		}
	}
}

// TestPredictedHeadersAreReplays: a task changed before its first attempt
// carries the headers the replay of the same failure would carry (one
// mapping, Modifications.Replay), apart from what only a replay knows.
func TestPredictedHeadersAreReplays(t *testing.T) {
	p := Default()
	for _, reason := range []string{"context_window_overflow", "token_budget_exceeded", "model_confusion"} {
		in := Input{Agent: "backend", TaskType: "code_review", Subject: "agents.backend.tasks.code_review",
			Failure: &event.Failure{Code: reason}}
		d := p.Evaluate(in, Chain{})
		want := d.Modifications.Replay("", 0, d.Strategy, nil)
		got, ok := p.Predicted(in.Agent, in.TaskType, reason)
		if !ok {
			t.Fatalf("Predicted(%q) ok = false, want true", reason)
		}
		if diff := cmp.Diff(want, got.Replay); diff != "" {
			t.Errorf("Predicted(%q).Replay differs from the replay's headers (-replay +predicted):\n%s", reason, diff)
		}
	}
}

func TestPredictedPolicyKeys(t *testing.T) {
	const apply = "    context_window_overflow: context_window_overflow\n"
	tests := []struct {
		name                    string
		edits                   [][2]string
		cut                     bool // the policy without its predictions: section
		agent, taskType, reason string
		want                    predict.Action
		wantOK                  bool
	}{
		{
			name:  "dlq for a reason",
			edits: [][2]string{{apply, apply + "    impossible_task: dlq\n"}},
			agent: "cto", taskType: "architecture", reason: "impossible_task",
			want: predict.Action{Action: predict.ActionDLQ}, wantOK: true,
		},
		{
			name:  "disabled",
			edits: [][2]string{{"  enabled: true\n", "  enabled: false\n"}},
			agent: "cto", taskType: "architecture", reason: "context_window_overflow",
		},
		{
			name:  "no predictions section",
			cut:   true,
			agent: "cto", taskType: "architecture", reason: "context_window_overflow",
		},
		{
			name:  "a rule of its own switches an agent off",
			edits: [][2]string{devopsOff},
			agent: "devops", taskType: "deployment", reason: "context_window_overflow",
		},
		{
			name:  "the same rule leaves other agents on",
			edits: [][2]string{devopsOff},
			agent: "backend", taskType: "debugging", reason: "context_window_overflow", wantOK: true,
			want: predict.Action{Action: predict.ActionStrategy, Strategy: "context_window_overflow", Replay: event.Replay{
				Strategy: "context_window_overflow", TargetModel: "large-context", MaxContextTokens: 80000,
				Instructions: []string{"Focus on the core task. Skip background context."}}},
		},
		{
			name: "a rule that also classifies switches its reason off",
			edits: [][2]string{{"    strategy: context_window_overflow\n  - name: hallucination\n",
				"    strategy: context_window_overflow\n    predictions: off\n  - name: hallucination\n"}},
			agent: "backend", taskType: "debugging", reason: "context_window_overflow",
		},
		{
			name:  "a task type and a category",
			edits: [][2]string{{"rules:\n", "rules:\n  - name: quiet\n    match: {task_type: [planning], category: [conditionally_recoverable]}\n    predictions: false\n"}},
			agent: "ceo", taskType: "planning", reason: "model_confusion",
		},
		{
			name:  "predictions: on is the default",
			edits: [][2]string{{"rules:\n", "rules:\n  - name: loud\n    match: {agent: [ceo]}\n    predictions: on\n    action: escalate\n    strategy: none\n"}},
			agent: "ceo", taskType: "planning", reason: "impossible_task",
		},
	}
	for _, tc := range tests {
		doc := edited(t, tc.edits...)
		if tc.cut {
			var found bool
			if doc, _, found = strings.Cut(doc, "\npredictions:\n"); !found {
				t.Fatal("the default policy has no predictions: section")
			}
		}
		p := mustParse(t, doc)
		got, ok := p.Predicted(tc.agent, tc.taskType, tc.reason)
		if ok != tc.wantOK {
			t.Errorf("%s: Predicted(%q, %q, %q) ok = %v, want %v", tc.name, tc.agent, tc.taskType, tc.reason, ok, tc.wantOK)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: Predicted() mismatch (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestSwitchOnlyRuleDoesNotClassify: a rule that only switches predictions
// off is not a catch-all for what it matches.
func TestSwitchOnlyRuleDoesNotClassify(t *testing.T) {
	p := mustParse(t, edited(t, devopsOff))
	d := p.Evaluate(Input{Agent: "devops", TaskType: "deployment", Failure: &event.Failure{Code: "impossible_task"}}, Chain{})
	if d.Rule != "permanent" || d.Action != Escalate {
		t.Errorf("Evaluate(devops impossible_task) = rule %q action %q, want rule %q action %q", d.Rule, d.Action, "permanent", Escalate)
	}
}

func TestPredictionSettings(t *testing.T) {
	got := Default().Predictions()
	want := PredictionSettings{Enabled: true, MinSupport: 20, Threshold: 0.5, Apply: map[string]string{
		"context_window_overflow": "context_window_overflow", "token_budget_exceeded": "token_budget_exceeded",
		"hallucination_loop": "hallucination_loop", "model_confusion": "model_confusion"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Default().Predictions() mismatch (-want +got):\n%s", diff)
	}
	// The settings are a copy: a caller cannot change the policy.
	got.Apply["impossible_task"] = predict.ActionDLQ
	if _, ok := Default().Predicted("cto", "architecture", "impossible_task"); ok {
		t.Error("Predicted(impossible_task) ok = true after a caller changed its copy of the settings, want false")
	}
}

func TestParsePredictionErrors(t *testing.T) {
	const apply = "    context_window_overflow: context_window_overflow\n"
	tests := []struct {
		name  string
		edits [][2]string
		want  []string
	}{
		{name: "unknown reason", edits: [][2]string{{apply, apply + "    contex_overflow: context_window_overflow\n"}},
			want: []string{"predictions.apply.contex_overflow", `reason code "contex_overflow" is not in reasons`}},
		{name: "unknown strategy", edits: [][2]string{{apply, "    context_window_overflow: compress\n"}},
			want: []string{"predictions.apply.context_window_overflow", `"compress" is neither dlq nor a strategy`}},
		{name: "a strategy that changes nothing", edits: [][2]string{{apply, "    context_window_overflow: transient\n"}},
			want: []string{"predictions.apply.context_window_overflow", `strategy "transient" changes nothing`}},
		{name: "the reason of predictions themselves", edits: [][2]string{{apply, apply + "    predicted_failure: dlq\n"}},
			want: []string{"predictions.apply.predicted_failure", "it is not predicted"}},
		{name: "threshold zero", edits: [][2]string{{"  threshold: 0.5\n", "  threshold: 0\n"}},
			want: []string{"predictions.threshold", "0 is not in (0, 1]"}},
		{name: "threshold above one", edits: [][2]string{{"  threshold: 0.5\n", "  threshold: 1.5\n"}},
			want: []string{"predictions.threshold", "1.5 is not in (0, 1]"}},
		{name: "min_support zero", edits: [][2]string{{"  min_support: 20\n", "  min_support: 0\n"}},
			want: []string{"predictions.min_support", "0 is less than 1"}},
		{name: "min_support negative", edits: [][2]string{{"  min_support: 20\n", "  min_support: -3\n"}},
			want: []string{"predictions.min_support", "-3 is less than 1"}},
		{name: "a switch that cannot be decided before the first attempt",
			edits: [][2]string{{"rules:\n", "rules:\n  - name: acme-off\n    match: {tenant: [acme], seen_in_chain: [timeout]}\n    predictions: off\n"}},
			want:  []string{"rule 1 (name acme-off): match.tenant", "rule 1 (name acme-off): match.seen_in_chain"}},
		{name: "a switch on an unknown reason",
			edits: [][2]string{{"rules:\n", "rules:\n  - name: off\n    match: {reason_code: [halucination_loop]}\n    predictions: off\n"}},
			want:  []string{"rule 1 (name off): match", `"halucination_loop" is not in reasons`}},
		{name: "a switch-only rule with a strategy",
			edits: [][2]string{{"rules:\n", "rules:\n  - name: off\n    match: {agent: [cto]}\n    predictions: off\n    strategy: none\n"}},
			want:  []string{"rule 1 (name off): a rule without an action only switches predictions off"}},
		{name: "neither on nor off",
			edits: [][2]string{{"rules:\n", "rules:\n  - name: off\n    match: {agent: [cto]}\n    predictions: sometimes\n"}},
			want:  []string{`predictions: "sometimes" is not on or off`}},
		{name: "a rule without an action that switches nothing",
			edits: [][2]string{{"rules:\n", "rules:\n  - name: nothing\n    match: {agent: [cto]}\n    strategy: none\n"}},
			want:  []string{"rule 1 (name nothing): action"}},
	}
	for _, tc := range tests {
		_, err := Parse([]byte(edited(t, tc.edits...)))
		wantInvalid(t, tc.name, err, tc.want)
	}
}

// TestPredictedIsTheLearnersAct: the learner writes the policy's action
// into the model's rows (predict.Options.Act is Policy.Predicted), and a
// reason the policy does not act on stays advisory.
func TestPredictedIsTheLearnersAct(t *testing.T) {
	p := Default()
	stats := predict.Stats{}
	overflow := predict.Features{Agent: "backend", TaskType: "code_review", PayloadBytes: 40 << 10}
	stats.AddTasks(overflow, 40)
	for range 30 {
		stats.AddDeath(overflow, "context_window_overflow")
	}
	impossible := predict.Features{Agent: "cso", TaskType: "compliance", PayloadBytes: 100}
	stats.AddTasks(impossible, 40)
	for range 30 {
		stats.AddDeath(impossible, "impossible_task")
	}
	set := p.Predictions()
	m := predict.Learn(stats, predict.Options{MinSupport: set.MinSupport, Threshold: set.Threshold, Act: p.Predicted})
	got := map[string]string{}
	for _, row := range m.Predictions {
		got[row.Agent+" "+row.Reason] = row.Action + " " + row.Strategy
		if row.Action == predict.ActionStrategy && row.Replay.MaxContextTokens != 80000 {
			t.Errorf("row %v: Replay.MaxContextTokens = %d, want 80000", row.Key, row.Replay.MaxContextTokens)
		}
	}
	want := map[string]string{"backend context_window_overflow": "strategy context_window_overflow", "cso impossible_task": " "}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Learn(Act: Policy.Predicted) actions mismatch (-want +got):\n%s", diff)
	}
}

func TestUse(t *testing.T) {
	row := func(agent, taskType, reason string, tasks int64, conf float64) predict.Prediction {
		return predict.Prediction{Key: predict.Key{Agent: agent, TaskType: taskType, Feature: predict.FeatureAll, Bucket: predict.BucketAll},
			Tasks: tasks, Confidence: conf, Reason: reason, ReasonShare: 1}
	}
	mixed := row("backend", "code_review", "context_window_overflow", 40, 0.8)
	mixed.ReasonShare = 0.3
	const apply = "    context_window_overflow: context_window_overflow\n"
	policy := mustParse(t, edited(t, [2]string{apply, apply + "    impossible_task: dlq\n"},
		devopsOff))
	disabled := mustParse(t, edited(t, [2]string{"  enabled: true\n", "  enabled: false\n"}))
	tests := []struct {
		p          *Policy
		row        predict.Prediction
		wantAction string
		wantWhy    string
	}{
		{p: policy, row: row("backend", "code_review", "context_window_overflow", 40, 0.8), wantAction: predict.ActionStrategy,
			wantWhy: "strategy context_window_overflow applied before the first attempt"},
		{p: policy, row: row("backend", "code_review", "hallucination_loop", 40, 0.8), wantAction: predict.ActionStrategy,
			wantWhy: "strategy hallucination_loop applied before the first attempt, handed to cto"},
		{p: policy, row: row("cso", "compliance", "impossible_task", 40, 0.8), wantAction: predict.ActionDLQ,
			wantWhy: "sent to the DLQ before its first attempt (reason predicted_failure)"},
		{p: policy, row: row("devops", "deployment", "context_window_overflow", 40, 0.8), wantWhy: "switched off by rule no-predictions-devops"},
		{p: policy, row: row("backend", "code_review", "llm_provider_timeout", 40, 0.8), wantWhy: `advisory: predictions.apply names nothing for "llm_provider_timeout"`},
		{p: policy, row: row("backend", "code_review", "context_window_overflow", 19, 0.8), wantWhy: "advisory: 19 tasks, below min_support 20"},
		{p: policy, row: row("backend", "code_review", "context_window_overflow", 40, 0.45), wantWhy: "advisory: confidence 0.45 below threshold 0.50"},
		{p: disabled, row: row("backend", "code_review", "context_window_overflow", 40, 0.8), wantWhy: "predictions are disabled (predictions.enabled)"},
		{p: policy, row: mixed, wantWhy: `advisory: "context_window_overflow" is 30 % of the deaths, below 50 %`},
	}
	for _, tc := range tests {
		got := tc.p.Use(tc.row)
		if got.Action.Action != tc.wantAction || got.Why != tc.wantWhy {
			t.Errorf("Use(%s %s %s, %d tasks, confidence %v) = %q, %q, want %q, %q", tc.row.Agent, tc.row.TaskType, tc.row.Reason,
				tc.row.Tasks, tc.row.Confidence, got.Action.Action, got.Why, tc.wantAction, tc.wantWhy)
		}
	}
}
