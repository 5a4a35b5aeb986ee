package main

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/predict"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// TestPlanFollowsTheFieldMix checks the plan against the field figures' shares
// (docs/SCALING.md), within one task of rounding, and the demo's own
// constraints.
func TestPlanFollowsTheFieldMix(t *testing.T) {
	for _, tc := range []struct {
		total int
		rate  float64
	}{{300, 0.25}, {300, 0.2}, {1000, 0.3}, {40, 0.25}} {
		tasks, m := plan("r1", tc.total, tc.rate, 42)
		if len(tasks) != tc.total || m.Dead+m.Healthy+m.Overflowing+m.Looping != tc.total {
			t.Fatalf("plan(%d) = %d tasks, dead %d healthy %d", tc.total, len(tasks), m.Dead, m.Healthy)
		}
		near := func(what string, got int, share float64, of int) {
			if want := share * float64(of); math.Abs(float64(got)-want) > 1 {
				t.Errorf("plan(%d, %.2f): %s = %d, want %.1f (%.1f %% of %d)", tc.total, tc.rate, what, got, want, 100*share, of)
			}
		}
		near("transient", m.Transient+m.Persistent, 0.61, m.Dead)
		near("conditionally recoverable", m.Conditional, 0.246, m.Dead)
		near("permanent", m.Permanent, 0.144, m.Dead)
		near("context overflow path", m.ContextOK+m.ContextHuge, 0.14, m.Dead)
		near("filter rejection path", m.FilterRejection, 0.03, m.Dead)
		dead, rec := expectedRecovery(tasks, catTransient)
		near("transient recovering", rec, 0.89, dead)
		dead, rec = expectedRecovery(tasks, catConditional)
		near("conditionally recoverable recovering", rec, 0.62, dead)
		if _, rec := expectedRecovery(tasks, catPermanent); rec != 0 {
			t.Errorf("plan: %d permanent tasks expected to recover", rec)
		}

		ids := map[string]bool{}
		deadPerTenant := map[string]int{}
		for _, tk := range tasks {
			if ids[tk.ID] {
				t.Fatalf("task id %s twice", tk.ID)
			}
			ids[tk.ID] = true
			if !triage.SubjectMatches("agents.*.tasks.>", tk.Subject()) {
				t.Errorf("subject %s outside the work stream", tk.Subject())
			}
			if tk.Mode != "" {
				deadPerTenant[tk.Tenant] += tk.deaths()
				if tk.Agent == "ceo" {
					t.Errorf("task %s fails at ceo, the escalation target", tk.ID)
				}
			}
		}
		// Every death counts in the tenant's breaker: stay below it.
		for tenant, n := range deadPerTenant {
			if n >= store.DefaultBreaker.Threshold {
				t.Errorf("plan(%d, %.2f): tenant %s dies %d times; its breaker would open", tc.total, tc.rate, tenant, n)
			}
		}
	}
}

// TestPlanHasLongTasks: each phase gives every agent, the TypeScript one
// included, one healthy task that works longer than its ack deadline, and
// the summary fails a run in which one was redelivered mid-work.
func TestPlanHasLongTasks(t *testing.T) {
	tasks, _ := plan("r1", 300, 0.25, 42)
	long := map[string]int{}
	for _, tk := range tasks {
		if tk.WorkTime == 0 {
			continue
		}
		long[tk.Agent]++
		if tk.Mode != "" || tk.Class != "" || tk.WorkTime < 3*ackDeadline {
			t.Errorf("long task %+v: want a healthy task outside the learnable classes working at least 3× %s", tk, ackDeadline)
		}
		if _, h := tk.message(); event.Header(h, "X-Demo-Work-Time") != longWork.String() {
			t.Errorf("long task %s headers %v, want X-Demo-Work-Time %s", tk.ID, h, longWork)
		}
	}
	for _, agent := range fleet {
		if long[agent] != 1 {
			t.Errorf("agent %s has %d long tasks, want 1", agent, long[agent])
		}
	}
	for _, tk := range tasks {
		if tk.WorkTime > 0 {
			var s summary
			s.countLong(tasks, map[string]bool{tk.ID: true})
			if s.LongTasks != len(fleet) || s.LongRedelivered != 1 || s.ok() {
				t.Errorf("countLong(%s redelivered mid-work) = %d long, %d redelivered, ok %v; want %d, 1, not ok",
					tk.ID, s.LongTasks, s.LongRedelivered, s.ok(), len(fleet))
			}
			break
		}
	}
}

