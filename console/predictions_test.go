package console_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/predict"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// The predictions page shows the model and, per row, how the policy in
// force treats it; a policy that switches an agent off shows at once, while
// the model's own action stands until the next learning run. It changes
// nothing.
func TestPredictionsPage(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	ctx := testenv.Context(t)
	b := newBrowser(t, e.srv.URL)
	before := e.snapshot(t)

	code, body := b.get("/predictions")
	if code != 200 || !strings.Contains(body, `id="predictions-none"`) || cell(t, body, "predictions-enabled") != "enabled" ||
		cell(t, body, "predictions-min-support") != "20" || !strings.Contains(body, `href="/predictions" class="on"`) {
		t.Fatalf("GET /predictions before a model = %d, want no model, the default's settings and the nav link on:\n%s", code, body)
	}

	def := triage.Default()
	row := func(agent, taskType, reason string, tasks, deaths int64) predict.Prediction {
		r := predict.Prediction{Key: predict.Key{Agent: agent, TaskType: taskType, Feature: predict.FeatureAll, Bucket: predict.BucketAll}, Tasks: tasks,
			Deaths: deaths, Probability: float64(deaths) / float64(tasks), Confidence: predict.Wilson(deaths, tasks, predict.DefaultZ),
			Reason: reason, ReasonShare: 1}
		if a, ok := def.Predicted(agent, taskType, reason); ok {
			r.Action, r.Strategy, r.Replay, r.AlternateAgent = a.Action, a.Strategy, a.Replay, a.AlternateAgent
		}
		return r
	}
	m := predict.Model{TrainedAt: time.Now().UTC(), PolicyVersion: def.Version(), MinSupport: 20, Threshold: 0.5, Cells: 9,
		Predictions: []predict.Prediction{
			row("marketing", "social_media", "hallucination_loop", 30, 27),
			row("devops", "deployment", "context_window_overflow", 30, 25),
			row("cso", "compliance", "impossible_task", 30, 25),
		}}
	if _, err := e.st.SavePredictionModel(ctx, m); err != nil {
		t.Fatal(err)
	}
	check := func(when string, want map[string]string) {
		t.Helper()
		code, body := b.get("/predictions")
		if code != 200 {
			t.Fatalf("GET /predictions %s = %d:\n%s", when, code, body)
		}
		for id, v := range want {
			if got := cell(t, body, id); got != v {
				t.Errorf("GET /predictions %s: %s = %q, want %q", when, id, got, v)
			}
		}
	}
	check("with a model", map[string]string{
		"model-version": "1",
		"row-0-action":  "strategy hallucination_loop", "row-0-now": "strategy hallucination_loop applied before the first attempt, handed to ceo",
		"row-1-action": "strategy context_window_overflow", "row-1-now": "strategy context_window_overflow applied before the first attempt",
		"row-2-action": "advisory", "row-2-now": `advisory: predictions.apply names nothing for "impossible_task"`,
	})

	if _, err := e.st.SavePolicyOverride(ctx, testenv.WithRules(t, triage.DefaultYAML(), testenv.NoPredictionsDevops)); err != nil {
		t.Fatal(err)
	}
	check("after devops was switched off", map[string]string{
		"row-1-action": "strategy context_window_overflow", "row-1-now": "switched off by rule no-predictions-devops",
	})
	if _, body := b.get("/predictions"); !strings.Contains(body, `id="predictions-stale"`) {
		t.Error("GET /predictions after a policy change does not say the model was written under another policy")
	}
	if code, _ := b.get("/predictions?agent=devops"); code != http.StatusBadRequest {
		t.Errorf("GET /predictions?agent=devops = %d, want 400", code)
	}
	if diff := diffSnap(before, e.snapshot(t)); diff != "" {
		t.Errorf("the predictions page changed state: %s", diff)
	}
	if got, err := e.st.PredictionModel(ctx); err != nil || got.Version != 1 {
		t.Errorf("PredictionModel() after the page = version %d, %v, want version 1 unchanged", got.Version, err)
	}
}
