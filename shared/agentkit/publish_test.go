package agentkit_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/predict"
	"github.com/jsdlq/jsdlq/shared/store"
)

var compress = event.Replay{Strategy: "context_window_overflow", MaxContextTokens: 80000, TargetModel: "large-context",
	Instructions: []string{"Focus on the core task."}}

// testModel predicts: big refactors overflow (compress them), blog posts
// loop (send them to the DLQ), reviews time out (advisory only), SEO tasks
// loop (hand them to the editor).
func testModel() predict.Model {
	row := func(agent, typ, feature, bucket, reason, action string, r event.Replay, alt string) predict.Prediction {
		return predict.Prediction{Key: predict.Key{Agent: agent, TaskType: typ, Feature: feature, Bucket: bucket}, Tasks: 100, Deaths: 90,
			Probability: 0.9, Confidence: 0.83, Reason: reason, ReasonShare: 1, Action: action, Strategy: r.Strategy,
			Replay: r, AlternateAgent: alt}
	}
	return predict.Model{TrainedAt: time.Now().UTC(), MinSupport: 20, Threshold: 0.5, Predictions: []predict.Prediction{
		row("coder", "refactor", predict.FeatureSize, "64-256KiB", "context_window_overflow", predict.ActionStrategy, compress, ""),
		row("writer", "blog", predict.FeatureAll, predict.BucketAll, "hallucination_loop", predict.ActionDLQ, event.Replay{}, ""),
		row("coder", "review", predict.FeatureAll, predict.BucketAll, "timeout", "", event.Replay{}, ""),
		row("writer", "seo", predict.FeatureAll, predict.BucketAll, "hallucination_loop", predict.ActionStrategy,
			event.Replay{Strategy: "hallucination_loop", TargetModel: "alternate"}, "editor"),
	}}
}

// predictFixture is a NATS with TASKS and the DLQ streams, a Firestore with
// testModel saved, and a kit with predictions that has read it.
func predictFixture(t *testing.T) (*fixture, *store.Store, *agentkit.Kit) {
	t.Helper()
	f := newFixture(t, jetstream.WorkQueuePolicy, true)
	ctx := testenv.Context(t)
	fs, _ := testenv.Firestore(t)
	s := store.New(fs)
	if _, err := s.SavePredictionModel(ctx, testModel()); err != nil {
		t.Fatal(err)
	}
	kit := agentkit.New(f.js, agentkit.WithFirestore(fs), agentkit.WithPredictions(time.Hour), agentkit.WithAgent("producer"))
	t.Cleanup(func() { _ = kit.Close(context.Background()) })
	if err := kit.RefreshPredictions(ctx); err != nil {
		t.Fatal(err)
	}
	return f, s, kit
}

