package predict_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/predict"
)

// history is a synthetic fleet whose structure is known:
//   - coder/refactor: payloads of 64-256 KiB overflow the context 9 times in
//     10; small ones die 1 time in 50 of rate limits (all sizes together:
//     about 28 %, below any sensible threshold);
//   - writer/blog: 7 in 10 die of hallucination loops whatever their size
//     or hour;
//   - writer/email never dies;
//   - devops/deploy always dies, but only 10 tasks were seen.
//
// Tasks are spread evenly over the day. Deaths are placed deterministically
// (the i-th task of a class dies when i%10 or i%50 says so).
func history() predict.Stats {
	s := predict.Stats{}
	add := func(n int, f predict.Features, dies func(i int) string) {
		for i := range n {
			f.Hour = i % 24
			s.AddTasks(f, 1)
			if r := dies(i); r != "" {
				s.AddDeath(f, r)
			}
		}
	}
	never := func(int) string { return "" }
	add(300, predict.Features{Agent: "coder", TaskType: "refactor", PayloadBytes: 100 << 10}, func(i int) string {
		if i%10 < 9 {
			return "context_window_overflow"
		}
		return ""
	})
	add(700, predict.Features{Agent: "coder", TaskType: "refactor", PayloadBytes: 500}, func(i int) string {
		if i%50 == 0 {
			return "rate_limited"
		}
		return ""
	})
	add(720, predict.Features{Agent: "writer", TaskType: "blog", PayloadBytes: 2 << 10}, func(i int) string {
		if i%10 < 7 {
			return "hallucination_loop"
		}
		return ""
	})
	add(500, predict.Features{Agent: "writer", TaskType: "email", PayloadBytes: 2 << 10}, never)
	add(10, predict.Features{Agent: "devops", TaskType: "deploy", PayloadBytes: 2 << 10}, func(int) string { return "auth_failed" })
	return s
}

func TestLearnFlagsTheKnownStructure(t *testing.T) {
	m := predict.Learn(history(), predict.Options{MinSupport: 30, Threshold: 0.5})
	got := map[string]string{}
	for _, p := range m.Predictions {
		got[p.Key.String()] = p.Reason
	}
	want := map[string]string{
		"coder/refactor/size/64-256KiB": "context_window_overflow",
		"writer/blog/all/all":           "hallucination_loop",
		"writer/blog/size/1-4KiB":       "hallucination_loop",
	}
	for h := 0; h < 24; h += 4 {
		want["writer/blog/hour/"+predict.HourBucket(h)] = "hallucination_loop"
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Learn(history) flagged (-want +got):\n%s", diff)
	}
	for _, p := range m.Predictions {
		if p.Tasks < 30 || p.Confidence < 0.5 || p.Confidence > p.Probability {
			t.Errorf("prediction %s: tasks %d, confidence %v, probability %v: want tasks >= 30 and 0.5 <= confidence <= probability",
				p.Key, p.Tasks, p.Confidence, p.Probability)
		}
		if p.Action != "" {
			t.Errorf("prediction %s has action %q without a policy, want advisory", p.Key, p.Action)
		}
	}
}

func TestLearnHonoursMinimumSupport(t *testing.T) {
	// devops/deploy died every time, but 10 tasks are not 30.
	for _, support := range []int64{30, 11} {
		m := predict.Learn(history(), predict.Options{MinSupport: support, Threshold: 0.5})
		_, got := m.Lookup(predict.Features{Agent: "devops", TaskType: "deploy", PayloadBytes: 2 << 10})
		if got {
			t.Errorf("Learn(MinSupport %d).Lookup(devops/deploy) found a prediction from 10 tasks, want none", support)
		}
	}
	m := predict.Learn(history(), predict.Options{MinSupport: 10, Threshold: 0.5})
	p, ok := m.Lookup(predict.Features{Agent: "devops", TaskType: "deploy", PayloadBytes: 2 << 10})
	if !ok || p.Reason != "auth_failed" || p.Probability != 1 {
		t.Errorf("Learn(MinSupport 10).Lookup(devops/deploy) = %+v, %v, want auth_failed with probability 1", p, ok)
	}
}

