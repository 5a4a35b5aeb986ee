package reconciler_test

import (
	"slices"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/predict"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

func predictionsSection(t *testing.T, rep *audit.Report) *audit.Section {
	t.Helper()
	i := slices.IndexFunc(rep.Sections, func(s *audit.Section) bool { return s.Name == reconciler.SectionPredictions })
	if i < 0 {
		t.Fatalf("no %s section in %+v", reconciler.SectionPredictions, rep.Sections)
	}
	return rep.Sections[i]
}

// A run learns at its end: 30 counted tasks of backend/implementation
// published two hours ago, all dead of a context overflow, become a
// prediction the default policy acts on with its compression strategy.
func TestRunLearnsPredictions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	now := time.Now().UTC()
	published := now.Add(-2 * time.Hour)
	hour := published.Truncate(time.Hour)
	feat := predict.Features{Agent: "backend", TaskType: "implementation", PayloadBytes: 7, Hour: published.Hour()}
	cells := map[string]int64{}
	for _, k := range feat.Keys() {
		cells[k.String()] = 30
	}
	if _, err := f.fs.Collection(predict.CountsCollection).Doc(predict.CountsDocID("backend", hour)).
		Set(f.ctx, predict.Counts{Agent: "backend", Hour: hour, Cells: cells, ExpireAt: hour.Add(predict.CountsRetention)}); err != nil {
		t.Fatal(err)
	}
	earlier := f.storeAt(now.Add(-time.Hour))
	for seq := uint64(1); seq <= 30; seq++ {
		e := entry(seq, "acme", store.Scheduled)
		e.ReasonCode, e.Category, e.PublishedAt = "context_window_overflow", "permanent", published
		e.Headers = map[string][]string{event.HeaderCounted: {"1"}}
		f.seed(earlier, e)
	}
	h := f.handler(reconciler.Config{}, nil)
	rep, err := h.Run(f.ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	sec := predictionsSection(t, rep)
	if sec.Status != audit.StatusComplete || sec.Counts["model_version"] != 1 || sec.Counts["tasks_folded"] != 30 ||
		sec.Counts["deaths_folded"] != 30 || sec.Counts["predictions"] == 0 {
		t.Fatalf("predictions section = %+v, want model 1 from 30 tasks and 30 deaths", sec)
	}
	m, err := f.st.PredictionModel(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := m.Lookup(feat)
	if !ok || p.Reason != "context_window_overflow" || p.Action != predict.ActionStrategy || p.Replay.Strategy != "context_window_overflow" {
		t.Errorf("model.Lookup(backend/implementation) = %+v, %v, want the overflow strategy", p, ok)
	}

	// The next run keeps the young model; a dry run and a run with the
	// learner off do not learn.
	rep, err = h.Run(f.ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if sec := predictionsSection(t, rep); sec.Note == "" || sec.Counts["model_version"] != 1 {
		t.Errorf("second run's predictions section = %+v, want the model kept (version 1) with a note", sec)
	}
	rep, err = h.Run(f.ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if sec := predictionsSection(t, rep); sec.Note == "" || len(sec.Counts) != 0 {
		t.Errorf("dry run's predictions section = %+v, want nothing learnt", sec)
	}
	rep, err = f.handler(reconciler.Config{Predict: reconciler.PredictConfig{Off: true, Interval: time.Nanosecond}}, nil).Run(f.ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if sec := predictionsSection(t, rep); sec.Status != audit.StatusSkipped {
		t.Errorf("predictions section with the learner off = %+v, want skipped", sec)
	}
	// A run whose budget is spent leaves the learning to the next run, even
	// with a model old enough to relearn.
	rep, err = f.handler(reconciler.Config{TimeBudget: time.Nanosecond, IOTimeout: 10 * time.Second, Predict: reconciler.PredictConfig{Interval: time.Nanosecond}}, nil).Run(f.ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if sec := predictionsSection(t, rep); sec.Status != audit.StatusNotReached {
		t.Errorf("predictions section of a run over its budget = %+v, want not reached", sec)
	}
	if m2, _ := f.st.PredictionModel(f.ctx); m2.Version != 1 {
		t.Errorf("model version after runs that must not learn = %d, want 1", m2.Version)
	}
}