func TestPublishPreflight(t *testing.T) {
	f, _, kit := predictFixture(t)
	ctx := testenv.Context(t)
	big := bytes.Repeat([]byte("x"), 100<<10)
	tasks, err := f.js.Stream(ctx, "TASKS")
	if err != nil {
		t.Fatal(err)
	}
	// A task with a key is published with its message id (the default
	// tenant's here).
	msgID := func(key string) []string { return []string{agentkit.IdempotencyDocID(event.DefaultTenant, key)} }
	tests := []struct {
		name    string
		subject string
		payload []byte
		headers map[string][]string
		// wantSubject is where the task runs; wantHeaders the jsdlq
		// headers it carries there (Jsdlq-Pending checked apart).
		wantSubject string
		wantHeaders map[string][]string
		counted     bool
	}{
		{"no prediction: counted", "agents.coder.tasks.refactor", []byte("small"), map[string][]string{"X-Task-ID": {"t1"}},
			"agents.coder.tasks.refactor", map[string][]string{"X-Task-ID": {"t1"}, event.HeaderCounted: {"1"}, "Nats-Msg-Id": msgID("t1")}, true},
		{"forged jsdlq headers are dropped", "agents.coder.tasks.refactor", []byte("small"),
			map[string][]string{"X-Task-ID": {"t2"}, "Jsdlq-Counted": {"0"}, "jsdlq-strategy": {"forged"}},
			"agents.coder.tasks.refactor", map[string][]string{"X-Task-ID": {"t2"}, event.HeaderCounted: {"1"}, "Nats-Msg-Id": msgID("t2")}, true},
		{"overflow predicted: compressed before the first attempt", "agents.coder.tasks.refactor", big, map[string][]string{"X-Task-ID": {"t3"}},
			"agents.coder.tasks.refactor", map[string][]string{"X-Task-ID": {"t3"}, "Nats-Msg-Id": msgID("t3"), event.HeaderStrategy: {"context_window_overflow"},
				event.HeaderMaxContextTokens: {"80000"}, event.HeaderTargetModel: {"large-context"},
				event.HeaderInstruction: {"Focus on the core task."}, event.HeaderPredictedReason: {"context_window_overflow"},
				event.HeaderPredictedProbability: {"0.90"}, event.HeaderPredictedVersion: {"1"}}, false},
		{"advisory: marked and counted", "agents.coder.tasks.review", []byte("r"), nil,
			"agents.coder.tasks.review", map[string][]string{event.HeaderCounted: {"1"}, event.HeaderPredictedReason: {"timeout"},
				event.HeaderPredictedProbability: {"0.90"}, event.HeaderPredictedVersion: {"1"}}, true},
		{"another agent named: rerouted", "agents.writer.tasks.seo", []byte("s"), map[string][]string{"X-Agent": {"writer"}},
			"agents.editor.tasks.seo", map[string][]string{"X-Agent": {"editor"}, event.HeaderStrategy: {"hallucination_loop"},
				event.HeaderTargetModel: {"alternate"}, event.HeaderPredictedReason: {"hallucination_loop"},
				event.HeaderPredictedProbability: {"0.90"}, event.HeaderPredictedVersion: {"1"}}, false},
	}
	for _, tt := range tests {
		got, err := kit.Publish(ctx, tt.subject, tt.payload, tt.headers)
		if err != nil {
			t.Fatalf("Publish(%s) = %v", tt.name, err)
		}
		if got.Routed || got.Ack.Stream != "TASKS" || got.Subject != tt.wantSubject {
			t.Errorf("Publish(%s) = routed %v stream %s subject %s, want TASKS %s", tt.name, got.Routed, got.Ack.Stream, got.Subject, tt.wantSubject)
		}
		raw, err := tasks.GetMsg(ctx, got.Ack.Sequence)
		if err != nil {
			t.Fatal(err)
		}
		h := map[string][]string(raw.Header)
		pending := h[event.HeaderPending]
		delete(h, event.HeaderPending)
		delete(h, "Nats-Expected-Stream") // Publish's guard that the subject is the work stream's
		if diff := cmp.Diff(tt.wantHeaders, h); diff != "" {
			t.Errorf("Publish(%s) headers (-want +got):\n%s", tt.name, diff)
		}
		if tt.counted {
			if len(pending) != 1 {
				t.Errorf("Publish(%s) %s = %v, want the agent's pending count", tt.name, event.HeaderPending, pending)
			} else if _, err := strconv.ParseUint(pending[0], 10, 64); err != nil {
				t.Errorf("Publish(%s) %s = %q, want a count", tt.name, event.HeaderPending, pending[0])
			}
		}
		if !bytes.Equal(raw.Data, tt.payload) || raw.Subject != tt.wantSubject {
			t.Errorf("Publish(%s) stored %d bytes on %s, want the payload unchanged on %s", tt.name, len(raw.Data), raw.Subject, tt.wantSubject)
		}
	}
}