func TestTooLittleDataPredictsNothing(t *testing.T) {
	s := predict.Stats{}
	f := predict.Features{Agent: "coder", TaskType: "refactor", PayloadBytes: 100 << 10}
	s.AddTasks(f, 5)
	for range 5 {
		s.AddDeath(f, "context_window_overflow")
	}
	for _, m := range []predict.Model{predict.Learn(s, predict.Options{}), predict.Learn(nil, predict.Options{}), {}} {
		if len(m.Predictions) != 0 {
			t.Errorf("Learn(5 tasks) = %d predictions, want 0", len(m.Predictions))
		}
		if p, ok := m.Lookup(f); ok {
			t.Errorf("Lookup on a model without data = %+v, want none", p)
		}
		if p, ok := predict.NewTable(m).Lookup(f); ok {
			t.Errorf("Table.Lookup on a model without data = %+v, want none", p)
		}
	}
}

func TestLearnActsThroughThePolicy(t *testing.T) {
	compress := event.Replay{Strategy: "compress", MaxContextTokens: 8000, Instructions: []string{"summarise first"}}
	act := func(agent, taskType, reason string) (predict.Action, bool) {
		switch reason {
		case "context_window_overflow":
			return predict.Action{Action: predict.ActionStrategy, Strategy: "compress", Replay: compress}, true
		case "hallucination_loop":
			if taskType == "blog" {
				return predict.Action{Action: predict.ActionDLQ}, true
			}
		}
		return predict.Action{}, false
	}
	m := predict.Learn(history(), predict.Options{MinSupport: 30, Threshold: 0.5, Act: act, Version: 7,
		TrainedAt: time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC), PolicyVersion: "p1"})
	if m.Version != 7 || m.PolicyVersion != "p1" || m.Cells != len(history()) {
		t.Errorf("Learn model header = version %d policy %q cells %d, want 7 p1 %d", m.Version, m.PolicyVersion, m.Cells, len(history()))
	}
	tests := []struct {
		name string
		f    predict.Features
		want predict.Prediction
		ok   bool
	}{
		{"big refactor", predict.Features{Agent: "coder", TaskType: "refactor", PayloadBytes: 80 << 10, Hour: 3},
			predict.Prediction{Key: predict.Key{Agent: "coder", TaskType: "refactor", Feature: "size", Bucket: "64-256KiB"}, Tasks: 300, Deaths: 270,
				Probability: 0.9, Reason: "context_window_overflow", ReasonShare: 1, Action: "strategy", Strategy: "compress", Replay: compress}, true},
		{"small refactor", predict.Features{Agent: "coder", TaskType: "refactor", PayloadBytes: 800, Hour: 3}, predict.Prediction{}, false},
		{"oversized refactor (a bucket never seen)", predict.Features{Agent: "coder", TaskType: "refactor", PayloadBytes: 2 << 20}, predict.Prediction{}, false},
		{"blog", predict.Features{Agent: "writer", TaskType: "blog", PayloadBytes: 3 << 10, Hour: 13},
			predict.Prediction{Key: predict.Key{Agent: "writer", TaskType: "blog", Feature: "all", Bucket: "all"}, Tasks: 720, Deaths: 504,
				Probability: 0.7, Reason: "hallucination_loop", ReasonShare: 1, Action: "dlq"}, true},
		{"email", predict.Features{Agent: "writer", TaskType: "email", PayloadBytes: 3 << 10}, predict.Prediction{}, false},
		{"other agent", predict.Features{Agent: "reader", TaskType: "refactor", PayloadBytes: 80 << 10}, predict.Prediction{}, false},
		{"no agent", predict.Features{TaskType: "refactor", PayloadBytes: 80 << 10}, predict.Prediction{}, false},
	}
	tab := predict.NewTable(m)
	for _, tt := range tests {
		for name, lookup := range map[string]func(predict.Features) (predict.Prediction, bool){"Model": m.Lookup, "Table": tab.Lookup} {
			got, ok := lookup(tt.f)
			got.Confidence = 0 // checked below
			if ok != tt.ok {
				t.Errorf("%s.Lookup(%s) found %v, want %v", name, tt.name, ok, tt.ok)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-9 })); diff != "" {
				t.Errorf("%s.Lookup(%s) mismatch (-want +got):\n%s", name, tt.name, diff)
			}
		}
	}
}

