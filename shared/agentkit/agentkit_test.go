package agentkit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var names = bridge.Names{AdvisoryStream: "DLQ_ADVISORIES", RecordStream: "DLQ_RECORDS", FailureBucket: "dlq_failures"}

type fixture struct {
	nats *testenv.NATS
	nc   *nats.Conn
	js   jetstream.JetStream
	cons jetstream.Consumer
}

// newFixture starts NATS with the DLQ resources and a TASKS stream whose
// worker consumer has MaxDeliver 3 and a BackOff.
func newFixture(t *testing.T, retention jetstream.RetentionPolicy, ensure bool) *fixture {
	t.Helper()
	ctx := testenv.Context(t)
	f := &fixture{nats: testenv.NewNATS(t)}
	f.nc, f.js = f.nats.Connect(t)
	if ensure {
		if err := bridge.Ensure(ctx, f.js, names, obs.Discard()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.js.CreateStream(ctx, jetstream.StreamConfig{Name: "TASKS", Subjects: []string{"agents.>"},
		Retention: retention}); err != nil {
		t.Fatal(err)
	}
	var err error
	f.cons, err = f.js.CreateOrUpdateConsumer(ctx, "TASKS", jetstream.ConsumerConfig{Durable: "backend",
		AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 3, AckWait: 30 * time.Second,
		BackOff: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) publish(t *testing.T, subject string, data []byte, hdr map[string]string) uint64 {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = data
	for k, v := range hdr {
		m.Header.Set(k, v)
	}
	ack, err := f.js.PublishMsg(testenv.Context(t), m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

func (f *fixture) next(t *testing.T) jetstream.Msg {
	t.Helper()
	m, err := f.cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatalf("next task: %v", err)
	}
	return m
}

func TestTerminateCopiesThenTerms(t *testing.T) {
	f := newFixture(t, jetstream.WorkQueuePolicy, true)
	ctx := testenv.Context(t)
	payload := []byte{0, 0xff, 'a', '\r', '\n'}
	seq := f.publish(t, "agents.backend.tasks.review", payload, map[string]string{
		"X-Tenant-ID": "acme", "Nats-Msg-Id": "task-1-v1", "X-Bin": "\xfe"})
	terminated, err := f.nc.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.TASKS.backend")
	if err != nil {
		t.Fatal(err)
	}
	kit := agentkit.New(f.js, agentkit.WithAgent("backend"))
	m := f.next(t)
	yes := true
	err = kit.Terminate(ctx, m, agentkit.Failure{Code: "hallucination_loop", Detail: "loop\nat step 3",
		CompletedSteps: []string{"draft"}, Retryable: &yes})
	if err != nil {
		t.Fatalf("Terminate = %v", err)
	}
	recs, err := f.js.Stream(ctx, "DLQ_RECORDS")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := recs.GetMsg(ctx, 1)
	if err != nil {
		t.Fatalf("record not in DLQ_RECORDS: %v", err)
	}
	if raw.Subject != "dlq.records.TASKS" {
		t.Errorf("record subject = %q, want dlq.records.TASKS", raw.Subject)
	}
	rec, err := event.ParseRecord(raw.Header, raw.Data)
	if err != nil {
		t.Fatalf("ParseRecord = %v", err)
	}
	if !bytes.Equal(rec.Data, payload) {
		t.Errorf("record payload = %x, want %x", rec.Data, payload)
	}
	wantHdr := map[string][]string{"X-Tenant-ID": {"acme"}, "Nats-Msg-Id": {"task-1-v1"}, "X-Bin": {"\xfe"}}
	if d := cmp.Diff(wantHdr, rec.Headers); d != "" {
		t.Errorf("record headers (-want +got):\n%s", d)
	}
	if rec.Meta.StreamSeq != seq || rec.Meta.Failure.Code != "hallucination_loop" || rec.Meta.Failure.Agent != "backend" ||
		rec.Meta.Failure.Attempt != 1 || rec.Meta.Consumer != "backend" {
		t.Errorf("record meta = %+v", rec.Meta)
	}
	// TERM on a WorkQueue stream removes the message: the record is its only copy.
	tasks, _ := f.js.Stream(ctx, "TASKS")
	if _, err := tasks.GetMsg(ctx, seq); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("original after TERM: %v, want ErrMsgNotFound", err)
	}
	adv, err := terminated.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no terminated advisory: %v", err)
	}
	var a struct {
		StreamSeq uint64 `json:"stream_seq"`
		Reason    string `json:"reason"`
	}
	if err := json.Unmarshal(adv.Data, &a); err != nil {
		t.Fatal(err)
	}
	if a.StreamSeq != seq || a.Reason != "hallucination_loop: loop at step 3" {
		t.Errorf("advisory = %+v, want seq %d reason %q", a, seq, "hallucination_loop: loop at step 3")
	}
}

func TestTerminateWithoutRecordStreamNaksInstead(t *testing.T) {
	f := newFixture(t, jetstream.WorkQueuePolicy, false)
	ctx := testenv.Context(t)
	seq := f.publish(t, "agents.backend.tasks.review", []byte("task"), nil)
	kit := agentkit.New(f.js)
	m := f.next(t)
	if err := kit.Terminate(ctx, m, agentkit.Failure{Code: "impossible_task"}); err == nil {
		t.Fatal("Terminate without a record stream = nil, want an error")
	}
	// Not terminated: redelivered, payload intact.
	m2 := f.next(t)
	md, _ := m2.Metadata()
	if md.Sequence.Stream != seq || md.NumDelivered != 2 || string(m2.Data()) != "task" {
		t.Errorf("redelivery = seq %d delivered %d data %q, want seq %d delivered 2", md.Sequence.Stream, md.NumDelivered, m2.Data(), seq)
	}
}

func TestTerminateTwiceKeepsOneRecord(t *testing.T) {
	// A crash between the record publish and the TERM redelivers the message
	// and the agent terminates it again: Nats-Msg-Id <stream>.<seq> makes the
	// second copy a duplicate the record stream drops.
	f := newFixture(t, jetstream.LimitsPolicy, true)
	ctx := testenv.Context(t)
	f.publish(t, "agents.backend.tasks.review", []byte("task"), nil)
	kit := agentkit.New(f.js)
	m := f.next(t)
	err := kit.Terminate(ctx, crashBeforeTerm{m}, agentkit.Failure{Code: "impossible_task"})
	if err == nil {
		t.Fatal("Terminate with a failing TERM = nil, want the error")
	}
	if err := m.Nak(); err != nil {
		t.Fatal(err)
	}
	if err := kit.Terminate(ctx, f.next(t), agentkit.Failure{Code: "impossible_task"}); err != nil {
		t.Fatalf("second Terminate = %v", err)
	}
	recs, _ := f.js.Stream(ctx, "DLQ_RECORDS")
	info, err := recs.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("records = %d, want 1", info.State.Msgs)
	}
}

func TestTerminateTooLargeRecordsFailureAndNaks(t *testing.T) {
	f := newFixture(t, jetstream.WorkQueuePolicy, true)
	ctx := testenv.Context(t)
	max := int(f.nc.MaxPayload())
	// Fits as a task, but not with the record's headers added.
	seq := f.publish(t, "agents.backend.tasks.review", bytes.Repeat([]byte("x"), max-200), nil)
	kit := agentkit.New(f.js, agentkit.WithAgent("backend"))
	m := f.next(t)
	err := kit.Terminate(ctx, m, agentkit.Failure{Code: "context_window_overflow", Detail: strings.Repeat("d", 300)})
	if !errors.Is(err, agentkit.ErrRecordTooLarge) {
		t.Fatalf("Terminate(huge) = %v, want ErrRecordTooLarge", err)
	}
	kv, _ := f.js.KeyValue(ctx, "dlq_failures")
	e, err := kv.Get(ctx, event.ID("TASKS", seq))
	if err != nil {
		t.Fatalf("failure not recorded: %v", err)
	}
	var fail event.Failure
	if err := json.Unmarshal(e.Value(), &fail); err != nil || fail.Code != "context_window_overflow" {
		t.Errorf("failure record = %s (%v)", e.Value(), err)
	}
	if m2 := f.next(t); len(m2.Data()) != max-200 {
		t.Errorf("redelivered payload of %d bytes, want %d", len(m2.Data()), max-200)
	}
}

func TestFailRecordsAndBacksOff(t *testing.T) {
	f := newFixture(t, jetstream.LimitsPolicy, true)
	ctx := testenv.Context(t)
	seq := f.publish(t, "agents.backend.tasks.review", []byte("task"), nil)
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	kit := agentkit.New(f.js, agentkit.WithAgent("backend"), agentkit.WithClock(func() time.Time { return now }))
	kv, _ := f.js.KeyValue(ctx, "dlq_failures")
	for attempt := 1; attempt <= 3; attempt++ {
		m := f.next(t)
		md, _ := m.Metadata()
		if int(md.NumDelivered) != attempt {
			t.Fatalf("delivery %d, want %d", md.NumDelivered, attempt)
		}
		// The last delivery's NAK only ends the message: no delay.
		wantDelay := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 0}[attempt-1]
		if got := kit.Backoff(ctx, md); got != wantDelay {
			t.Errorf("Backoff(delivery %d) = %v, want %v", attempt, got, wantDelay)
		}
		if err := kit.Fail(ctx, m, agentkit.Failure{Code: "llm_provider_timeout", Detail: "504",
			CompletedSteps: []string{"fetch"}}); err != nil {
			t.Fatalf("Fail = %v", err)
		}
		e, err := kv.Get(ctx, event.ID("TASKS", seq))
		if err != nil {
			t.Fatal(err)
		}
		var got event.Failure
		if err := json.Unmarshal(e.Value(), &got); err != nil {
			t.Fatal(err)
		}
		want := event.Failure{Code: "llm_provider_timeout", Detail: "504", Attempt: attempt, Agent: "backend",
			CompletedSteps: []string{"fetch"}, RecordedAt: now}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("failure record after attempt %d (-want +got):\n%s", attempt, d)
		}
	}
	// MaxDeliver 3 is exhausted: no fourth delivery.
	if m, err := f.cons.Next(jetstream.FetchMaxWait(800 * time.Millisecond)); err == nil {
		md, _ := m.Metadata()
		t.Errorf("delivery %d after MaxDeliver 3", md.NumDelivered)
	}
}

