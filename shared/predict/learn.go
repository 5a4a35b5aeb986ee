package predict

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/jsdlq/jsdlq/shared/event"
)

// ReasonPredictedFailure is the reason code of a task a prediction sent to
// the DLQ before its first attempt (the policy's reasons name it too).
const ReasonPredictedFailure = event.ReasonPredictedFailure

// What a prediction does with a task before its first attempt
// (Prediction.Action); "" is advisory: the task is only marked.
const (
	ActionStrategy = "strategy"
	ActionDLQ      = "dlq"
)

// Cell counts the tasks of one Key and the deaths among them by reason.
type Cell struct {
	Tasks   int64            `json:"tasks" firestore:"tasks"`
	Deaths  int64            `json:"deaths" firestore:"deaths"`
	Reasons map[string]int64 `json:"reasons,omitempty" firestore:"reasons,omitempty"`
}

// Stats are cells by key.
type Stats map[Key]Cell

// AddTasks counts n tasks with features f.
func (s Stats) AddTasks(f Features, n int64) {
	for _, k := range f.Keys() {
		c := s[k]
		c.Tasks += n
		s[k] = c
	}
}

// AddDeath counts the death of a task with features f with reason.
func (s Stats) AddDeath(f Features, reason string) {
	for _, k := range f.Keys() {
		c := s[k]
		c.Deaths++
		if c.Reasons == nil {
			c.Reasons = map[string]int64{}
		}
		c.Reasons[reason]++
		s[k] = c
	}
}

// Add adds c to the cell of k.
func (s Stats) Add(k Key, c Cell) { s.Merge(Stats{k: c}) }

// Merge adds o's counts to s.
func (s Stats) Merge(o Stats) {
	for k, oc := range o {
		c := s[k]
		c.Tasks += oc.Tasks
		c.Deaths += oc.Deaths
		for r, n := range oc.Reasons {
			if c.Reasons == nil {
				c.Reasons = map[string]int64{}
			}
			c.Reasons[r] += n
		}
		s[k] = c
	}
}

// Action is what the policy does before the first attempt with a task
// predicted to die with a reason (triage.Policy.Predicted).
type Action struct {
	Action         string
	Strategy       string
	Replay         event.Replay
	AlternateAgent string
}

// Options of Learn.
type Options struct {
	// MinSupport is the number of tasks a cell needs to predict anything
	// (default DefaultMinSupport).
	MinSupport int64
	// Threshold is the confidence from which a cell is a prediction
	// (default DefaultThreshold).
	Threshold float64
	// Z is the normal quantile of the confidence bound (default 1.96, 95 %).
	Z float64
	// MaxPredictions bounds the model's rows (default DefaultMaxPredictions)
	// so that its document stays small and cheap to read: acted-on rows
	// are kept before advisory ones, then the most confident.
	MaxPredictions int
	// Act is the policy's action for a predicted reason; nil or !ok leaves
	// the prediction advisory.
	Act func(agent, taskType, reason string) (Action, bool)
	// Version, TrainedAt and PolicyVersion are copied into the model.
	Version       int64
	TrainedAt     time.Time
	PolicyVersion string
}

// Defaults of Options.
const (
	DefaultMinSupport     = 30
	DefaultThreshold      = 0.5
	DefaultZ              = 1.96
	DefaultMaxPredictions = 1000
)

func (o Options) withDefaults() Options {
	if o.MinSupport < 1 {
		o.MinSupport = DefaultMinSupport
	}
	if o.Threshold <= 0 {
		o.Threshold = DefaultThreshold
	}
	if o.Z <= 0 {
		o.Z = DefaultZ
	}
	if o.MaxPredictions <= 0 {
		o.MaxPredictions = DefaultMaxPredictions
	}
	return o
}

// Model is the learnt predictions: one versioned document, read by
// agentkit on a timer and shown to operators.
type Model struct {
	Version       int64     `json:"version" firestore:"version"`
	TrainedAt     time.Time `json:"trained_at" firestore:"trained_at"`
	PolicyVersion string    `json:"policy_version,omitempty" firestore:"policy_version,omitempty"`
	MinSupport    int64     `json:"min_support" firestore:"min_support"`
	Threshold     float64   `json:"threshold" firestore:"threshold"`
	// Cells is how many cells the statistics held, Predictions the ones
	// confident enough.
	Cells       int          `json:"cells" firestore:"cells"`
	Predictions []Prediction `json:"predictions" firestore:"predictions"`
}

// Prediction is one flagged cell: tasks of Agent and TaskType in Bucket of
// Feature die with Probability (at least Confidence), mostly of Reason.
type Prediction struct {
	// Key is the cell, stored flat (Firestore and JSON both flatten an
	// embedded struct).
	Key
	Tasks       int64   `json:"tasks" firestore:"tasks"`
	Deaths      int64   `json:"deaths" firestore:"deaths"`
	Probability float64 `json:"probability" firestore:"probability"`
	Confidence  float64 `json:"confidence" firestore:"confidence"`
	Reason      string  `json:"reason" firestore:"reason"`
	ReasonShare float64 `json:"reason_share" firestore:"reason_share"`
	// Action is ActionStrategy, ActionDLQ or "" (advisory).
	Action   string `json:"action,omitempty" firestore:"action,omitempty"`
	Strategy string `json:"strategy,omitempty" firestore:"strategy,omitempty"`
	// Replay are the strategy's headers (Of "", Attempt 0).
	Replay         event.Replay `json:"replay" firestore:"replay"`
	AlternateAgent string       `json:"alternate_agent,omitempty" firestore:"alternate_agent,omitempty"`
}