// TestDemoPolicy: the demo policy is valid, short, and treats the agent's
// silent failures as transient with the transient budget.
func TestDemoPolicy(t *testing.T) {
	p := parsedDemoPolicy(t, true)
	if set := p.Predictions(); !set.Enabled || set.MinSupport != minLearnable {
		t.Errorf("demoPolicy(true).Predictions() = %+v, want enabled with min_support %d", set, minLearnable)
	}
	if parsedDemoPolicy(t, false).Predictions().Enabled {
		t.Error("demoPolicy(false): predictions enabled, want off for the learning phase")
	}
	silent := triage.Input{Kind: "max_deliver", Stream: "TASKS", Subject: "agents.cto.tasks.debugging", Tenant: "t", Agent: "cto",
		TaskType: "debugging", Headers: map[string][]string{"X-Demo-Fail": {"silent"}}, Deliveries: 3}
	tests := []struct {
		name     string
		in       triage.Input
		chain    triage.Chain
		rule     string
		category triage.Category
		action   triage.Action
	}{
		{"silent first death", silent, triage.Chain{}, "demo-persistent-transient", triage.Transient, triage.AutoReplay},
		{"silent after three replays", silent, triage.Chain{Codes: []string{"unknown", "unknown", "unknown"}, Strategies: []string{"transient", "transient", "transient"}},
			"demo-persistent-transient", triage.Transient, triage.Escalate},
		{"timeout", triage.Input{Kind: "max_deliver", Subject: "agents.cto.tasks.debugging", Failure: &event.Failure{Code: "llm_provider_timeout"}},
			triage.Chain{}, "transient", triage.Transient, triage.AutoReplay},
		{"overflow", triage.Input{Kind: "explicit", Subject: "agents.cto.tasks.debugging", Failure: &event.Failure{Code: "context_window_overflow"}},
			triage.Chain{}, "context-overflow", triage.ConditionallyRecoverable, triage.AutoReplay},
		{"filter rejection", triage.Input{Kind: "explicit", Subject: "agents.cto.tasks.debugging", Failure: &event.Failure{Code: "consumer_filter_rejection"}},
			triage.Chain{}, "consumer-filter-rejection", triage.Permanent, triage.Escalate},
	}
	for _, tc := range tests {
		// Every demo task carries X-Task-ID (plan.go), so every entry has
		// an idempotency key: the keyless rule never holds one.
		tc.in.IdempotencyKey = "demo-task-v1"
		d := p.Evaluate(tc.in, tc.chain)
		if d.Rule != tc.rule || d.Category != tc.category || d.Action != tc.action {
			t.Errorf("%s: Evaluate = rule %s category %s action %s, want %s %s %s", tc.name, d.Rule, d.Category, d.Action, tc.rule, tc.category, tc.action)
		}
		if d.Delay > 5*time.Second {
			t.Errorf("%s: delay %s, want seconds", tc.name, d.Delay)
		}
	}
}

