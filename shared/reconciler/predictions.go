package reconciler

import (
	"context"
	"time"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/predict/learner"
)

// SectionPredictions learns the predictions' model (docs/predictions.md).
const SectionPredictions = "predictions"

// PredictConfig is the learner's part of a run.
type PredictConfig struct {
	// Off: runs do not learn (PREDICT_LEARN=false).
	Off bool
	// Interval: a model younger than this is kept (PREDICT_INTERVAL,
	// default 1 h).
	Interval time.Duration
	// Budget bounds the learning of one run (default 30 s); what is left
	// is learnt by the next.
	Budget time.Duration
}

// readPredictConfig reads the learner's settings (ReadConfig).
func readPredictConfig(r *config.Reader) PredictConfig {
	return PredictConfig{Off: !r.Bool("PREDICT_LEARN", true), Interval: r.Duration("PREDICT_INTERVAL", 0)}
}

// learn runs the learner at the end of a run, bounded by its own budget:
// it folds the task counts and the deaths counted in the hours closed since
// its cursor into the statistics and, when the model is older than the interval, saves a
// new one learnt under the policy in force.
func (r *run) learn(ctx context.Context, sec *audit.Section) error {
	c := r.h.cfg.Predict
	switch {
	case c.Off:
		return errSkipped
	case r.dry:
		sec.Note = "dry run: the model is not learnt"
		return nil
	}
	budget := c.Budget
	if budget <= 0 {
		budget = 30 * time.Second
	}
	lctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	var pol learner.Policy
	if p := r.h.pol.Current(ctx); p != nil {
		pol = p
	}
	res, err := learner.Learn(lctx, r.h.store, pol, learner.Config{Interval: c.Interval}, false)
	if err != nil {
		return err
	}
	if res.Skipped {
		sec.Note = "the model is younger than the interval"
	}
	sec.Add("model_version", res.Version)
	sec.Add("predictions", int64(res.Predictions))
	sec.Add("cells", int64(res.Cells))
	sec.Add("tasks_folded", res.Tasks)
	sec.Add("deaths_folded", res.Deaths)
	sec.Add("hours_read", res.Hours)
	if res.Entries > 0 {
		sec.Add("entries_read", res.Entries)
	}
	if res.Malformed > 0 {
		sec.Add("malformed_counts", res.Malformed)
	}
	if res.Dropped > 0 {
		sec.Add("cells_dropped", res.Dropped)
	}
	if res.Partial {
		return errBudget
	}
	return nil
}