// String names the cell and its figures; without it the embedded Key's
// String would print the cell alone, in logs and test failures alike.
func (p Prediction) String() string {
	s := fmt.Sprintf("%s: %d of %d tasks died (probability %.2f, confidence %.2f), mostly %s (%.0f%%)",
		p.Key, p.Deaths, p.Tasks, p.Probability, p.Confidence, p.Reason, 100*p.ReasonShare)
	if p.Action != "" {
		s += ", action " + p.Action
	}
	if p.Strategy != "" {
		s += ", strategy " + p.Strategy
	}
	return s
}

// Learn flags the cells of stats with at least MinSupport tasks whose
// confidence reaches Threshold. Deaths beyond the counted tasks (counters
// lost to a crashed publisher) are capped at the tasks: a cell never
// predicts more than certain death.
func Learn(stats Stats, o Options) Model {
	o = o.withDefaults()
	m := Model{Version: o.Version, TrainedAt: o.TrainedAt.UTC(), PolicyVersion: o.PolicyVersion,
		MinSupport: o.MinSupport, Threshold: o.Threshold, Cells: len(stats), Predictions: []Prediction{}}
	for k, c := range stats {
		if c.Tasks < o.MinSupport || c.Deaths <= 0 {
			continue
		}
		deaths := min(c.Deaths, c.Tasks)
		conf := Wilson(deaths, c.Tasks, o.Z)
		if conf < o.Threshold {
			continue
		}
		reason, n := dominant(c.Reasons)
		p := Prediction{Key: k, Tasks: c.Tasks, Deaths: deaths, Probability: float64(deaths) / float64(c.Tasks), Confidence: conf,
			Reason: reason, ReasonShare: float64(n) / float64(max(c.Deaths, 1))}
		if o.Act != nil && p.ReasonDominates() {
			if a, ok := o.Act(k.Agent, k.TaskType, reason); ok {
				p.Action, p.Strategy, p.Replay, p.AlternateAgent = a.Action, a.Strategy, a.Replay, a.AlternateAgent
			}
		}
		m.Predictions = append(m.Predictions, p)
	}
	if len(m.Predictions) > o.MaxPredictions {
		slices.SortFunc(m.Predictions, func(a, b Prediction) int {
			switch {
			case better(a, b):
				return -1
			case better(b, a):
				return 1
			}
			return cmp.Compare(a.Key.String(), b.Key.String())
		})
		m.Predictions = m.Predictions[:o.MaxPredictions]
	}
	slices.SortFunc(m.Predictions, func(a, b Prediction) int {
		return cmp.Or(cmp.Compare(a.Agent, b.Agent), cmp.Compare(a.TaskType, b.TaskType),
			cmp.Compare(a.Feature, b.Feature), cmp.Compare(a.Bucket, b.Bucket))
	})
	return m
}

// dominant is the most frequent reason (ties: the first by name).
func dominant(reasons map[string]int64) (string, int64) {
	var best string
	var n int64
	for _, r := range slices.Sorted(maps.Keys(reasons)) {
		if reasons[r] > n {
			best, n = r, reasons[r]
		}
	}
	return best, n
}

// Wilson is the lower bound of the Wilson score interval of deaths out of
// tasks at normal quantile z: how likely death is at least, given how few
// tasks were seen. 0 without tasks.
func Wilson(deaths, tasks int64, z float64) float64 {
	if tasks <= 0 {
		return 0
	}
	n := float64(tasks)
	p := float64(min(max(deaths, 0), tasks)) / n
	z2 := z * z
	lb := (p + z2/(2*n) - z*math.Sqrt(p*(1-p)/n+z2/(4*n*n))) / (1 + z2/n)
	return max(lb, 0)
}

// Lookup returns the prediction that applies to a task with features f:
// of the rows of its agent and type whose bucket is one of the task's, an
// acted-on row before an advisory one, then the highest confidence (ties:
// the first in the model's order).
func (m Model) Lookup(f Features) (Prediction, bool) {
	return pick(m.Predictions, f)
}

// Table is a model indexed for Lookup per task (agentkit's cache): the rows
// of an agent and type are found without scanning the model.
type Table struct {
	model Model
	rows  map[[2]string][]Prediction
}

// NewTable indexes m.
func NewTable(m Model) *Table {
	t := &Table{model: m, rows: map[[2]string][]Prediction{}}
	for _, p := range m.Predictions {
		k := [2]string{p.Agent, p.TaskType}
		t.rows[k] = append(t.rows[k], p)
	}
	return t
}

// Model is the table's model.
func (t *Table) Model() Model { return t.model }

// Lookup is Model.Lookup.
func (t *Table) Lookup(f Features) (Prediction, bool) {
	if t == nil {
		return Prediction{}, false
	}
	return pick(t.rows[[2]string{f.Agent, f.TaskType}], f)
}

func pick(rows []Prediction, f Features) (Prediction, bool) {
	if len(rows) == 0 {
		return Prediction{}, false
	}
	var keys [maxKeys]Key
	ks := f.appendKeys(keys[:0])
	var best Prediction
	found := false
	for _, p := range rows {
		if !slices.Contains(ks, p.Key) {
			continue
		}
		if !found || better(p, best) {
			best, found = p, true
		}
	}
	return best, found
}

func better(a, b Prediction) bool {
	if (a.Action != "") != (b.Action != "") {
		return a.Action != ""
	}
	return a.Confidence > b.Confidence
}

// MinReasonShare is the share of a row's deaths its dominant reason needs
// for the row to be acted on: a strategy for one reason does not help
// tasks that die of many.
const MinReasonShare = 0.5

// ReasonDominates reports whether the row's reason is common enough among
// its deaths to act on. The learner (Learn) and the policy's view of a row
// (triage's Policy.Use) both ask it.
func (p Prediction) ReasonDominates() bool {
	return p.Reason != "" && p.ReasonShare >= MinReasonShare
}
