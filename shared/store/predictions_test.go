package store

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/predict"
)

// The hour's death cells (what the predictions' learner folds instead of
// reading entries) count each death of a counted task once, as Deaths
// would find it in the entries: a redelivery counts nothing, the other
// capture path that brings the headers counts the death then, a replay or
// an uncounted task is no death; compacting and recounting the hour keep
// them.
func TestHourDeathsCountEachDeathOnce(t *testing.T) {
	s, clock := newStore(t, WithBreaker(BreakerConfig{Threshold: 1000, Window: time.Minute, Cooldown: time.Minute}))
	ctx := testenv.Context(t)
	hour := clock.Now().Truncate(time.Hour)
	counted := func(id string) *Entry {
		e := entry(id, []byte(`{"task":1}`))
		e.Headers = event.EncodeHeaders(map[string][]string{event.HeaderCounted: {"1"}, "X-Task-ID": {id}})
		e.PublishedAt = clock.Now()
		return e
	}
	record := func(e *Entry) {
		t.Helper()
		if _, err := s.Record(ctx, e, "test"); err != nil {
			t.Fatalf("Record(%s) = %v", e.ID, err)
		}
	}
	// The advisory of a message that was gone: no headers, no payload.
	advisory := func(id string) *Entry {
		e := counted(id)
		e.Headers, e.Payload, e.PayloadMissing = nil, nil, true
		return e
	}
	replay := counted("TASKS.3")
	replay.ReplayOf = "TASKS.1"
	steps := []struct {
		name string
		do   func()
		want []string // the deaths Deaths finds among the entries
	}{
		{"a counted task", func() { record(counted("TASKS.1")) }, []string{"TASKS.1"}},
		{"its redelivery", func() { record(counted("TASKS.1")) }, []string{"TASKS.1"}},
		{"an advisory without the message", func() { record(advisory("TASKS.2")) }, []string{"TASKS.1"}},
		{"its explicit record", func() { record(counted("TASKS.2")) }, []string{"TASKS.1", "TASKS.2"}},
		{"a replay's death", func() { record(replay) }, []string{"TASKS.1", "TASKS.2"}},
		{"an uncounted task", func() { record(entry("TASKS.4", []byte("x"))) }, []string{"TASKS.1", "TASKS.2"}},
		{"the hour compacted", func() {
			if _, err := s.CompactHour(ctx, Hour(hour)); err != nil {
				t.Fatal(err)
			}
		}, []string{"TASKS.1", "TASKS.2"}},
		{"the hour recounted", func() {
			// A count the entries do not explain makes the recount
			// rewrite the hour.
			if err := s.AddMetrics(ctx, hour, "x", Metrics{Total: 1}); err != nil {
				t.Fatal(err)
			}
			res, err := s.RecountHour(ctx, hour, 10, false)
			if err != nil || !res.Rewritten {
				t.Fatalf("RecountHour() = %+v, %v, want rewritten", res, err)
			}
		}, []string{"TASKS.1", "TASKS.2"}},
	}
	for _, st := range steps {
		st.do()
		got, malformed, err := s.HourDeaths(ctx, hour)
		if err != nil || malformed != 0 {
			t.Fatalf("after %s: HourDeaths() = %v, %d malformed", st.name, err, malformed)
		}
		page, err := s.Deaths(ctx, Cursor{}, hour.Add(time.Hour), 100)
		if err != nil {
			t.Fatal(err)
		}
		want := map[time.Time]predict.Stats{}
		var ids []string
		for _, d := range page.Deaths {
			if want[d.Day] == nil {
				want[d.Day] = predict.Stats{}
			}
			want[d.Day].AddDeath(d.Features, d.Reason)
			ids = append(ids, d.EntryID)
		}
		if diff := cmp.Diff(st.want, ids); diff != "" {
			t.Fatalf("after %s: the entries' deaths (-want +got):\n%s", st.name, diff)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("after %s: HourDeaths() differs from the entries' deaths (-entries +cells):\n%s", st.name, diff)
		}
	}
}
