package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/predict"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// predictionModel is a model as the learner writes it under the default
// policy: an overflow row the policy acts on, a devops row it acts on too
// (until a rule switches devops off) and an advisory one.
func predictionModel() predict.Model {
	p := triage.Default()
	row := func(agent, taskType, feature, bucket, reason string, tasks, deaths int64) predict.Prediction {
		r := predict.Prediction{Key: predict.Key{Agent: agent, TaskType: taskType, Feature: feature, Bucket: bucket}, Tasks: tasks, Deaths: deaths,
			Probability: float64(deaths) / float64(tasks), Confidence: predict.Wilson(deaths, tasks, predict.DefaultZ),
			Reason: reason, ReasonShare: 1}
		if a, ok := p.Predicted(agent, taskType, reason); ok {
			r.Action, r.Strategy, r.Replay, r.AlternateAgent = a.Action, a.Strategy, a.Replay, a.AlternateAgent
		}
		return r
	}
	return predict.Model{TrainedAt: time.Now().Add(-5 * time.Minute).UTC().Truncate(time.Second), PolicyVersion: p.Version(),
		MinSupport: 20, Threshold: 0.5, Cells: 42, Predictions: []predict.Prediction{
			row("backend", "implementation", predict.FeatureSize, "16-64KiB", "context_window_overflow", 40, 36),
			row("devops", "deployment", predict.FeatureAll, predict.BucketAll, "token_budget_exceeded", 30, 24),
			row("cso", "compliance", predict.FeatureAll, predict.BucketAll, "impossible_task", 25, 20),
		}}
}

func TestPredictions(t *testing.T) {
	e := newEnv(t)
	code, out, stderr := e.run(nil, "predictions")
	if code != 0 || !strings.Contains(out, "no model yet") || !strings.Contains(out, "predictions enabled, min_support 20, threshold 0.50") {
		t.Fatalf("predictions before a model = %d %q:\n%s", code, stderr, out)
	}
	if _, err := e.st.SavePredictionModel(testenv.Context(t), predictionModel()); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = e.run(nil, "predictions")
	for _, want := range []string{
		"model version 1, trained ", "42 cells predict",
		"backend  implementation  size     16-64KiB  40     36      0.90         0.77        context_window_overflow  1.00   strategy context_window_overflow  strategy context_window_overflow applied before the first attempt",
		"cso      compliance      all      all       25     20      0.80         0.61        impossible_task          1.00   advisory                          advisory: predictions.apply names nothing for \"impossible_task\"",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("predictions lacks %q (exit %d, %q):\n%s", want, code, stderr, out)
		}
	}

	// An operator switches devops off: the policy's view changes at once,
	// the model's action until the next learning run.
	off := testenv.WithRules(t, triage.DefaultYAML(), testenv.NoPredictionsDevops)
	file := filepath.Join(t.TempDir(), "off.yaml")
	if err := os.WriteFile(file, off, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := e.run(nil, "policy", "apply", file); code != 0 {
		t.Fatalf("policy apply = %d %q %q", code, out, stderr)
	}
	code, out, stderr = e.run(nil, "predictions", "--json")
	var v struct {
		Model  *predict.Model `json:"model"`
		Policy struct {
			Version string `json:"version"`
		} `json:"policy"`
		Rows []struct {
			Agent  string `json:"agent"`
			Action string `json:"action"`
			Now    string `json:"policy_action"`
			Why    string `json:"policy_why"`
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil {
		t.Fatalf("predictions --json = %d %v %q:\n%s", code, err, stderr, out)
	}
	type row struct{ Agent, Action, Now, Why string }
	var got []row
	for _, r := range v.Rows {
		got = append(got, row{r.Agent, r.Action, r.Now, r.Why})
	}
	want := []row{
		{"backend", predict.ActionStrategy, predict.ActionStrategy, "strategy context_window_overflow applied before the first attempt"},
		{"devops", predict.ActionStrategy, "", "switched off by rule no-predictions-devops"},
		{"cso", "", "", `advisory: predictions.apply names nothing for "impossible_task"`},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("predictions --json rows mismatch (-want +got):\n%s", diff)
	}
	if v.Model == nil || v.Model.PolicyVersion == v.Policy.Version {
		t.Errorf("predictions --json: model policy %v, policy in force %q, want them to differ", v.Model, v.Policy.Version)
	}
	if code, out, _ := e.run(nil, "predictions"); code != 0 || !strings.Contains(out, "until the next learning run applies") {
		t.Errorf("predictions after a policy change = %d, want the model's policy named as stale:\n%s", code, out)
	}

	// The model is learnt from every tenant: a tenant-limited caller is refused.
	if code, _, stderr := e.run(map[string]string{"DLQCTL_TENANT": "acme"}, "predictions"); code != exitUsage || !strings.Contains(stderr, "every tenant") {
		t.Errorf("acme: predictions = %d %q, want %d", code, stderr, exitUsage)
	}
	if code, _, _ := e.run(nil, "predictions", "extra"); code != exitUsage {
		t.Errorf("predictions extra = %d, want %d", code, exitUsage)
	}
}

// An override that does not parse is not in force: policy test current and
// predictions both evaluate the embedded default (policyInForce.doc), as a
// freshly started classify or replay would, and say so.
func TestInvalidOverrideIsNotInForce(t *testing.T) {
	e := newEnv(t)
	ctx := testenv.Context(t)
	if _, err := e.fs.Collection(store.PolicyOverrideCollection).Doc(store.PolicyOverrideDoc).Set(ctx, map[string]any{store.PolicyOverrideField: "reasons: ["}); err != nil {
		t.Fatal(err)
	}
	raw, err := event.Encode(event.Event{Schema: event.Schema, ID: "TASKS.7", Kind: event.KindExplicit, Stream: "TASKS", StreamSeq: 7, Tenant: "acme",
		Message: event.Message{Subject: "agents.backend.tasks.code_review", Data: []byte("{}"), Size: 2, SHA256: store.PayloadSum([]byte("{}"))},
		Failure: &event.Failure{Code: "timeout", Agent: "backend"}, ObservedAt: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	evFile := filepath.Join(t.TempDir(), "event.json")
	if err := os.WriteFile(evFile, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	def := triage.Default().Version()

	code, out, stderr := e.run(nil, "policy", "test", "current", evFile, "--json")
	var tr testResult
	if err := json.Unmarshal([]byte(out), &tr); code != 0 || err != nil {
		t.Fatalf("policy test current = %d %q %v:\n%s", code, stderr, err, out)
	}
	if tr.PolicyVersion != def || tr.PolicySource != "embedded default (the override is invalid)" {
		t.Errorf("policy test current = version %s from %q, want %s from the embedded default", tr.PolicyVersion, tr.PolicySource, def)
	}
	code, out, stderr = e.run(nil, "predictions", "--json")
	var v predictionsView
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil {
		t.Fatalf("predictions = %d %q %v:\n%s", code, stderr, err, out)
	}
	if v.Policy.Version != def || v.Policy.Source != "embedded default (the override is invalid)" {
		t.Errorf("predictions' policy = version %s from %q, want %s (the default, the override being invalid)", v.Policy.Version, v.Policy.Source, def)
	}
}