func TestBudget(t *testing.T) {
	tests := []struct {
		text string
		want int
	}{
		{"", 0},
		{"abcd", 1},
		{"abcde", 2},
		{strings.Repeat("word ", 100), 125},
		{"日本語", 3},
		{"café", 2}, // "caf" → 1, "é" → 1
	}
	for _, tt := range tests {
		if got := agentkit.EstimateTokens(tt.text); got != tt.want {
			t.Errorf("EstimateTokens(%q) = %d, want %d", tt.text, got, tt.want)
		}
	}
	b := agentkit.Budget{MaxTokens: 100}
	if e, err := b.Check(strings.Repeat("a", 300)); err != nil || e.Warn {
		t.Errorf("Check(75 tokens of 100) = %+v, %v; want no warning", e, err)
	}
	if e, err := b.Check(strings.Repeat("a", 200), strings.Repeat("b", 160)); err != nil || !e.Warn || e.Tokens != 90 {
		t.Errorf("Check(90 of 100) = %+v, %v; want a warning", e, err)
	}
	_, err := b.Check(strings.Repeat("a", 404))
	var oe *agentkit.OverflowError
	if !errors.Is(err, agentkit.ErrContextWindowOverflow) || !errors.As(err, &oe) || oe.Failure().Code != "context_window_overflow" {
		t.Errorf("Check(101 of 100) = %v, want an OverflowError with code context_window_overflow", err)
	}
	if got := agentkit.BudgetFromHeaders(map[string][]string{"Jsdlq-Max-Context-Tokens": {"80000"}}, 128000); got.MaxTokens != 80000 {
		t.Errorf("BudgetFromHeaders(80000, 128000) = %d, want 80000", got.MaxTokens)
	}
	if got := agentkit.BudgetFromHeaders(map[string][]string{"jsdlq-max-context-tokens": {"bogus"}}, 8000); got.MaxTokens != 8000 {
		t.Errorf("BudgetFromHeaders(bogus) = %d, want 8000", got.MaxTokens)
	}
}