func TestLookupPrefersActionThenConfidence(t *testing.T) {
	m := predict.Model{Predictions: []predict.Prediction{
		{Key: predict.Key{Agent: "a", TaskType: "t", Feature: "all", Bucket: "all"}, Confidence: 0.9, Reason: "advisory"},
		{Key: predict.Key{Agent: "a", TaskType: "t", Feature: "hour", Bucket: "00-03"}, Confidence: 0.6, Reason: "low", Action: "strategy"},
		{Key: predict.Key{Agent: "a", TaskType: "t", Feature: "size", Bucket: "0-1KiB"}, Confidence: 0.7, Reason: "high", Action: "strategy"},
		{Key: predict.Key{Agent: "a", TaskType: "t", Feature: "load", Bucket: "1000+"}, Confidence: 0.99, Reason: "other load", Action: "dlq"},
	}}
	f := predict.Features{Agent: "a", TaskType: "t", PayloadBytes: 10, Hour: 2}
	if p, _ := m.Lookup(f); p.Reason != "high" {
		t.Errorf("Lookup = %q, want the acted-on row of highest confidence (high)", p.Reason)
	}
	f.Pending, f.PendingKnown = 5000, true
	if p, _ := m.Lookup(f); p.Reason != "other load" {
		t.Errorf("Lookup(load 5000) = %q, want other load", p.Reason)
	}
	m.Predictions = m.Predictions[:1]
	if p, _ := m.Lookup(f); p.Reason != "advisory" {
		t.Errorf("Lookup(only an advisory row) = %q, want advisory", p.Reason)
	}
}

func TestLearnLeavesMixedReasonsAdvisory(t *testing.T) {
	s := predict.Stats{}
	f := predict.Features{Agent: "a", TaskType: "t"}
	s.AddTasks(f, 100)
	for i := range 90 {
		s.AddDeath(f, []string{"r1", "r2", "r3"}[i%3])
	}
	act := func(string, string, string) (predict.Action, bool) {
		return predict.Action{Action: predict.ActionDLQ}, true
	}
	m := predict.Learn(s, predict.Options{Act: act})
	p, ok := m.Lookup(f)
	if !ok || p.Action != "" || p.Reason != "r1" || math.Abs(p.ReasonShare-1.0/3) > 1e-9 {
		t.Errorf("Lookup(three reasons a third each) = %+v, %v, want advisory r1 with share 1/3", p, ok)
	}
}

func TestLearnCapsDeathsAtTasks(t *testing.T) {
	s := predict.Stats{}
	f := predict.Features{Agent: "a", TaskType: "t"}
	s.AddTasks(f, 40)
	for range 60 {
		s.AddDeath(f, "r")
	}
	p, ok := predict.Learn(s, predict.Options{}).Lookup(f)
	if !ok || p.Deaths != 40 || p.Probability != 1 {
		t.Errorf("Lookup(60 deaths of 40 tasks) = deaths %d probability %v, want 40 and 1", p.Deaths, p.Probability)
	}
}

func TestWilson(t *testing.T) {
	tests := []struct {
		deaths, tasks int64
		want          float64
	}{
		{0, 0, 0}, {0, 10, 0}, {5, 10, 0.2366}, {50, 100, 0.4038}, {90, 100, 0.8256}, {10, 10, 0.7225}, {1000, 1000, 0.9962},
	}
	for _, tt := range tests {
		if got := predict.Wilson(tt.deaths, tt.tasks, 1.96); math.Abs(got-tt.want) > 1e-4 {
			t.Errorf("Wilson(%d, %d) = %.4f, want %.4f", tt.deaths, tt.tasks, got, tt.want)
		}
	}
}

func TestBuckets(t *testing.T) {
	tests := []struct {
		name   string
		bucket func(int) string
		cases  map[int]string
	}{
		{"SizeBucket", predict.SizeBucket, map[int]string{0: "0-1KiB", 1023: "0-1KiB", 1024: "1-4KiB", 64 << 10: "64-256KiB", 1 << 20: "1MiB+"}},
		{"TokenBucket", predict.TokenBucket, map[int]string{1: "0-2k", 8000: "8k-32k", 150_000: "128k-200k", 1 << 30: "200k+"}},
		{"HourBucket", predict.HourBucket, map[int]string{0: "00-03", 3: "00-03", 4: "04-07", 23: "20-23", 24: "00-03", -1: "20-23"}},
		{"LoadBucket", func(n int) string { return predict.LoadBucket(uint64(n)) }, map[int]string{0: "0-9", 10: "10-99", 999: "100-999", 1 << 40: "1000+"}},
	}
	for _, tc := range tests {
		for in, want := range tc.cases {
			if got := tc.bucket(in); got != want {
				t.Errorf("%s(%d) = %q, want %q", tc.name, in, got, want)
			}
		}
	}
}

