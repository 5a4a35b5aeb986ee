package triage

import (
	"fmt"
	"maps"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/jsdlq/jsdlq/shared/predict"
)

// predictionsDoc is the policy's predictions: section.
type predictionsDoc struct {
	Enabled    bool    `yaml:"enabled"`
	MinSupport int64   `yaml:"min_support"`
	Threshold  float64 `yaml:"threshold"`
	// Apply names, per predicted reason code, the strategy applied before
	// the first attempt or "dlq".
	Apply map[string]string `yaml:"apply,omitempty"`
}

// PredictionSettings is the policy's predictions: section as the learner
// and the operators' views read it.
type PredictionSettings struct {
	// Enabled is false when the policy has no predictions: section or says
	// enabled: false; then Predicted never applies anything.
	Enabled bool
	// MinSupport is how many tasks a row of the model needs.
	MinSupport int64
	// Threshold is the confidence (the lower bound of the failure
	// probability) from which a prediction is acted on.
	Threshold float64
	// Apply is, per predicted reason code, a strategy name or
	// predict.ActionDLQ.
	Apply map[string]string
}

// predictions is the compiled section.
type predictions struct {
	PredictionSettings
	strategies map[string]Strategy // by reason code, for predict.ActionStrategy
}

// Switch is a rule's predictions: on or off (YAML on/off, true/false).
type Switch string

// Switch values; "" is on.
const (
	SwitchOn  Switch = "on"
	SwitchOff Switch = "off"
)

// Off reports whether the switch turns predictions off.
func (s Switch) Off() bool { return s == SwitchOff }

// UnmarshalYAML reads on/off and true/false, so `predictions: off` reads the
// same whether a YAML library takes off for a string or a boolean.
func (s *Switch) UnmarshalYAML(n *yaml.Node) error {
	switch n.Value {
	case "off", "false":
		*s = SwitchOff
	case "on", "true":
		*s = SwitchOn
	default:
		return fmt.Errorf("line %d: predictions: %q is not on or off", n.Line, n.Value)
	}
	return nil
}

// Predictions returns the policy's predictions: section.
func (p *Policy) Predictions() PredictionSettings {
	s := p.predict.PredictionSettings
	s.Apply = maps.Clone(s.Apply)
	return s
}

// Predicted is what the policy does before the first attempt with a task of
// agent and taskType predicted to die with reason: the strategy named for the
// reason in predictions.apply (predict.ActionStrategy: its headers made as a
// replay's are, and the alternate agent of alternate_agent), or the DLQ
// (predict.ActionDLQ). It is the learner's predict.Options.Act. ok is false when predictions are off (the section, or a rule with
// predictions: off matching the agent, task type, reason or its category)
// or the policy names nothing for the reason. Whether a prediction is
// confident enough is the learner's question (Threshold, MinSupport).
func (p *Policy) Predicted(agent, taskType, reason string) (predict.Action, bool) {
	pr := p.predict
	name, ok := pr.Apply[reason]
	if !pr.Enabled || !ok {
		return predict.Action{}, false
	}
	if p.switchedOff(agent, taskType, reason) != "" {
		return predict.Action{}, false
	}
	if name == predict.ActionDLQ {
		return predict.Action{Action: predict.ActionDLQ}, true
	}
	s := pr.strategies[reason]
	in := Input{Agent: agent, TaskType: taskType}
	m := p.modifications(s, in, Decision{ReasonCode: reason, Detail: "tasks like this one often fail with " + reason})
	return predict.Action{Action: predict.ActionStrategy, Strategy: s.Name, Replay: m.Replay("", 0, s.Name, nil),
		AlternateAgent: m.AlternateAgent}, true
}

// switchedOff is the name of the first rule with predictions: off that
// matches agent, taskType and reason, or "".
func (p *Policy) switchedOff(agent, taskType, reason string) string {
	in := Input{Agent: agent, TaskType: taskType}
	d := Decision{ReasonCode: reason, Category: p.Category(reason)}
	for _, r := range p.rules {
		// Validation keeps the match of such rules to what is known
		// before the first attempt, so the engine's own matcher decides.
		if r.doc.Predictions.Off() && p.matches(r, in, Chain{}, d) {
			return r.doc.Name
		}
	}
	return ""
}

// PredictionUse is how the policy treats one row of a prediction model:
// what it would have the pre-flight do now, and why.
type PredictionUse struct {
	// Action is the policy's action for the row (Action "" when none).
	Action predict.Action
	// Why explains it in a sentence for operators.
	Why string
}

