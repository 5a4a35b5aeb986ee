// Package learner keeps the predictions' model up to date (reconcile calls
// Learn at the end of a run): it folds the task counts agentkit wrote and
// the deaths classify counted in the hours closed since its cursor into
// daily statistics, never reading history or entries again (but the
// entries before its switch to death cells, SwitchMargin), and learns the
// model from the last days'.
package learner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jsdlq/jsdlq/shared/predict"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// Policy is what the learner asks the policy in force (*triage.Policy).
type Policy interface {
	// Predicted is the action for a predicted reason (predict.Options.Act).
	Predicted(agent, taskType, reason string) (predict.Action, bool)
	// Predictions are the policy's min_support and threshold (zero: the
	// learner's defaults).
	Predictions() triage.PredictionSettings
	Version() string
}

// SwitchMargin is how long past the next full hour after its first run a
// learner without DeathsThrough still reads the entries, not the hours'
// death cells: long enough for a classify deployed with it (terraform
// apply rolls every function out at once, in no set order) to take over
// from a revision that wrote no cells.
const SwitchMargin = time.Hour

// Config of a learner.
type Config struct {
	// Interval: a model younger than this is kept (default 1 h).
	Interval time.Duration
	// Window is how many days of statistics the model is learnt from
	// (default predict.DefaultWindow).
	Window time.Duration
	// Settle keeps entries created and counts written this recently for
	// the next run (default 5 min): a creation may not have committed yet,
	// a publisher's counts are flushed every minute.
	Settle time.Duration
	// PageSize is how many entries are read per query (default 300).
	PageSize int
	// Now is the learner's clock (default the store's).
	Now func() time.Time
}

func (c *Config) defaults() {
	if c.Interval <= 0 {
		c.Interval = time.Hour
	}
	if c.Window <= 0 {
		c.Window = predict.DefaultWindow
	}
	if c.Settle <= 0 {
		c.Settle = 5 * time.Minute
	}
	if c.PageSize <= 0 {
		c.PageSize = 300
	}
}

// Result is what a Learn did.
type Result struct {
	// Skipped: the model was young enough.
	Skipped bool `json:"skipped,omitempty"`
	// Partial: the deadline came before every new entry was read; the
	// next run continues from the cursor.
	Partial     bool  `json:"partial,omitempty"`
	Version     int64 `json:"version,omitempty"`
	Predictions int   `json:"predictions"`
	Cells       int   `json:"cells"`
	// Tasks and Deaths are how many were folded in this run; Hours how
	// many hours' death cells were read (store.HourDeaths); Entries how
	// many entries were read, only before the switch to the death cells
	// (SwitchMargin; deaths of uncounted tasks are not learnt).
	Tasks   int64 `json:"tasks"`
	Deaths  int64 `json:"deaths"`
	Hours   int64 `json:"hours"`
	Entries int64 `json:"entries"`
	// Malformed counts cells of counts documents that were not keys or
	// not positive counts.
	Malformed int64 `json:"malformed,omitempty"`
	// Dropped counts cells a day's statistics could not keep
	// (store.MaxDayCells).
	Dropped int64 `json:"dropped,omitempty"`
}

// stopped reports whether the deadline came, before a read or as the cause
// of its error: the run is then partial and stops reading; what it read is
// folded, and the cursors say where the next run goes on.
func (r *Result) stopped(ctx context.Context) bool {
	if ctx.Err() == nil {
		return false
	}
	r.Partial = true
	return true
}

// Store is the part of the store the learner uses (*store.Store): its
// cursors, the task counts and deaths it reads, the daily statistics it
// folds, and the model it saves.
type Store interface {
	Now() time.Time
	Learner(ctx context.Context) (store.LearnerState, error)
	TaskCounts(ctx context.Context, from, to time.Time) ([]predict.Counts, error)
	Deaths(ctx context.Context, after store.Cursor, to time.Time, limit int) (store.DeathPage, error)
	HourDeaths(ctx context.Context, hour time.Time) (days map[time.Time]predict.Stats, malformed int64, err error)
	FoldPredictionStats(ctx context.Context, from, to store.LearnerState, days map[time.Time]predict.Stats) (dropped int, err error)
	PredictionStats(ctx context.Context, from, to time.Time) (predict.Stats, error)
	PredictionModel(ctx context.Context) (predict.Model, error)
	SavePredictionModel(ctx context.Context, m predict.Model) (predict.Model, error)
}

