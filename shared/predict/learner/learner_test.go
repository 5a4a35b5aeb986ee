package learner_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/predict"
	"github.com/jsdlq/jsdlq/shared/predict/learner"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// history publishes tasks through agentkit's Publish (which counts them)
// and records an entry for each big refactor, as if it had died of a
// context overflow, plus entries the learner must not learn from: the
// replay of a dead task, and a task published without Publish.
func history(t *testing.T, clock *testenv.Clock) *store.Store {
	t.Helper()
	ctx := testenv.Context(t)
	fs, _ := testenv.Firestore(t)
	s := store.New(fs, store.WithClock(clock.Now))
	_, js := testenv.NewNATS(t).Connect(t)
	if err := bridge.Ensure(ctx, js, bridge.DefaultNames, obs.Discard()); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TASKS", Subjects: []string{"agents.>"},
		Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	kit := agentkit.New(js, agentkit.WithFirestore(fs), agentkit.WithPredictions(time.Hour), agentkit.WithClock(clock.Now))
	big, small := bytes.Repeat([]byte("x"), 100<<10), []byte("tiny")
	publish := func(n int, subject string, payload []byte) {
		for range n {
			if _, err := kit.Publish(ctx, subject, payload, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(40, "agents.coder.tasks.refactor", big)
	publish(60, "agents.coder.tasks.refactor", small)
	publish(40, "agents.writer.tasks.email", small)
	if err := kit.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "TASKS", jetstream.ConsumerConfig{Durable: "all", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(140, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var record []*store.Entry
	for m := range batch.Messages() {
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Data()) == len(big) {
			record = append(record, entry(t, event.ID("TASKS", md.Sequence.Stream), m.Subject(), m.Headers(), m.Data(), md.Timestamp))
		}
		_ = m.Ack()
	}
	if len(record) != 40 {
		t.Fatalf("fetched %d big tasks, want 40", len(record))
	}
	// Neither the replay of a dead big refactor nor a big refactor some
	// other publisher sent (uncounted) is a death of a counted task.
	replay := entry(t, "TASKS.9001", record[0].Subject, event.CopyForReplay(map[string][]string(nil)), big, clock.Now())
	replay.ReplayOf = record[0].ID
	raw := entry(t, "TASKS.9002", record[0].Subject, nil, big, clock.Now())
	for _, e := range append(record, replay, raw) {
		if _, err := s.Record(ctx, e, "test"); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func entry(t *testing.T, eventID, subject string, h map[string][]string, payload []byte, published time.Time) *store.Entry {
	t.Helper()
	id, err := store.EntryID(eventID)
	if err != nil {
		t.Fatal(err)
	}
	sub, _ := event.DefaultConventions.ParseSubject(subject)
	return &store.Entry{ID: id, EventID: eventID, Stream: "TASKS", StreamSeq: 1, Subject: subject, Tenant: "default",
		Agent: sub.Agent, TaskType: sub.TaskType, Headers: event.EncodeHeaders(h), Payload: payload, PublishedAt: published,
		Kind: "terminated", Category: "permanent", ReasonCode: "context_window_overflow", Action: "auto_replay",
		Strategy: "context_window_overflow", Status: store.Scheduled}
}

func TestLearnFromCountsAndDeaths(t *testing.T) {
	// The clock starts at the real time: JetStream stamps the messages
	// with it, and the deaths are learnt in the hour of that stamp.
	clock := testenv.NewClock(time.Now().UTC())
	s := history(t, clock)
	hour := clock.Now().Hour()
	ctx := testenv.Context(t)
	// The hour of the counts has closed and the entries have settled.
	clock.Add(2 * time.Hour)
	res, err := learner.Learn(ctx, s, triage.Default(), learner.Config{}, false)
	if err != nil {
		t.Fatal(err)
	}
	// The deaths come from the hours' death cells Record wrote, not from
	// the entries: none is read.
	want := learner.Result{Version: 1, Predictions: 1, Cells: res.Cells, Tasks: 140, Deaths: 40, Hours: res.Hours}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("Learn mismatch (-want +got):\n%s", diff)
	}
	m, err := s.PredictionModel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := m.Lookup(predict.Features{Agent: "coder", TaskType: "refactor", PayloadBytes: 90 << 10, Hour: hour})
	if !ok || p.Feature != predict.FeatureSize || p.Bucket != "64-256KiB" || p.Tasks != 40 || p.Deaths != 40 ||
		p.Reason != "context_window_overflow" || p.Action != predict.ActionStrategy || p.Replay.MaxContextTokens != 80000 {
		t.Errorf("model.Lookup(big refactor) = %+v, %v, want the 64-256KiB bucket, 40 of 40, compressed", p, ok)
	}
	for _, f := range []predict.Features{
		{Agent: "coder", TaskType: "refactor", PayloadBytes: 10, Hour: hour},
		{Agent: "writer", TaskType: "email", PayloadBytes: 10, Hour: hour},
	} {
		if p, ok := m.Lookup(f); ok {
			t.Errorf("model.Lookup(%s/%s small) = %+v, want none", f.Agent, f.TaskType, p)
		}
	}

	// A model younger than the interval is kept.
	res, err = learner.Learn(ctx, s, triage.Default(), learner.Config{}, false)
	if err != nil || !res.Skipped || res.Version != 1 {
		t.Errorf("Learn(young model) = %+v, %v, want skipped at version 1", res, err)
	}
	// A young model learnt under another policy is not kept: the policy
	// now switches the predictions off, and the agents must see that at
	// their next refresh, not an interval later.
	off, err := triage.Parse(bytes.Replace(triage.DefaultYAML(), []byte("predictions:\n  enabled: true"), []byte("predictions:\n  enabled: false"), 1))
	if err != nil {
		t.Fatal(err)
	}
	res, err = learner.Learn(ctx, s, off, learner.Config{}, false)
	if err != nil || res.Skipped || res.Version != 2 {
		t.Errorf("Learn(young model, new policy) = %+v, %v, want version 2 learnt", res, err)
	}
	m, _ = s.PredictionModel(ctx)
	if p, _ := m.Lookup(predict.Features{Agent: "coder", TaskType: "refactor", PayloadBytes: 90 << 10, Hour: hour}); p.Action != "" || m.PolicyVersion != off.Version() {
		t.Errorf("model under a policy with predictions off: action %q, policy %q, want advisory under %q", p.Action, m.PolicyVersion, off.Version())
	}
	// Learning again folds nothing twice: the statistics are the same.
	before, err := s.PredictionStats(ctx, clock.Now().AddDate(0, 0, -14), clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	clock.Add(2 * time.Hour)
	res, err = learner.Learn(ctx, s, nil, learner.Config{}, false)
	if err != nil || res.Version != 3 || res.Tasks != 0 || res.Deaths != 0 || res.Entries != 0 {
		t.Errorf("Learn(nothing new) = %+v, %v, want version 3 with nothing folded", res, err)
	}
	after, err := s.PredictionStats(ctx, clock.Now().AddDate(0, 0, -14), clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("statistics changed by a run with nothing new (-before +after):\n%s", diff)
	}
	m, _ = s.PredictionModel(ctx)
	if p, _ := m.Lookup(predict.Features{Agent: "coder", TaskType: "refactor", PayloadBytes: 90 << 10}); p.Action != "" {
		t.Errorf("model without a policy has action %q, want advisory", p.Action)
	}

	// The window ages the history out.
	clock.Add(15 * 24 * time.Hour)
	res, err = learner.Learn(ctx, s, triage.Default(), learner.Config{}, false)
	if err != nil || res.Predictions != 0 || res.Cells != 0 {
		t.Errorf("Learn(15 days later) = %+v, %v, want no cells and no predictions", res, err)
	}
}

// A fold is applied once: a second learner that read the same cursor finds
// it moved and writes nothing.
func TestFoldConflict(t *testing.T) {
	fs, _ := testenv.Firestore(t)
	ctx := testenv.Context(t)
	s := store.New(fs)
	from, err := s.Learner(ctx)
	if err != nil {
		t.Fatal(err)
	}
	day := predict.Day(time.Now())
	st := predict.Stats{}
	st.AddTasks(predict.Features{Agent: "a", TaskType: "t"}, 5)
	to := from
	to.DeathsAfter = store.Cursor{At: time.Now().UTC(), ID: "TASKS.1"}
	if _, err := s.FoldPredictionStats(ctx, from, to, map[time.Time]predict.Stats{day: st}); err != nil {
		t.Fatal(err)
	}
	_, err = s.FoldPredictionStats(ctx, from, to, map[time.Time]predict.Stats{day: st})
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("second FoldPredictionStats from the same state = %v, want ErrConflict", err)
	}
	got, err := s.PredictionStats(ctx, day, day)
	if err != nil {
		t.Fatal(err)
	}
	if c := got[predict.Key{Agent: "a", TaskType: "t", Feature: "all", Bucket: "all"}]; c.Tasks != 5 {
		t.Errorf("tasks after a fold and a conflicting one = %d, want 5", c.Tasks)
	}
}

// Counts documents are written by every publisher; cells that are not keys
// or counts are counted as malformed and left out, the rest is learnt.
func TestLearnSkipsMalformedCounts(t *testing.T) {
	fs, _ := testenv.Firestore(t)
	ctx := testenv.Context(t)
	s := store.New(fs)
	hour := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Hour)
	cells := map[string]int64{"not-a-key": 3, "a/t/size/0-1KiB": -2, "a/t/all/all": 7, "%zz/t/all/all": 1}
	if _, err := fs.Collection(predict.CountsCollection).Doc(predict.CountsDocID("a", hour)).
		Set(ctx, predict.Counts{Agent: "a", Hour: hour, Cells: cells}); err != nil {
		t.Fatal(err)
	}
	res, err := learner.Learn(ctx, s, nil, learner.Config{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Malformed != 3 || res.Tasks != 7 || res.Cells != 1 {
		t.Errorf("Learn(malformed counts) = %+v, want 3 malformed, 7 tasks in 1 cell", res)
	}
}

// A day's statistics keep at most store.MaxDayCells cells, those with the
// most tasks, so that the document stays within Firestore's limit.
func TestFoldBoundsADay(t *testing.T) {
	fs, _ := testenv.Firestore(t)
	ctx := testenv.Context(t)
	s := store.New(fs)
	day := predict.Day(time.Now())
	st := predict.Stats{}
	for i := range store.MaxDayCells + 5 {
		st.Add(predict.Key{Agent: fmt.Sprintf("agent%05d", i), TaskType: "t", Feature: "all", Bucket: "all"}, predict.Cell{Tasks: int64(i + 1)})
	}
	dropped, err := s.FoldPredictionStats(ctx, store.LearnerState{}, store.LearnerState{CountsThrough: day}, map[time.Time]predict.Stats{day: st})
	if err != nil || dropped != 5 {
		t.Fatalf("FoldPredictionStats(MaxDayCells+5 cells) = %d, %v, want 5 dropped", dropped, err)
	}
	got, err := s.PredictionStats(ctx, day, day)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != store.MaxDayCells {
		t.Errorf("stored cells = %d, want %d", len(got), store.MaxDayCells)
	}
	for i := range 5 {
		if _, ok := got[predict.Key{Agent: fmt.Sprintf("agent%05d", i), TaskType: "t", Feature: "all", Bucket: "all"}]; ok {
			t.Errorf("cell with %d tasks kept, want the fewest-task cells dropped", i+1)
		}
	}
}

// A learner state from a learner that read the entries (a cursor, no
// DeathsThrough) goes on reading entries up to the next hour and the
// hours' death cells from then on: every death is learnt once, whichever
// side of the switch it falls on.
func TestLearnAfterAnUpgrade(t *testing.T) {
	fs, _ := testenv.Firestore(t)
	ctx := testenv.Context(t)
	clock := testenv.NewClock(time.Date(2026, 11, 20, 10, 30, 0, 0, time.UTC))
	s := store.New(fs, store.WithClock(clock.Now))
	counted := map[string][]string{event.HeaderCounted: {"1"}}
	died := func(seq int) {
		t.Helper()
		e := entry(t, fmt.Sprintf("TASKS.%d", seq), "agents.coder.tasks.refactor", counted, []byte("task"), clock.Now())
		if _, err := s.Record(ctx, e, "test"); err != nil {
			t.Fatal(err)
		}
	}
	// The state an earlier learner left: it read the entries up to 10:29.
	old := store.LearnerState{CountsThrough: clock.Now().Truncate(time.Hour), DeathsAfter: store.Cursor{At: clock.Now().Add(-time.Minute), ID: "TASKS.0"}}
	if _, err := s.FoldPredictionStats(ctx, store.LearnerState{}, old, nil); err != nil {
		t.Fatal(err)
	}
	died(1) // 10:30
	clock.Add(10 * time.Minute)
	died(2) // 10:40
	clock.Add(10 * time.Minute)
	tests := []struct {
		name    string
		advance time.Duration
		die     int // an entry recorded before the run
		want    learner.Result
	}{
		{"upgraded at 10:50: the entries before 10:45", 0, 0, learner.Result{Deaths: 2, Entries: 2}},
		{"12:10: the entries up to 11:00, then hour 11 from its cells", 30 * time.Minute, 3, learner.Result{Deaths: 1, Hours: 1}},
		{"13:10: hour 12 from its cells", time.Hour, 0, learner.Result{Hours: 1}},
	}
	for _, tc := range tests {
		clock.Add(tc.advance)
		if tc.die > 0 {
			died(tc.die) // 11:20
			clock.Add(50 * time.Minute)
		}
		res, err := learner.Learn(ctx, s, nil, learner.Config{}, true)
		if err != nil {
			t.Fatalf("%s: Learn() = %v", tc.name, err)
		}
		got := learner.Result{Deaths: res.Deaths, Hours: res.Hours, Entries: res.Entries}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: Learn() mismatch (-want +got):\n%s", tc.name, diff)
		}
	}
	st, err := s.PredictionStats(ctx, clock.Now().AddDate(0, 0, -1), clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if c := st[predict.Key{Agent: "coder", TaskType: "refactor", Feature: predict.FeatureAll, Bucket: predict.BucketAll}]; c.Deaths != 3 {
		t.Errorf("deaths learnt = %d, want 3 (each once)", c.Deaths)
	}
}