func TestPublishRoutesPredictedFailureToTheDLQ(t *testing.T) {
	f, _, kit := predictFixture(t)
	ctx := testenv.Context(t)
	payload := []byte(`{"topic":"jsdlq"}`)
	hdr := map[string][]string{"X-Task-ID": {"post-1"}, "X-Tenant-ID": {"acme"}, "Nats-Msg-Id": {"post-1"}}
	got, err := kit.Publish(ctx, "agents.writer.tasks.blog", payload, hdr)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Routed || got.Ack.Stream != "DLQ_RECORDS" || got.Subject != "dlq.records.TASKS" || got.Prediction.Reason != "hallucination_loop" {
		t.Fatalf("Publish(blog) = %+v, want routed to DLQ_RECORDS for hallucination_loop", got)
	}
	// Publishing the same task again (a producer's retry) records it once:
	// the record's message id comes from the task's idempotency key.
	again, err := kit.Publish(ctx, "agents.writer.tasks.blog", payload, hdr)
	if err != nil || !again.Ack.Duplicate {
		t.Errorf("second Publish(blog) = %+v, %v, want a duplicate of the first record", again.Ack, err)
	}
	// Another tenant's task with the same key is another task: its own record.
	beta := map[string][]string{"X-Task-ID": {"post-1"}, "X-Tenant-ID": {"beta"}}
	other, err := kit.Publish(ctx, "agents.writer.tasks.blog", payload, beta)
	if err != nil || !other.Routed || other.Ack.Duplicate {
		t.Errorf("Publish(beta's blog, same key) = %+v, %v, want a record of its own", other.Ack, err)
	}
	recs, _ := f.js.Stream(ctx, "DLQ_RECORDS")
	raw, err := recs.GetMsg(ctx, got.Ack.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := event.ParseRecord(raw.Header, raw.Data)
	if err != nil {
		t.Fatalf("ParseRecord(routed task) = %v", err)
	}
	m := rec.Meta
	if m.Stream != "TASKS" || m.StreamSeq < 1<<62 || m.Subject != "agents.writer.tasks.blog" || m.Deliveries != 0 ||
		m.Failure.Code != predict.ReasonPredictedFailure || m.Failure.Agent != "writer" ||
		!strings.Contains(m.Failure.Detail, "predicted hallucination_loop with probability 0.90") {
		t.Errorf("record meta = %+v, want a never-delivered TASKS task dead of predicted_failure", m)
	}
	if !bytes.Equal(rec.Data, payload) || event.Header(rec.Headers, "X-Task-ID") != "post-1" ||
		event.Header(rec.Headers, "Nats-Msg-Id") != "post-1" || event.Header(rec.Headers, event.HeaderPredictedReason) != "hallucination_loop" ||
		event.Header(rec.Headers, event.HeaderCounted) != "" {
		t.Errorf("record = %q with headers %v, want the task whole, marked predicted, not counted", rec.Data, rec.Headers)
	}
	ev := rec.Event(event.DefaultConventions, time.Now())
	if ev.Agent != "writer" || ev.Tenant != "acme" {
		t.Errorf("record event agent %q tenant %q, want writer acme", ev.Agent, ev.Tenant)
	}
	info, _ := f.js.Stream(ctx, "TASKS")
	if n := info.CachedInfo().State.Msgs; n != 0 {
		t.Errorf("TASKS holds %d messages after a routed task, want 0", n)
	}

	// A record the server cannot take is not dropped: the task runs.
	limit := int(f.nc.MaxPayload())
	huge := bytes.Repeat([]byte("h"), limit-500)
	got, err = kit.Publish(ctx, "agents.writer.tasks.blog", huge, map[string][]string{"X-Task-ID": {"post-2"}})
	if err != nil || got.Routed || got.Ack.Stream != "TASKS" {
		t.Errorf("Publish(blog too large to record) = %+v, %v, want published to TASKS", got, err)
	}
}

func TestPublishWithoutModel(t *testing.T) {
	f := newFixture(t, jetstream.WorkQueuePolicy, true)
	ctx := testenv.Context(t)
	fs, _ := testenv.Firestore(t)
	// An unreadable model (version is not a number) leaves the kit
	// without predictions; publishing goes on.
	if _, err := fs.Collection(predict.ModelCollection).Doc(predict.ModelDoc).Set(ctx, map[string]any{"version": "v1"}); err != nil {
		t.Fatal(err)
	}
	kit := agentkit.New(f.js, agentkit.WithFirestore(fs), agentkit.WithPredictions(time.Hour))
	defer kit.Close(ctx)
	if err := kit.RefreshPredictions(ctx); err == nil {
		t.Errorf("RefreshPredictions(malformed model) = nil, want an error")
	}
	big := bytes.Repeat([]byte("x"), 100<<10)
	got, err := kit.Publish(ctx, "agents.coder.tasks.refactor", big, nil)
	if err != nil || got.Predicted || got.Ack.Stream != "TASKS" {
		t.Errorf("Publish(no model) = %+v, %v, want published without prediction", got, err)
	}
	// Without WithPredictions, Publish is a plain publish: headers as given.
	plain := agentkit.New(f.js)
	got, err = plain.Publish(ctx, "agents.coder.tasks.refactor", []byte("p"), map[string][]string{"Jsdlq-Strategy": {"mine"}})
	if err != nil {
		t.Fatal(err)
	}
	tasks, _ := f.js.Stream(ctx, "TASKS")
	raw, err := tasks.GetMsg(ctx, got.Ack.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{"Jsdlq-Strategy": {"mine"}}, map[string][]string(raw.Header)); diff != "" {
		t.Errorf("plain Publish headers (-want +got):\n%s", diff)
	}
	if err := plain.RefreshPredictions(ctx); err == nil {
		t.Errorf("RefreshPredictions without WithPredictions = nil, want ErrNoPredictions")
	}
}

func TestPublishCountsFlush(t *testing.T) {
	f := newFixture(t, jetstream.WorkQueuePolicy, true)
	ctx := testenv.Context(t)
	fs, _ := testenv.Firestore(t)
	at := time.Date(2026, 11, 23, 10, 15, 0, 0, time.UTC)
	kit := agentkit.New(f.js, agentkit.WithFirestore(fs), agentkit.WithPredictions(time.Hour), agentkit.WithClock(func() time.Time { return at }))
	if err := kit.RefreshPredictions(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2000, 4000, 6000} {
		if _, err := kit.Publish(ctx, "agents.coder.tasks.refactor", bytes.Repeat([]byte("x"), n), nil); err != nil {
			t.Fatal(err)
		}
	}
	// A flush that fails keeps its counts for the next one.
	dead, cancel := context.WithCancel(ctx)
	cancel()
	if err := kit.FlushCounts(dead); err == nil {
		t.Fatalf("FlushCounts(cancelled) = nil, want an error")
	}
	if _, err := kit.Publish(ctx, "agents.coder.tasks.refactor", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	if err := kit.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s := store.New(fs)
	counts, err := s.TaskCounts(ctx, at.Truncate(time.Hour), at.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 1 {
		t.Fatalf("TaskCounts = %d documents, want 1 (one agent, one hour)", len(counts))
	}
	want := map[string]int64{"coder/refactor/all/all": 4, "coder/refactor/hour/08-11": 4, "coder/refactor/size/0-1KiB": 1,
		"coder/refactor/size/1-4KiB": 2, "coder/refactor/size/4-16KiB": 1, "coder/refactor/load/0-9": 4}
	if diff := cmp.Diff(want, counts[0].Cells); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if counts[0].Agent != "coder" || !counts[0].Hour.Equal(at.Truncate(time.Hour)) {
		t.Errorf("counts document agent %q hour %v, want coder %v", counts[0].Agent, counts[0].Hour, at.Truncate(time.Hour))
	}
}

// Concurrent publishers and the flush timer share the counts: every task is
// counted exactly once however the flushes fall (run with -race).
func TestPublishCountsConcurrently(t *testing.T) {
	f := newFixture(t, jetstream.WorkQueuePolicy, true)
	ctx := testenv.Context(t)
	fs, _ := testenv.Firestore(t)
	at := time.Date(2026, 11, 23, 10, 15, 0, 0, time.UTC)
	kit := agentkit.New(f.js, agentkit.WithFirestore(fs), agentkit.WithPredictions(time.Hour),
		agentkit.WithCountFlush(5*time.Millisecond), agentkit.WithClock(func() time.Time { return at }))
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 25 {
				if _, err := kit.Publish(ctx, "agents.coder.tasks.refactor", []byte("x"), map[string][]string{"X-Task-ID": {fmt.Sprintf("%d-%d", w, i)}}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if err := kit.Close(ctx); err != nil {
		t.Fatal(err)
	}
	counts, err := store.New(fs).TaskCounts(ctx, at.Truncate(time.Hour), at.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 1 || counts[0].Cells["coder/refactor/all/all"] != 200 {
		t.Errorf("TaskCounts after 200 concurrent publishes = %+v, want one document counting 200", counts)
	}
}

// Publish sets Nats-Msg-Id from the task's tenant and idempotency key: a
// publisher's retry within the work stream's duplicate window is one task,
// two tenants' tasks with one key are two, a task without a key gets no id
// (each publish is a task), and an id the publisher sets is kept.
func TestPublishSetsTheMessageID(t *testing.T) {
	f := newFixture(t, jetstream.WorkQueuePolicy, false)
	ctx := testenv.Context(t)
	kit := agentkit.New(f.js)
	tests := []struct {
		name      string
		headers   []map[string][]string // published in turn
		wantTasks int
		wantID    string // the first task's Nats-Msg-Id
	}{
		{"a retry with one key", []map[string][]string{
			{"X-Tenant-ID": {"acme"}, "X-Idempotency-Key": {"retry-1"}},
			{"X-Tenant-ID": {"acme"}, "X-Idempotency-Key": {"retry-1"}},
		}, 1, agentkit.IdempotencyDocID("acme", "retry-1")},
		{"the key from the task id and version", []map[string][]string{
			{"X-Tenant-ID": {"acme"}, "X-Task-ID": {"t-9"}, "X-Task-Version": {"v2"}},
			{"X-Tenant-ID": {"acme"}, "X-Idempotency-Key": {"t-9-v2"}},
		}, 1, agentkit.IdempotencyDocID("acme", "t-9-v2")},
		{"two tenants with one key", []map[string][]string{
			{"X-Tenant-ID": {"acme"}, "X-Idempotency-Key": {"shared-1"}},
			{"X-Tenant-ID": {"beta"}, "X-Idempotency-Key": {"shared-1"}},
		}, 2, agentkit.IdempotencyDocID("acme", "shared-1")},
		{"the default tenant", []map[string][]string{
			{"X-Idempotency-Key": {"default-1"}},
			{"X-Tenant-ID": {"default"}, "X-Idempotency-Key": {"default-1"}},
		}, 1, agentkit.IdempotencyDocID("default", "default-1")},
		{"no key", []map[string][]string{{"X-Tenant-ID": {"acme"}}, {"X-Tenant-ID": {"acme"}}}, 2, ""},
		{"the publisher's own id", []map[string][]string{
			{"X-Tenant-ID": {"acme"}, "X-Idempotency-Key": {"own-1"}, "Nats-Msg-Id": {"mine"}},
			{"X-Tenant-ID": {"acme"}, "X-Idempotency-Key": {"own-2"}, "Nats-Msg-Id": {"mine"}},
		}, 1, "mine"},
	}
	tasks, err := f.js.Stream(ctx, "TASKS")
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			subject := fmt.Sprintf("agents.backend.tasks.case%d", i)
			seqs := map[uint64]bool{}
			for _, h := range tc.headers {
				got, err := kit.Publish(ctx, subject, []byte("task"), h)
				if err != nil {
					t.Fatalf("Publish(%v) = %v", h, err)
				}
				seqs[got.Ack.Sequence] = true
			}
			info, err := tasks.Info(ctx, jetstream.WithSubjectFilter(subject))
			if err != nil {
				t.Fatal(err)
			}
			if n := info.State.Subjects[subject]; n != uint64(tc.wantTasks) || len(seqs) != tc.wantTasks {
				t.Errorf("%d publishes made %d tasks (%d sequences), want %d", len(tc.headers), n, len(seqs), tc.wantTasks)
			}
			first, err := tasks.GetLastMsgForSubject(ctx, subject)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantTasks == 2 {
				if first, err = tasks.GetMsg(ctx, first.Sequence-1); err != nil {
					t.Fatal(err)
				}
			}
			if got := first.Header.Get("Nats-Msg-Id"); got != tc.wantID {
				t.Errorf("first task's Nats-Msg-Id = %q, want %q", got, tc.wantID)
			}
		})
	}
}
