package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/predict"
	"github.com/jsdlq/jsdlq/shared/predict/learner"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// This file is the demo's predictions (docs/predictions.md): the plan runs
// twice, a learning phase with the predictions switched off by the policy,
// then the learner, then the same mix with them on; the summary compares
// the learnable classes across the phases.

// phase is one pass of the plan through the fleet.
type phase struct {
	Name  string
	Tasks []task
	// Published is what agentkit's Publish did with each task, by id.
	Published map[string]agentkit.Published
}

// publish publishes the phase's tasks through agentkit's Publish: its
// pre-flight counts each task for the learner and, once there is a model,
// treats the tasks it predicts to die.
func (d *demo) publish(ctx context.Context, p *phase) error {
	p.Published = make(map[string]agentkit.Published, len(p.Tasks))
	for _, t := range p.Tasks {
		payload, h := t.message()
		res, err := d.kit.Publish(ctx, t.Subject(), payload, h)
		if err != nil {
			return fmt.Errorf("publish %s: %w", t.ID, err)
		}
		p.Published[t.ID] = res
	}
	// The learner reads the counts from Firestore: write them now rather
	// than at the next flush.
	if err := d.kit.FlushCounts(ctx); err != nil {
		return fmt.Errorf("write the task counts: %w", err)
	}
	return nil
}

// applyPolicy stores the demo policy with the predictions on or off and
// returns it parsed.
func (d *demo) applyPolicy(ctx context.Context, fs *firestore.Client, predictions bool) (*triage.Policy, error) {
	doc, err := demoPolicy(predictions)
	if err != nil {
		return nil, err
	}
	if _, err := triage.SaveOverride(ctx, fs, doc); err != nil {
		return nil, fmt.Errorf("apply the demo policy: %w", err)
	}
	return triage.ParseOverride(doc)
}

// learn runs the learner reconcile runs at the end of its runs, forced,
// under pol. The learner folds only the task counts of closed hours; the
// demo does not wait for the hour to close: with closeHour its clock reads
// the start of the next hour, so this hour's counts are folded now (and
// the model's trained-at time is that moment).
func (d *demo) learn(ctx context.Context, pol *triage.Policy, closeHour bool) (learner.Result, error) {
	var cfg learner.Config
	if closeHour {
		now := time.Now()
		shift := now.Truncate(time.Hour).Add(time.Hour).Sub(now) + time.Second
		cfg.Now = func() time.Time { return time.Now().Add(shift) }
		cfg.Settle = time.Nanosecond // every phase-one entry is committed: the phase settled
	}
	res, err := learner.Learn(ctx, d.st, pol, cfg, true)
	if err != nil {
		return res, fmt.Errorf("learn the predictions: %w", err)
	}
	return res, nil
}

// classFigures are one learnable class's in one phase.
type classFigures struct {
	Tasks int
	// Dead: tasks that died at least once.
	Dead int
	// Wasted: deliveries that did not complete the task's work (NAKed or
	// terminated), replays included.
	Wasted int
	// Treated: tasks the pre-flight changed or routed before their first
	// attempt.
	Treated int
}

// classAll is the row of every learnable class together.
const classAll = "all"

// learnableClasses in the order the summary shows them.
var learnableClasses = []string{classOverflow, classLoop}

// predictionFigures compare the learnable classes across the phases and
// measure the second phase's predictions against the plan.
type predictionFigures struct {
	// Model is what the learner wrote after the learning phase: its
	// version, rows and rows acted on.
	ModelVersion        int64
	ModelRows, ActedRow int
	// Learning and Predicting are by class, and classAll.
	Learning, Predicting map[string]*classFigures
	// Acted: second-phase tasks the pre-flight acted on (a strategy or
	// the DLQ); Right: those the plan made fail.
	Acted, Right int
	// Failing: second-phase tasks the plan made fail; Caught: of which
	// acted on. LearnableFailing and LearnableCaught the same for the
	// learnable classes.
	Failing, Caught                   int
	LearnableFailing, LearnableCaught int
	// Advisory: second-phase tasks only marked (Jsdlq-Predicted-*).
	Advisory int
}

// figures counts, for one phase, its learnable classes' dead tasks (from
// the entries, by task id) and wasted deliveries (from the agents' logs).
func figures(p *phase, dead map[string]bool, wasted map[string]int) map[string]*classFigures {
	out := map[string]*classFigures{classAll: {}}
	for _, c := range learnableClasses {
		out[c] = &classFigures{}
	}
	for _, t := range p.Tasks {
		if t.Class == "" {
			continue
		}
		for _, f := range []*classFigures{out[t.Class], out[classAll]} {
			f.Tasks++
			f.Wasted += wasted[t.ID]
			if dead[t.ID] {
				f.Dead++
			}
			if pub, ok := p.Published[t.ID]; ok && pub.Predicted && pub.Prediction.Action != "" {
				f.Treated++
			}
		}
	}
	return out
}