func TestIdempotencyDocID(t *testing.T) {
	// Pinned: the TypeScript kit's test pins the same ids, and records
	// already written must stay where readers look.
	for _, tc := range []struct{ tenant, key, want string }{
		{"acme", "task-1-v1", "tenant-sha256-06b46044e614c7654bdf1cd6b56e6b6d8b8f656680a34c6ff079fb454f7e8a58"},
		{"default", "task-1-v1", "tenant-sha256-3044eaa6a380e16a42df3718290c77bd9347594938de766b6a8e20ba62723feb"},
		// The length prefix counts bytes: 12 for these six characters.
		{"ünï 日本", "t9-2", "tenant-sha256-0b76d6c3f304abf96bb21b9b3ed5707f92e80e647bd091dc9588458805aa0118"},
		{"", "", "tenant-sha256-ba768b331fd86cec803be04e56ab2b3d4c0e98ef4ee4fcd4e72ad7cce61a1d1f"},
	} {
		if got := agentkit.IdempotencyDocID(tc.tenant, tc.key); got != tc.want {
			t.Errorf("IdempotencyDocID(%q, %q) = %q, want %q", tc.tenant, tc.key, got, tc.want)
		}
	}
	// Injective over tenant and key, and of fixed length whatever they
	// hold: the length prefix keeps a shifted boundary apart.
	seen := map[string][2]string{}
	for _, tk := range [][2]string{{"a", "bc"}, {"ab", "c"}, {"abc", ""}, {"", "abc"}, {"acme", "task-1"}, {"beta", "task-1"},
		{"a/b", "../x"}, {"1:a", "b"}, {"1", ":ab"}, {"日本", "😀"}, {strings.Repeat("t", 2000), strings.Repeat("k", 10000)}} {
		got := agentkit.IdempotencyDocID(tk[0], tk[1])
		if !strings.HasPrefix(got, "tenant-sha256-") || len(got) != 78 {
			t.Errorf("IdempotencyDocID(%q, %q) = %q, want tenant-sha256-<64 hex>", tk[0], tk[1], got)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("IdempotencyDocID(%q, %q) = IdempotencyDocID(%q, %q)", tk[0], tk[1], other[0], other[1])
		}
		seen[got] = tk
	}
}