// TestSummary counts chains and entries, finds lost captures and duplicate
// executions.
func TestSummary(t *testing.T) {
	e := func(id, root, replayOf, cat, reason, kind string, st store.Status, replays int) *store.Entry {
		return &store.Entry{ID: id, EventID: id, RootID: root, ReplayOf: replayOf, Category: cat, ReasonCode: reason, Kind: kind, Status: st, Replays: replays}
	}
	entries := []*store.Entry{
		e("TASKS.1", "TASKS.1", "", catTransient, "timeout", "max_deliver", store.Recovered, 1),
		e("TASKS.2", "TASKS.2", "", catTransient, "unknown", "max_deliver", store.Replayed, 1),
		e("TASKS.9", "TASKS.2", "TASKS.2", catTransient, "unknown", "max_deliver", store.Escalated, 0),
		e("TASKS.3", "TASKS.3", "", catConditional, "context_window_overflow", "explicit", store.Replayed, 1),
		e("TASKS.8", "TASKS.3", "TASKS.3", catConditional, "context_window_overflow", "explicit", store.Quarantined, 0),
		e("TASKS.4", "TASKS.4", "", catPermanent, "consumer_filter_rejection", "explicit", store.Escalated, 0),
	}
	captured := map[string]bool{"TASKS.1": true, "TASKS.2": true, "TASKS.9": true, "TASKS.3": true, "TASKS.8": true, "TASKS.4": true, "TASKS.5": true}
	s := summarize(entries, captured)
	s.countExecutions(map[string]int{"a": 1, "b": 2})
	if s.DeadTotal != 4 || s.Resolved != 1 || s.DeadTasks[catTransient].Dead != 2 || s.DeadTasks[catTransient].Recovered != 1 {
		t.Errorf("dead tasks = %d resolved %d transient %+v", s.DeadTotal, s.Resolved, s.DeadTasks[catTransient])
	}
	if s.Entries[catTransient].Entries != 3 || s.Entries[catTransient].Replays != 2 || s.Entries[catConditional].OtherHuman != 1 {
		t.Errorf("entries = %+v %+v", s.Entries[catTransient], s.Entries[catConditional])
	}
	if s.Paths[pathMaxDeliver] != 2 || s.Paths[pathContext] != 1 || s.Paths[pathFilter] != 1 {
		t.Errorf("paths = %v", s.Paths)
	}
	if fmt.Sprint(s.Lost) != "[TASKS.5]" || s.DuplicatesExecuted != 1 || s.ok() {
		t.Errorf("lost %v duplicates %d ok %v; want TASKS.5 lost, 1 duplicate, not ok", s.Lost, s.DuplicatesExecuted, s.ok())
	}
	var out bytes.Buffer
	s.print(&out)
	for _, want := range []string{"LOST (captured, no entry): TASKS.5", "duplicates executed (work run twice for one idempotency key, from the agents' logs): 1", "transient"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}

// TestSummaryDecisions: the triage agent's answers are read from the
// entries' histories, timed from the entry's creation, and a chain its
// approval recovered is not counted as auto-resolved.
func TestSummaryDecisions(t *testing.T) {
	at := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	ceo := agentkit.TriageActor("ceo")
	e := func(id, root string, st store.Status, by string, after time.Duration, to store.Status) *store.Entry {
		en := &store.Entry{ID: id, EventID: id, RootID: root, Category: catPermanent, Kind: "explicit", Status: st, CreatedAt: at,
			History: []store.Transition{{At: at, To: string(store.Escalated), By: "classify"}}}
		if by != "" {
			en.History = append(en.History, store.Transition{At: at.Add(after), From: string(store.Escalated), To: string(to), By: by})
		}
		return en
	}
	entries := []*store.Entry{
		e("TASKS.1", "TASKS.1", store.Recovered, ceo, 2*time.Second, store.Scheduled),
		e("TASKS.2", "TASKS.2", store.Discarded, ceo, 4*time.Second, store.Discarded),
		e("TASKS.3", "TASKS.3", store.Discarded, "alice", time.Hour, store.Discarded), // a human, not the triage agent
		e("TASKS.4", "TASKS.4", store.Quarantined, "", 0, ""),
	}
	s := summarize(entries, map[string]bool{"TASKS.1": true, "TASKS.2": true, "TASKS.3": true, "TASKS.4": true})
	if len(s.Decisions) != 2 {
		t.Fatalf("decisions = %+v, want 2 (the triage agent's)", s.Decisions)
	}
	r := s.DeadTasks[catPermanent]
	if r.Recovered != 1 || r.HumanRecovered != 1 {
		t.Errorf("permanent = %+v, want 1 recovered, after an approval", r)
	}
	s.countSkipped(map[string]int{"demo-1": 1, "demo-2": 0})
	var out bytes.Buffer
	s.print(&out)
	for _, want := range []string{"2 entries needed one; approved/replayed 1, discarded 1", "median 2s, p95 4s",
		"1 replays skipped 1 steps", "of which after a triage approval"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 20; i++ {
		ds = append(ds, time.Duration(i)*time.Second)
	}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{{50, 10 * time.Second}, {95, 19 * time.Second}, {100, 20 * time.Second}} {
		if got := percentile(ds, tt.p); got != tt.want {
			t.Errorf("percentile(1..20 s, %v) = %s, want %s", tt.p, got, tt.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile(nil) = %s, want 0", got)
	}
}

// parsedDemoPolicy is the demo's policy, with or without predictions, as
// the engine reads it.
func parsedDemoPolicy(t *testing.T, predictions bool) *triage.Policy {
	t.Helper()
	doc, err := demoPolicy(predictions)
	if err != nil {
		t.Fatalf("demoPolicy(%v) = %v", predictions, err)
	}
	p, err := triage.Parse(doc)
	if err != nil {
		t.Fatalf("triage.Parse(demoPolicy(%v)) = %v", predictions, err)
	}
	return p
}

// learnPlan learns a model from one phase of the plan as the learner would
// from the pipeline: every task counted in its cells, every planned first
// death in them with its reason, under the demo policy.
func learnPlan(t *testing.T, tasks []task, at time.Time) predict.Model {
	t.Helper()
	pol := parsedDemoPolicy(t, true)
	stats := predict.Stats{}
	for _, tk := range tasks {
		f := features(tk, at)
		stats.AddTasks(f, 1)
		if r := tk.reason(); r != "" {
			stats.AddDeath(f, r)
		}
	}
	set := pol.Predictions()
	return predict.Learn(stats, predict.Options{MinSupport: set.MinSupport, Threshold: set.Threshold, Act: pol.Predicted, TrainedAt: at})
}

// features are a task's features as agentkit's Publish reads them from
// the message the demo publishes.
func features(tk task, at time.Time) predict.Features {
	payload, h := tk.message()
	return predict.FeaturesOf(event.DefaultConventions, tk.Subject(), h, len(payload), at)
}

// TestPlanIsLearnable: what the learning phase teaches treats the second
// phase's learnable classes and little else, for several seeds and sizes:
// the figures the demo's summary checks (the learnable classes lose at
// least half their dead tasks) follow from the plan, not from luck.
func TestPlanIsLearnable(t *testing.T) {
	at := time.Date(2026, 11, 23, 14, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		total int
		seed  uint64
	}{{300, 1}, {300, 42}, {300, 7}, {600, 3}, {100, 5}} {
		learning, _ := plan("r1-1", tc.total, 0.25, tc.seed)
		predicting, _ := plan("r1-2", tc.total, 0.25, tc.seed)
		model := learnPlan(t, learning, at)
		p := &phase{Tasks: predicting, Published: map[string]agentkit.Published{}}
		// The second phase: a treated task of a learnable class does not
		// die (the strategy fixes it, as the demo agent does); every other
		// planned failure dies.
		var entries []*store.Entry
		for _, tk := range predicting {
			row, ok := model.Lookup(features(tk, at))
			p.Published[tk.ID] = agentkit.Published{Predicted: ok, Prediction: row}
			if tk.Mode != "" && !(ok && row.Action != "" && tk.Class != "") {
				entries = append(entries, &store.Entry{TaskID: tk.ID})
			}
		}
		var learnt []*store.Entry
		for _, tk := range learning {
			if tk.Mode != "" {
				learnt = append(learnt, &store.Entry{TaskID: tk.ID})
			}
		}
		f := comparePhases(&phase{Tasks: learning}, p, append(learnt, entries...), nil)
		name := fmt.Sprintf("plan(%d, seed %d)", tc.total, tc.seed)
		if !f.ok() || f.Predicting[classAll].Dead != 0 {
			t.Errorf("%s: learnable dead tasks %d → %d, want all of them treated", name, f.Learning[classAll].Dead, f.Predicting[classAll].Dead)
		}
		if f.LearnableCaught != f.LearnableFailing || f.LearnableFailing == 0 {
			t.Errorf("%s: recall on the learnable classes %d of %d, want all", name, f.LearnableCaught, f.LearnableFailing)
		}
		// Only the learnable cells are acted on: the random failures are
		// spread too thin to reach the threshold.
		if f.Acted != f.LearnableCaught || f.Right != f.Acted {
			t.Errorf("%s: acted on %d tasks, %d planned to fail, %d of the learnable classes; want only the learnable ones\n%s",
				name, f.Acted, f.Right, f.LearnableCaught, describeModel(model))
		}
	}
}

// TestPredictionFigures: the side-by-side figures count dead tasks by task
// id and wasted deliveries from the agents' logs, precision and recall
// from what Publish did against the plan, and the verdict fails when the
// learnable classes do not lose half their dead tasks.
func TestPredictionFigures(t *testing.T) {
	mk := func(id, class, mode string) task { return task{ID: id, Class: class, Mode: mode} }
	acted := agentkit.Published{Predicted: true, Prediction: predict.Prediction{Action: predict.ActionStrategy}}
	advisory := agentkit.Published{Predicted: true, Prediction: predict.Prediction{Reason: "llm_provider_timeout"}}
	learning := &phase{Tasks: []task{mk("a1", classOverflow, modeContext), mk("a2", classOverflow, modeContext), mk("a3", classLoop, modeHallucination),
		mk("a4", "", modeTransient), mk("a5", "", "")}}
	predicting := &phase{Tasks: []task{mk("b1", classOverflow, modeContext), mk("b2", classOverflow, modeContext), mk("b3", classLoop, modeHallucination),
		mk("b4", "", modeTransient), mk("b5", "", ""), mk("b6", "", "")},
		Published: map[string]agentkit.Published{"b1": acted, "b2": acted, "b3": {}, "b4": advisory, "b6": acted}}
	entries := []*store.Entry{{TaskID: "a1"}, {TaskID: "a2"}, {TaskID: "a3"}, {TaskID: "a4"}, {TaskID: "b3"}, {TaskID: "b4"}, {TaskID: "b4"}}
	wasted := map[string]int{"a1": 1, "a2": 1, "a3": 1, "a4": 3, "b3": 1, "b4": 3}
	f := comparePhases(learning, predicting, entries, wasted)
	want := predictionFigures{
		Learning: map[string]*classFigures{classOverflow: {Tasks: 2, Dead: 2, Wasted: 2}, classLoop: {Tasks: 1, Dead: 1, Wasted: 1},
			classAll: {Tasks: 3, Dead: 3, Wasted: 3}},
		Predicting: map[string]*classFigures{classOverflow: {Tasks: 2, Treated: 2}, classLoop: {Tasks: 1, Dead: 1, Wasted: 1},
			classAll: {Tasks: 3, Dead: 1, Wasted: 1, Treated: 2}},
		Acted: 3, Right: 2, Failing: 4, Caught: 2, LearnableFailing: 3, LearnableCaught: 2, Advisory: 1,
	}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("comparePhases() mismatch (-want +got):\n%s", diff)
	}
	if !f.ok() {
		t.Error("ok() = false for 3 → 1 dead tasks, want true")
	}
	var out bytes.Buffer
	f.print(&out)
	for _, w := range []string{"dead tasks of the learnable classes: 3 → 1 (67 % fewer); wasted deliveries: 3 → 1",
		"precision 67 %; recall 67 % of the learnable classes' failures (2 of 3), 50 % of all failures (2 of 4", "1 more only marked"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("print() lacks %q:\n%s", w, out.String())
		}
	}
	// One treated task fewer: 3 → 2 is not half.
	predicting.Published["b1"] = agentkit.Published{}
	entries = append(entries, &store.Entry{TaskID: "b1"})
	f = comparePhases(learning, predicting, entries, wasted)
	s := summary{Predictions: &f, Captured: 1, EntryCount: 1}
	if f.ok() || s.ok() {
		t.Errorf("ok() = %v, summary ok() = %v for 3 → 2 dead tasks, want false", f.ok(), s.ok())
	}
	out.Reset()
	f.print(&out)
	if !strings.Contains(out.String(), "PREDICTIONS FELL SHORT") {
		t.Errorf("print() of a shortfall lacks the verdict:\n%s", out.String())
	}
}

// The summary's and the predictions' percentages differ only in their
// precision; nothing of nothing is no percentage.
func TestPercent(t *testing.T) {
	tests := []struct {
		n, d, decimals int
		want           string
	}{
		{2, 3, 0, "67 %"},
		{2, 3, 1, "66.7 %"},
		{3, 3, 1, "100.0 %"},
		{0, 0, 1, "-"},
	}
	for _, tt := range tests {
		if got := percent(tt.n, tt.d, tt.decimals); got != tt.want {
			t.Errorf("percent(%d, %d, %d) = %q, want %q", tt.n, tt.d, tt.decimals, got, tt.want)
		}
	}
}

// The demo's count of the resolution figures agrees with counters that
// count the same moves, and disagrees when a counter is off.
func TestResolutionAgrees(t *testing.T) {
	created := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	entries := []*store.Entry{
		{ID: "a", Category: "transient", Status: store.Recovered, CreatedAt: created, History: []store.Transition{
			{At: created, To: "scheduled"}, {At: created.Add(time.Minute), From: "scheduled", To: "replaying"},
			{At: created.Add(2 * time.Minute), From: "replaying", To: "replayed"}, {At: created.Add(3 * time.Minute), From: "replayed", To: "recovered"}}},
		{ID: "b", Category: "permanent", Status: store.Discarded, CreatedAt: created, History: []store.Transition{
			{At: created, To: "escalated"}, {At: created.Add(time.Hour), From: "escalated", To: "discarded", Role: "triage_agent"}}},
	}
	counters := store.Outcomes{
		Settled: map[string]int64{"transient": 1, "permanent": 1}, Recovered: map[string]int64{"transient": 1}, Auto: map[string]int64{"transient": 1},
		ToDecision: map[string]int64{store.SketchBucket(time.Hour): 1}, ToRecovery: map[string]int64{store.SketchBucket(3 * time.Minute): 1},
	}
	if r := countResolution(entries, counters); !r.agrees() {
		t.Errorf("agrees() = false for counters of the same moves: %+v", r)
	}
	counters.Auto["transient"] = 0
	if r := countResolution(entries, counters); r.agrees() {
		t.Error("agrees() = true with an auto-resolved count off by one")
	}
	before := store.Outcomes{Settled: map[string]int64{"transient": 5}, Claimed: 2}
	after := store.Outcomes{Settled: map[string]int64{"transient": 6}, Claimed: 3}
	if got := minus(after, before); got.Settled["transient"] != 1 || got.Claimed != 1 {
		t.Errorf("minus() = %+v, want the run's 1 settled and 1 claimed", got)
	}
}