func TestFeatureKeys(t *testing.T) {
	f := predict.Features{Agent: "a/b", TaskType: "t.x", PayloadBytes: 5000, Hour: 9}
	var got []string
	for _, k := range f.Keys() {
		got = append(got, k.String())
	}
	want := []string{"a%2Fb/t.x/all/all", "a%2Fb/t.x/size/4-16KiB", "a%2Fb/t.x/hour/08-11"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Keys() mismatch (-want +got):\n%s", diff)
	}
	f.EstTokens, f.Pending, f.PendingKnown = 40_000, 0, true
	if n := len(f.Keys()); n != 5 {
		t.Errorf("Keys() with tokens and load = %d keys, want 5", n)
	}
	if got := (predict.Features{TaskType: "t"}).Keys(); len(got) != 0 {
		t.Errorf("Keys() without an agent = %v, want none", got)
	}
}

func TestParseKey(t *testing.T) {
	for _, k := range (predict.Features{Agent: "a b/c", TaskType: "", PayloadBytes: 1, EstTokens: 3, PendingKnown: true}).Keys() {
		got, err := predict.ParseKey(k.String())
		if err != nil || got != k {
			t.Errorf("ParseKey(%q) = %+v, %v, want %+v", k.String(), got, err, k)
		}
	}
	for _, bad := range []string{"", "a/b/c", "a/b/c/d/e", "/t/all/*", "a/t//*", "a/t/all/%zz"} {
		if _, err := predict.ParseKey(bad); !errors.Is(err, predict.ErrKey) {
			t.Errorf("ParseKey(%q) error = %v, want ErrKey", bad, err)
		}
	}
}

func TestStatsMerge(t *testing.T) {
	a, b := predict.Stats{}, predict.Stats{}
	f := predict.Features{Agent: "a", TaskType: "t"}
	a.AddTasks(f, 3)
	a.AddDeath(f, "r1")
	b.AddTasks(f, 2)
	b.AddDeath(f, "r1")
	b.AddDeath(f, "r2")
	a.Merge(b)
	k := f.Keys()[0]
	want := predict.Cell{Tasks: 5, Deaths: 3, Reasons: map[string]int64{"r1": 2, "r2": 1}}
	if diff := cmp.Diff(want, a[k]); diff != "" {
		t.Errorf("Merge mismatch (-want +got):\n%s", diff)
	}
	if keys := slices.Collect(func(yield func(predict.Key) bool) {
		for k := range a {
			if !yield(k) {
				return
			}
		}
	}); len(keys) != 3 {
		t.Errorf("Merge cells = %d, want 3 (all, size, hour)", len(keys))
	}
}

func TestLearnBoundsTheModel(t *testing.T) {
	s := predict.Stats{}
	for i := range 10 {
		f := predict.Features{Agent: fmt.Sprintf("a%d", i), TaskType: "t"}
		s.AddTasks(f, 100)
		for range 50 + 5*i {
			s.AddDeath(f, "r")
		}
	}
	act := func(agent, _, _ string) (predict.Action, bool) {
		return predict.Action{Action: predict.ActionDLQ}, agent == "a0"
	}
	// Each agent has three cells (all, size, hour); a0's are acted on.
	m := predict.Learn(s, predict.Options{Threshold: 0.3, Act: act, MaxPredictions: 6})
	var got []string
	for _, p := range m.Predictions {
		got = append(got, p.Agent)
	}
	if want := []string{"a0", "a0", "a0", "a9", "a9", "a9"}; !slices.Equal(got, want) {
		t.Errorf("Learn(MaxPredictions 6) rows of %v, want %v (acted-on first, then the most confident)", got, want)
	}
}

// A prediction prints its figures, not only its cell (the embedded Key's
// String would win otherwise).
func TestPredictionString(t *testing.T) {
	p := predict.Prediction{Key: predict.Key{Agent: "coder", TaskType: "impl", Feature: "model", Bucket: "big"},
		Tasks: 40, Deaths: 30, Probability: 0.75, Confidence: 0.6, Reason: "context_window_overflow", ReasonShare: 0.9, Action: predict.ActionStrategy, Strategy: "smaller_context"}
	want := "coder/impl/model/big: 30 of 40 tasks died (probability 0.75, confidence 0.60), mostly context_window_overflow (90%), action " + predict.ActionStrategy + ", strategy smaller_context"
	if got := p.String(); got != want {
		t.Errorf("Prediction.String() = %q, want %q", got, want)
	}
}