func TestLegacyIdempotencyDocID(t *testing.T) {
	for _, key := range []string{"task-1-v1", "Task_7.v2", "ünïcode"} {
		if got := agentkit.LegacyIdempotencyDocID(key); got != key {
			t.Errorf("LegacyIdempotencyDocID(%q) = %q, want the key itself", key, got)
		}
	}
	seen := map[string]string{}
	for _, key := range []string{"a/b", "a/c", ".", "..", "__x__", "", strings.Repeat("k", 1501)} {
		got := agentkit.LegacyIdempotencyDocID(key)
		if !strings.HasPrefix(got, "sha256-") || len(got) != 71 {
			t.Errorf("LegacyIdempotencyDocID(%q) = %q, want sha256-<64 hex>", key, got)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("LegacyIdempotencyDocID(%q) = LegacyIdempotencyDocID(%q)", key, other)
		}
		seen[got] = key
	}
}

func TestTaskOf(t *testing.T) {
	f := newFixture(t, jetstream.LimitsPolicy, false)
	tests := []struct {
		hdr  map[string]string
		want agentkit.Task
	}{
		{map[string]string{"X-Tenant-ID": "acme", "X-Idempotency-Key": "k1"}, agentkit.Task{Tenant: "acme", Key: "k1"}},
		{map[string]string{"X-Tenant-ID": "  acme\t", "X-Task-ID": " t2 ", "X-Task-Version": "3"}, agentkit.Task{Tenant: "acme", Key: "t2-3"}},
		{map[string]string{"X-Task-ID": "t3"}, agentkit.Task{Tenant: "default", Key: "t3"}},
		{map[string]string{"X-Tenant-ID": " "}, agentkit.Task{Tenant: "default"}},
	}
	for _, tc := range tests {
		seq := f.publish(t, "agents.backend.tasks.review", []byte("x"), tc.hdr)
		m := f.next(t)
		md, err := m.Metadata()
		if err != nil || md.Sequence.Stream != seq {
			t.Fatalf("delivery %d: %v, %v", seq, md, err)
		}
		tc.want.PublishedAt = md.Timestamp
		if got := agentkit.TaskOf(m); !got.PublishedAt.Equal(tc.want.PublishedAt) || got.Tenant != tc.want.Tenant || got.Key != tc.want.Key {
			t.Errorf("TaskOf(%v) = %+v, want %+v", tc.hdr, got, tc.want)
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
}

// crashBeforeTerm is a real delivered message whose TERM is lost, as when the
// agent dies right after the record was confirmed.
type crashBeforeTerm struct{ jetstream.Msg }

func (crashBeforeTerm) TermWithReason(string) error { return errors.New("connection lost") }