// Use tells how the policy treats row: disabled, too little support, not
// confident enough, a reason it names nothing for (advisory), switched off
// by a rule, or the action Predicted gives. The model's own row carries
// the action the learner wrote under the policy of its time; operators see
// both (dlqctl predictions, the console).
func (p *Policy) Use(row predict.Prediction) PredictionUse {
	set := p.predict.PredictionSettings
	switch {
	case !set.Enabled:
		return PredictionUse{Why: "predictions are disabled (predictions.enabled)"}
	case row.Tasks < set.MinSupport:
		return PredictionUse{Why: fmt.Sprintf("advisory: %d tasks, below min_support %d", row.Tasks, set.MinSupport)}
	case row.Confidence < set.Threshold:
		return PredictionUse{Why: fmt.Sprintf("advisory: confidence %.2f below threshold %.2f", row.Confidence, set.Threshold)}
	}
	if !row.ReasonDominates() {
		return PredictionUse{Why: fmt.Sprintf("advisory: %q is %.0f %% of the deaths, below %.0f %%", row.Reason, 100*row.ReasonShare, 100*predict.MinReasonShare)}
	}
	if _, ok := set.Apply[row.Reason]; !ok {
		return PredictionUse{Why: fmt.Sprintf("advisory: predictions.apply names nothing for %q", row.Reason)}
	}
	a, ok := p.Predicted(row.Agent, row.TaskType, row.Reason)
	if !ok {
		return PredictionUse{Why: fmt.Sprintf("switched off by rule %s", p.switchedOff(row.Agent, row.TaskType, row.Reason))}
	}
	if a.Action == predict.ActionDLQ {
		return PredictionUse{Action: a, Why: "sent to the DLQ before its first attempt (reason " + predict.ReasonPredictedFailure + ")"}
	}
	why := "strategy " + a.Strategy + " applied before the first attempt"
	if a.AlternateAgent != "" {
		why += ", handed to " + a.AlternateAgent
	}
	return PredictionUse{Action: a, Why: why}
}

func compilePredictions(v *validator, d *document) predictions {
	out := predictions{strategies: map[string]Strategy{}}
	pd := d.Predictions
	if pd == nil {
		return out
	}
	out.PredictionSettings = PredictionSettings{Enabled: pd.Enabled, MinSupport: pd.MinSupport, Threshold: pd.Threshold,
		Apply: maps.Clone(pd.Apply)}
	if pd.MinSupport < 1 {
		v.add("predictions.min_support", "%d is less than 1 (a row of the model needs at least one task)", pd.MinSupport)
	}
	if pd.Threshold <= 0 || pd.Threshold > 1 {
		v.add("predictions.threshold", "%v is not in (0, 1] (it is compared with a probability)", pd.Threshold)
	}
	for _, reason := range slices.Sorted(maps.Keys(pd.Apply)) {
		where, name := "predictions.apply."+reason, pd.Apply[reason]
		if _, ok := d.Reasons[reason]; !ok {
			v.add(where, "reason code %q is not in reasons", reason)
		}
		if reason == predict.ReasonPredictedFailure {
			v.add(where, "%s is the reason of tasks the predictions sent to the DLQ; it is not predicted", reason)
		}
		if name == predict.ActionDLQ {
			continue
		}
		s, ok := d.Strategies[name]
		switch {
		case !ok:
			v.add(where, "%q is neither dlq nor a strategy defined in strategies", name)
		case !s.changesTask():
			v.add(where, "strategy %q changes nothing about the task (no instructions, model, context or output budget, or other agent)", name)
		}
		s.Name = name
		out.strategies[reason] = s
	}
	return out
}

// changesTask reports whether the strategy modifies a task; a strategy that
// only waits (delay, replays) means nothing before the first attempt.
func (s Strategy) changesTask() bool {
	return len(s.Instructions) > 0 || s.TargetModel != "" || s.MaxContextTokens > 0 || s.OutputTokenFactor > 0 || s.AlternateAgent
}

// checkPredictionSwitch validates a rule with predictions: off. It is
// applied before the first attempt, when only the agent, the task type and
// the predicted reason (so its category) are known: a match on anything
// else could never be decided then.
func checkPredictionSwitch(v *validator, where string, rd ruleDoc) {
	m := rd.Match
	unknown := map[string]bool{
		"kind": len(m.Kind) > 0, "stream": len(m.Stream) > 0, "subject": len(m.Subject) > 0,
		"tenant": len(m.Tenant) > 0, "headers": len(m.Headers) > 0, "reason_text": m.ReasonText != "",
		"chain_failures_at_least": m.ChainFailuresAtLeast != 0, "seen_in_chain": len(m.SeenInChain) > 0,
		"completed_steps": m.CompletedSteps != nil, "tool_failure": m.ToolFailure != nil,
	}
	for _, k := range slices.Sorted(maps.Keys(unknown)) {
		if unknown[k] {
			v.add(where+": match."+k, "a rule with predictions: off may match only agent, task_type, reason_code and category (what is known before the first attempt)")
		}
	}
	if rd.Action != "" {
		return
	}
	// Without an action the rule only switches predictions off.
	if rd.Strategy.Ref != "" || rd.Strategy.Inline != nil || rd.SetCategory != "" || rd.EscalateTo != "" || rd.Retention != "" {
		v.add(where, "a rule without an action only switches predictions off; give it an action or remove strategy, set_category, escalate_to and retention")
	}
}
