package learner_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
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
	// A learner's first run reads the entries that are there already
	// (their classify may have written no death cells,
	// TestLearnAfterAnUpgrade): the 40 deaths among the 42.
	want := learner.Result{Version: 1, Predictions: 1, Cells: res.Cells, Tasks: 140, Deaths: 40, Entries: 42}
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
// DeathsThrough), and a new one where entries exist already, go on reading
// entries up to the hour after the next and the hours' death cells from
// then on. Entries written by a classify that counted no deaths in cells
// (before the change, or a revision still serving during the rollout, up
// to the margin) are learnt from the entries: every death is learnt once,
// whichever side of the switch it falls on. After the switch the entry
// cursor waits at the hours, so a learner rolled back to (which reads a
// zero cursor as "from the first entry") reads no entry again.
func TestLearnAfterAnUpgrade(t *testing.T) {
	for _, tc := range []struct {
		name string
		// state is the learner's state before the first run, at 10:30.
		state func(now time.Time) store.LearnerState
		// first is what the first run, at 10:50, reads; learnt how
		// many deaths the statistics hold at the end.
		first  learner.Result
		learnt int64
	}{
		{"a learner that read the entries up to 10:29", func(now time.Time) store.LearnerState {
			return store.LearnerState{CountsThrough: now.Truncate(time.Hour), DeathsAfter: store.Cursor{At: now.Add(-time.Minute), ID: "TASKS.0"}}
		}, learner.Result{Deaths: 2, Entries: 2}, 4},
		{"no learner yet, the dead of 10:29 in the failure log", func(time.Time) store.LearnerState {
			return store.LearnerState{}
		}, learner.Result{Deaths: 3, Entries: 3}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, _ := testenv.Firestore(t)
			ctx := testenv.Context(t)
			clock := testenv.NewClock(time.Date(2026, 11, 20, 10, 29, 0, 0, time.UTC))
			s := store.New(fs, store.WithClock(clock.Now))
			counted := map[string][]string{event.HeaderCounted: {"1"}}
			// died records a death; by an old classify, it writes no
			// death cells.
			died := func(seq int, old bool) {
				t.Helper()
				e := entry(t, fmt.Sprintf("TASKS.%d", seq), "agents.coder.tasks.refactor", counted, []byte("task"), clock.Now())
				if _, err := s.Record(ctx, e, "test"); err != nil {
					t.Fatal(err)
				}
				if !old {
					return
				}
				shards, err := fs.Collection(store.MetricsColl).Doc(store.Hour(clock.Now())).Collection(store.MetricsShards).Documents(ctx).GetAll()
				if err != nil {
					t.Fatal(err)
				}
				for _, sh := range shards {
					if _, err := sh.Ref.Update(ctx, []firestore.Update{{Path: "predict_deaths", Value: firestore.Delete}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			died(0, true) // 10:29, read by the earlier learner if there was one
			clock.Add(time.Minute)
			if st := tc.state(clock.Now()); st != (store.LearnerState{}) {
				if _, err := s.FoldPredictionStats(ctx, store.LearnerState{}, st, nil); err != nil {
					t.Fatal(err)
				}
			}
			died(1, true) // 10:30
			clock.Add(10 * time.Minute)
			died(2, true) // 10:40
			clock.Add(10 * time.Minute)
			steps := []struct {
				name    string
				advance time.Duration
				die     func() // deaths before the run
				want    learner.Result
			}{
				{"upgraded at 10:50: the entries before 10:45", 0, nil, tc.first},
				{"12:10: the entries up to 12:00, an old classify's at 11:20 too", 30 * time.Minute, func() {
					died(3, true) // 11:20
					clock.Add(50 * time.Minute)
				}, learner.Result{Deaths: 1, Entries: 1}},
				{"13:10: hour 12 from its cells", 10 * time.Minute, func() {
					died(4, false) // 12:20
					clock.Add(50 * time.Minute)
				}, learner.Result{Deaths: 1, Hours: 1}},
			}
			for _, st := range steps {
				clock.Add(st.advance)
				if st.die != nil {
					st.die()
				}
				res, err := learner.Learn(ctx, s, nil, learner.Config{}, true)
				if err != nil {
					t.Fatalf("%s: Learn() = %v", st.name, err)
				}
				got := learner.Result{Deaths: res.Deaths, Hours: res.Hours, Entries: res.Entries}
				if diff := cmp.Diff(st.want, got); diff != "" {
					t.Errorf("%s: Learn() mismatch (-want +got):\n%s", st.name, diff)
				}
			}
			stats, err := s.PredictionStats(ctx, clock.Now().AddDate(0, 0, -1), clock.Now())
			if err != nil {
				t.Fatal(err)
			}
			if c := stats[predict.Key{Agent: "coder", TaskType: "refactor", Feature: predict.FeatureAll, Bucket: predict.BucketAll}]; c.Deaths != tc.learnt {
				t.Errorf("deaths learnt = %d, want %d (each once)", c.Deaths, tc.learnt)
			}
			// A learner rolled back to reads the entries from its cursor
			// on (store.Deaths): none it would learn again.
			st, err := s.Learner(ctx)
			if err != nil {
				t.Fatal(err)
			}
			page, err := s.Deaths(ctx, st.DeathsAfter, clock.Now(), 100)
			if err != nil || page.Read != 0 {
				t.Errorf("Deaths(%+v) after the switch = %d entries read, %v; want none", st.DeathsAfter, page.Read, err)
			}
		})
	}
}