// comparePhases computes the figures of the two phases. entries are the
// run's failure-log entries, wasted the deliveries per task id that did not
// complete the work.
func comparePhases(learning, predicting *phase, entries []*store.Entry, wasted map[string]int) predictionFigures {
	dead := map[string]bool{}
	for _, e := range entries {
		dead[e.TaskID] = true
	}
	f := predictionFigures{Learning: figures(learning, dead, wasted), Predicting: figures(predicting, dead, wasted)}
	for _, t := range predicting.Tasks {
		pub := predicting.Published[t.ID]
		acted := pub.Predicted && pub.Prediction.Action != ""
		fails := t.Mode != ""
		switch {
		case acted:
			f.Acted++
			if fails {
				f.Right++
			}
		case pub.Predicted:
			f.Advisory++
		}
		if fails {
			f.Failing++
			if acted {
				f.Caught++
			}
			if t.Class != "" {
				f.LearnableFailing++
				if acted {
					f.LearnableCaught++
				}
			}
		}
	}
	return f
}

// ok is the predictions' verdict: with the predictions on, the learnable
// classes lose at least half their dead tasks.
func (f predictionFigures) ok() bool {
	before, after := f.Learning[classAll].Dead, f.Predicting[classAll].Dead
	return before > 0 && 2*after <= before
}

// classNames describe the learnable classes.
var classNames = map[string]string{
	classOverflow: fmt.Sprintf("context overflow (%s/%s with a large context)", overflowAgent, overflowType),
	classLoop:     fmt.Sprintf("hallucination loop (%s/%s)", loopAgent, loopType),
	classAll:      "all learnable classes",
}

func (f predictionFigures) print(w io.Writer) {
	fmt.Fprintf(w, "predictions: the learner's model version %d after the learning phase: %d rows, %d acted on\n\n",
		f.ModelVersion, f.ModelRows, f.ActedRow)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LEARNABLE CLASS\tphase\ttasks\tdead\twasted deliveries\ttreated before the first attempt")
	for _, c := range append(learnableClasses, classAll) {
		for i, ph := range []map[string]*classFigures{f.Learning, f.Predicting} {
			name, phaseName := classNames[c], "learning (predictions off)"
			if i == 1 {
				name, phaseName = "", "predictions on"
			}
			r := ph[c]
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\n", name, phaseName, r.Tasks, r.Dead, r.Wasted, r.Treated)
		}
	}
	tw.Flush()
	before, after := f.Learning[classAll], f.Predicting[classAll]
	fmt.Fprintf(w, "dead tasks of the learnable classes: %d → %d (%s fewer); wasted deliveries: %d → %d\n", before.Dead, after.Dead,
		percent(before.Dead-after.Dead, before.Dead, 0), before.Wasted, after.Wasted)
	fmt.Fprintf(w, "predictions on: acted on %d tasks, %d of which the plan made fail: precision %s; recall %s of the learnable classes' failures (%d of %d), %s of all failures (%d of %d; transient and random ones are not predictable); %d more only marked (advisory)\n",
		f.Acted, f.Right, percent(f.Right, f.Acted, 0), percent(f.LearnableCaught, f.LearnableFailing, 0), f.LearnableCaught, f.LearnableFailing,
		percent(f.Caught, f.Failing, 0), f.Caught, f.Failing, f.Advisory)
	if !f.ok() {
		fmt.Fprintln(w, "  PREDICTIONS FELL SHORT: the learnable classes did not lose half their dead tasks")
	}
	fmt.Fprintln(w)
}

// noteModel notes the model's size in f.
func (f *predictionFigures) noteModel(m predict.Model) {
	f.ModelVersion, f.ModelRows = m.Version, len(m.Predictions)
	for _, p := range m.Predictions {
		if p.Action != "" {
			f.ActedRow++
		}
	}
}

// describeModel is one line per row acted on, for the log.
func describeModel(m predict.Model) string {
	var rows []string
	for _, p := range m.Predictions {
		if p.Action == "" {
			continue
		}
		rows = append(rows, fmt.Sprintf("%s/%s %s=%s → %s (%d of %d died, confidence %.2f, %s %s)", p.Agent, p.TaskType, p.Feature, p.Bucket,
			p.Reason, p.Deaths, p.Tasks, p.Confidence, p.Action, p.Strategy))
	}
	if len(rows) == 0 {
		return "none"
	}
	return strings.Join(rows, "; ")
}