// Learn folds what is new into the statistics and, unless force is false
// and the model is younger than the interval, saves a new model learnt with
// pol (nil: no policy, every prediction advisory). It stops reading entries
// at ctx's deadline and learns from what it folded; the rest waits for the
// next run.
func Learn(ctx context.Context, s Store, pol Policy, cfg Config, force bool) (Result, error) {
	cfg.defaults()
	now := s.Now()
	if cfg.Now != nil {
		now = cfg.Now().UTC()
	}
	var res Result
	if !force {
		m, err := s.PredictionModel(ctx)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return res, err
		case now.Sub(m.TrainedAt) < cfg.Interval && m.PolicyVersion == policyVersion(pol):
			res.Skipped, res.Version = true, m.Version
			return res, nil
		}
	}
	from, err := s.Learner(ctx)
	if err != nil {
		return res, err
	}
	to, moved := from, false
	days := map[time.Time]predict.Stats{}
	oldest := predict.Day(now.Add(-cfg.Window))
	day := func(d time.Time) predict.Stats {
		if days[d] == nil {
			days[d] = predict.Stats{}
		}
		return days[d]
	}

	// Counts of the hours closed since the last run.
	countsFrom := from.CountsThrough
	if countsFrom.IsZero() || countsFrom.Before(oldest) {
		countsFrom = oldest
	}
	countsTo := now.Add(-cfg.Settle).Truncate(time.Hour)
	if countsTo.After(countsFrom) {
		counts, err := s.TaskCounts(ctx, countsFrom, countsTo)
		if err != nil {
			return res, err
		}
		for _, c := range counts {
			for ks, n := range c.Cells {
				k, err := predict.ParseKey(ks)
				if err != nil || n <= 0 {
					res.Malformed++
					continue
				}
				day(predict.Day(c.Hour)).Add(k, predict.Cell{Tasks: n})
				if k.Feature == predict.FeatureAll {
					res.Tasks += n
				}
			}
		}
		to.CountsThrough, moved = countsTo, true
	}

	// Deaths: Record counts them in the hour of the entry's creation
	// (store.HourDeaths), so the learner reads each closed hour once, not
	// each entry, from DeathsThrough on. A state without DeathsThrough is
	// new, or a learner's that read the entries (its cursor), and the
	// entries may have been recorded by a classify that wrote no death
	// cells: those from before this change, and those of a classify
	// revision still serving while the new one rolls out. So the entries
	// are read up to SwitchMargin past the next full hour, the cells
	// from then on.
	deathsTo := now.Add(-cfg.Settle).Truncate(time.Hour)
	if to.DeathsThrough.IsZero() {
		to.DeathsThrough, moved = now.Truncate(time.Hour).Add(time.Hour+SwitchMargin), true
	}
	// Deaths before the window are not learnt: their entries and hours
	// need no read (a zero cursor, a new state's, starts there too).
	if to.DeathsAfter.At.Before(oldest) {
		to.DeathsAfter, moved = store.DeathsFrom(oldest), true
	}
	if to.DeathsThrough.Before(oldest) {
		to.DeathsThrough, moved = oldest, true
	}
	for to.DeathsAfter.At.Before(to.DeathsThrough) {
		before := now.Add(-cfg.Settle)
		if to.DeathsThrough.Before(before) {
			before = to.DeathsThrough
		}
		if res.stopped(ctx) {
			break
		}
		page, err := s.Deaths(ctx, to.DeathsAfter, before, cfg.PageSize)
		if err != nil {
			if res.stopped(ctx) {
				break
			}
			return res, err
		}
		res.Entries += int64(page.Read)
		if page.Read > 0 {
			to.DeathsAfter, moved = page.Next, true
		}
		for _, d := range page.Deaths {
			if d.Day.Before(oldest) {
				continue
			}
			day(d.Day).AddDeath(d.Features, d.Reason)
			res.Deaths++
		}
		if page.Read < cfg.PageSize {
			if before.Equal(to.DeathsThrough) {
				// Every entry before the hours is read: the cursor
				// waits at the hours (never zero, store.LearnerState).
				to.DeathsAfter, moved = store.DeathsFrom(to.DeathsThrough), true
			}
			break
		}
	}
	for h := to.DeathsThrough; !to.DeathsAfter.At.Before(to.DeathsThrough) && h.Before(deathsTo); h = h.Add(time.Hour) {
		if res.stopped(ctx) {
			break
		}
		stats, malformed, err := s.HourDeaths(ctx, h)
		if err != nil {
			if res.stopped(ctx) {
				break
			}
			return res, err
		}
		res.Hours++
		res.Malformed += malformed
		for d, st := range stats {
			if d.Before(oldest) {
				continue
			}
			day(d).Merge(st)
			for k, c := range st {
				if k.Feature == predict.FeatureAll {
					res.Deaths += c.Deaths
				}
			}
		}
		to.DeathsThrough, moved = h.Add(time.Hour), true
		to.DeathsAfter = store.DeathsFrom(to.DeathsThrough)
	}
	if moved {
		// The fold must land even if the deadline has just passed.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		dropped, err := s.FoldPredictionStats(fctx, from, to, days)
		cancel()
		res.Dropped = int64(dropped)
		if err != nil {
			return res, fmt.Errorf("learner: %w", err)
		}
	}

	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	stats, err := s.PredictionStats(lctx, oldest, predict.Day(now))
	if err != nil {
		return res, err
	}
	opts := predict.Options{TrainedAt: now}
	if pol != nil {
		opts.Act, opts.PolicyVersion = pol.Predicted, pol.Version()
		set := pol.Predictions()
		opts.MinSupport, opts.Threshold = set.MinSupport, set.Threshold
	}
	m, err := s.SavePredictionModel(lctx, predict.Learn(stats, opts))
	if err != nil {
		return res, err
	}
	res.Version, res.Predictions, res.Cells = m.Version, len(m.Predictions), m.Cells
	return res, nil
}

// policyVersion is the version of the policy a model is learnt under (""
// for none). A model learnt under another policy is relearnt at once, young
// or not: switching predictions off, or changing what they do, must reach
// the agents at their next refresh, not an interval later.
func policyVersion(pol Policy) string {
	if pol == nil {
		return ""
	}
	return pol.Version()
}
