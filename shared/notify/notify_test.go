package notify_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"cloud.google.com/go/pubsub/v2"
	cloudevent "github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/functions/classify"
	"github.com/jsdlq/jsdlq/internal/eventschema"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type env struct {
	fs    *firestore.Client
	store *store.Store
	clock *testenv.Clock
	ps    *pubsub.Client
	pub   *pubsub.Publisher
	sub   string
	js    jetstream.JetStream
	work  jetstream.Stream
}

// setup wires a store (Firestore emulator), a notifications topic with a
// subscription (Pub/Sub emulator) and a work stream (embedded JetStream).
func setup(t *testing.T) *env {
	t.Helper()
	ctx := testenv.Context(t)
	fs, _ := testenv.Firestore(t)
	clock := testenv.NewClock(time.Date(2026, 11, 21, 10, 5, 0, 0, time.UTC))
	ps, project := testenv.PubSub(t)
	topic := fmt.Sprintf("projects/%s/topics/%s", project, event.DefaultNotificationsTopic)
	sub := fmt.Sprintf("projects/%s/subscriptions/%s", project, testenv.Name(t, "sub"))
	testenv.TopicWithSubscription(t, ctx, ps, topic, sub)
	pub := ps.Publisher(topic)
	t.Cleanup(pub.Stop)
	_, js := testenv.NewNATS(t).Connect(t)
	work, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: event.DefaultWorkStream, Subjects: []string{"agents.>"}})
	if err != nil {
		t.Fatal(err)
	}
	return &env{fs: fs, store: store.New(fs, store.WithClock(clock.Now)), clock: clock, ps: ps, pub: pub, sub: sub, js: js, work: work}
}

func (e *env) flusher(opts ...notify.Option) *notify.Flusher {
	tasks := func(context.Context) (notify.Tasks, error) { return e.js, nil }
	return notify.New(e.store, notify.PubSubTopic(e.pub), append([]notify.Option{notify.WithTasks(tasks), notify.WithConsoleURL("https://console.example.com")}, opts...)...)
}

// received pulls the subscription until quiet for a few seconds.
func (e *env) received(t *testing.T) []*pubsub.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(testenv.Context(t), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var got []*pubsub.Message
	quiet := time.AfterFunc(5*time.Second, cancel)
	err := e.ps.Subscriber(e.sub).Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		mu.Lock()
		defer mu.Unlock()
		got = append(got, m)
		quiet.Reset(3 * time.Second)
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive() = %v", err)
	}
	return got
}

// triageTasks returns the messages on the triage subject of agent.
func (e *env) triageTasks(t *testing.T, agent string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := testenv.Context(t)
	subject := event.DefaultConventions.TaskSubject(agent, event.TriageTaskType)
	info, err := e.work.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := e.work.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		if m.Subject == subject {
			out = append(out, m)
		}
	}
	return out
}

func classifyEvent(t *testing.T, seq uint64) cloudevent.Event {
	t.Helper()
	return classifyEventOn(t, seq, "agents.backend.tasks.code_review")
}

func classifyEventOn(t *testing.T, seq uint64, subject string) cloudevent.Event {
	t.Helper()
	ev := event.Event{Schema: event.Schema, ID: event.ID("TASKS", seq), Kind: event.KindExplicit, Stream: "TASKS", StreamSeq: seq,
		Consumer: "backend", Tenant: "acme", Agent: "backend", ObservedAt: time.Now().UTC()}
	ev.Message.Subject = subject
	ev.Message.Headers = event.EncodeHeaders(map[string][]string{event.HeaderTenant: {"acme"}, event.HeaderTaskID: {"t-1"}})
	ev.Message.SetPayload([]byte(`{"x":1}`))
	ev.Failure = &event.Failure{Code: "data_integrity", Detail: "checksum mismatch", Attempt: 3, Agent: "backend", RecordedAt: time.Now().UTC()}
	b, err := event.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	ce, err := testenv.PubSubEvent(fmt.Sprint("msg-", seq), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ce
}

// An escalated entry sends its triage agent exactly one task, however often
// classify is delivered its event and however often the outbox is flushed.
func TestEscalationOneTriageTask(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	h := classify.New(classify.Config{}, classify.Deps{Store: e.store, Policy: triage.NewLoader(store.New(e.fs), nil), Now: e.clock.Now})
	f := e.flusher()
	for range 5 {
		if err := h.Handle(ctx, classifyEvent(t, 42)); err != nil {
			t.Fatalf("Handle() = %v", err)
		}
		if _, err := f.Flush(ctx); err != nil {
			t.Fatalf("Flush() = %v", err)
		}
	}
	entryID, _ := store.EntryID(event.ID("TASKS", 42))
	got, err := e.store.GetMeta(ctx, entryID)
	if err != nil || got.Status != store.Escalated {
		t.Fatalf("entry = %+v, %v, want escalated", got, err)
	}
	agent := event.TriageAgent(got.Plan.EscalateTo)
	tasks := e.triageTasks(t, agent)
	if len(tasks) != 1 {
		t.Fatalf("%d triage tasks on %s, want 1", len(tasks), event.DefaultConventions.TaskSubject(agent, event.TriageTaskType))
	}
	m := tasks[0]
	for name, want := range map[string]string{event.HeaderTaskID: entryID, event.HeaderTenant: "acme", event.HeaderTriageEntry: entryID, event.HeaderTaskType: event.TriageTaskType} {
		if got := m.Header.Get(name); got != want {
			t.Errorf("triage header %s = %q, want %q", name, got, want)
		}
	}
	if id := m.Header.Get(jetstream.MsgIDHeader); id == "" || id[:len(notify.TriageMsgIDPrefix)] != notify.TriageMsgIDPrefix {
		t.Errorf("Nats-Msg-Id = %q, want triage-<notification id>", id)
	}
	v, err := eventschema.Load("../../docs/triage-task.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Validate(m.Data); err != nil {
		t.Errorf("triage task %s: %v", m.Data, err)
	}
	msgs := e.received(t)
	if len(msgs) != 1 || msgs[0].Attributes["kind"] != string(event.NotifyEscalated) {
		t.Errorf("received %d notifications (%v), want one escalated", len(msgs), msgs)
	}
}

// A triage task that dies is escalated and its notification published, but
// no triage task is sent about it: that could loop for as long as the
// triage agent fails.
func TestDeadTriageTaskIsNotTriagedAgain(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	h := classify.New(classify.Config{}, classify.Deps{Store: e.store, Policy: triage.NewLoader(store.New(e.fs), nil), Now: e.clock.Now})
	subject := event.DefaultConventions.TaskSubject("ceo", event.TriageTaskType)
	if err := h.Handle(ctx, classifyEventOn(t, 43, subject)); err != nil {
		t.Fatalf("Handle() = %v", err)
	}
	res, err := e.flusher().Flush(ctx)
	if err != nil || res.Triaged != 0 {
		t.Fatalf("Flush() = %+v, %v, want no triage task", res, err)
	}
	if tasks := e.triageTasks(t, "ceo"); len(tasks) != 0 {
		t.Errorf("%d triage tasks about a dead triage task, want 0", len(tasks))
	}
	if msgs := e.received(t); len(msgs) != 1 || msgs[0].Attributes["kind"] != string(event.NotifyEscalated) {
		t.Errorf("received %d notifications, want the one escalated", len(msgs))
	}
}

// Every kind the store writes arrives on the topic once, with its
// attributes, and the body validates against the schema.
func TestEveryKindArrivesOnce(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	for i, st := range []store.Status{store.Escalated, store.AwaitingApproval, store.Quarantined} {
		en := &store.Entry{ID: fmt.Sprint("TASKS.", i+1), EventID: fmt.Sprint("TASKS.", i+1), Stream: "TASKS", StreamSeq: int64(i + 1),
			Subject: "agents.cto.tasks.code_review", Tenant: "acme", Agent: "cto", TaskType: "code_review", Kind: "explicit",
			Category: "permanent", ReasonCode: "data_integrity", Action: "escalate", Status: st}
		if _, err := e.store.Record(ctx, en, "classify"); err != nil {
			t.Fatal(err)
		}
	}
	// Open the breaker of tenant "beta", half-open it, close it.
	for i := range store.DefaultBreaker.Threshold {
		en := &store.Entry{ID: fmt.Sprint("TASKS.b", i), EventID: fmt.Sprint("TASKS.b", i), Stream: "TASKS", StreamSeq: 100,
			Tenant: "beta", Kind: "explicit", Category: "transient", ReasonCode: "timeout", Status: store.Scheduled, TaskName: fmt.Sprint("t", i)}
		if _, err := e.store.Record(ctx, en, "classify"); err != nil {
			t.Fatal(err)
		}
	}
	e.clock.Add(store.DefaultBreaker.Cooldown)
	if _, err := e.store.BreakerAdvance(ctx, "beta", "reconcile"); err != nil {
		t.Fatal(err)
	}
	e.clock.Add(time.Second)
	if _, err := e.store.BreakerClose(ctx, "beta", authority.Actor{Name: "alice", Role: authority.Operator}, "upstream fixed"); err != nil {
		t.Fatal(err)
	}
	f := e.flusher()
	for range 3 {
		if _, err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	v, err := eventschema.Load("../../docs/notification.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, m := range e.received(t) {
		n, err := event.DecodeNotification(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Validate(m.Data); err != nil {
			t.Errorf("%s: %v", m.Data, err)
		}
		if d := cmp.Diff(n.Attributes(), m.Attributes); d != "" {
			t.Errorf("attributes of %s (-want +got):\n%s", n.Kind, d)
		}
		got[string(n.Kind)+"/"+n.Tenant]++
	}
	want := map[string]int{"escalated/acme": 1, "awaiting_approval/acme": 1, "quarantined/acme": 1,
		"breaker_opened/beta": 1, "breaker_half_open/beta": 1, "breaker_closed/beta": 1}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("notifications received (-want +got):\n%s", d)
	}
	if n := len(e.triageTasks(t, event.DefaultTriageAgent)); n != 2 {
		t.Errorf("%d triage tasks for ceo, want 2 (escalated, awaiting approval)", n)
	}
}

// Two flushers at once publish each notification once.
func TestConcurrentFlushesPublishOnce(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	const n = 6 // below the breaker threshold: entries only
	for i := range n {
		en := &store.Entry{ID: fmt.Sprint("TASKS.", i+1), EventID: fmt.Sprint("TASKS.", i+1), Stream: "TASKS", StreamSeq: int64(i + 1),
			Tenant: "acme", Kind: "explicit", Category: "permanent", ReasonCode: "data_integrity", Status: store.Escalated}
		if _, err := e.store.Record(ctx, en, "classify"); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	results := make([]notify.Result, 2)
	for i := range results {
		f := e.flusher()
		wg.Go(func() {
			r, err := f.Flush(ctx)
			if err != nil {
				t.Error(err)
			}
			results[i] = r
		})
	}
	wg.Wait()
	if got := results[0].Published + results[1].Published; got != n {
		t.Errorf("published %d+%d, want %d in all", results[0].Published, results[1].Published, n)
	}
	e.receivedOnceEach(t, n)
	if got := len(e.triageTasks(t, event.DefaultTriageAgent)); got != n {
		t.Errorf("%d triage tasks, want %d", got, n)
	}
}

// A flush after a commit publishes what the commit staged by id, reading
// nothing, and looks for what other flushes left pending at most once a
// sweep interval: a leftover waits for the next sweep, then goes once.
func TestFlushStagedSweepsAtMostOncePerInterval(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	seq := 0
	escalate := func() []*store.Outbox {
		seq++
		return e.escalate(t, seq)
	}
	f := e.flusher(notify.WithSweepEvery(time.Minute))
	steps := []struct {
		name      string
		advance   time.Duration
		leftover  bool // another instance stages one it does not flush
		published int
		reads     int64 // -1: not checked (the sweep's query)
	}{
		{"first call sweeps", 0, true, 2, -1},
		{"within the interval: by id only", 30 * time.Second, true, 1, 0},
		{"the interval over: sweeps the leftover", 30 * time.Second, false, 2, -1},
	}
	for _, st := range steps {
		e.clock.Add(st.advance)
		if st.leftover {
			escalate()
		}
		staged := escalate()
		before := e.store.Ops()
		res, err := f.FlushStaged(ctx, staged)
		if err != nil || res.Published != st.published || res.Failed != 0 {
			t.Errorf("%s: FlushStaged() = %+v, %v; want %d published", st.name, res, err, st.published)
		}
		if got := e.store.Ops().Reads - before.Reads; st.reads >= 0 && got != st.reads {
			t.Errorf("%s: FlushStaged() read %d documents, want %d", st.name, got, st.reads)
		}
	}
	e.receivedOnceEach(t, seq)
}

// escalate records entry TASKS.<seq> escalated, as classify does, and
// returns what the commit staged.
func (e *env) escalate(t *testing.T, seq int) []*store.Outbox {
	t.Helper()
	id := fmt.Sprint("TASKS.", seq)
	en := &store.Entry{ID: id, EventID: id, Stream: "TASKS", StreamSeq: int64(seq),
		Tenant: "acme", Kind: "explicit", Category: "permanent", ReasonCode: "data_integrity", Status: store.Escalated}
	res, err := e.store.Record(testenv.Context(t), en, "classify")
	if err != nil || len(res.Staged) != 1 {
		t.Fatalf("Record(%s) staged %d, %v; want 1", id, len(res.Staged), err)
	}
	return res.Staged
}

// AfterCommit hands a Flusher what the commit staged: that is published,
// and a leftover of another flush waits for the sweep. Without what was
// staged it flushes what is pending.
func TestAfterCommitPublishesWhatWasStaged(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	// The test is about what is published, not within what budget.
	f := e.flusher(notify.WithAfterCommitBudget(time.Minute))
	if _, err := f.FlushStaged(ctx, nil); err != nil { // this minute's sweep: nothing pending
		t.Fatal(err)
	}
	leftover, staged := e.escalate(t, 1)[0], e.escalate(t, 2)
	notify.AfterCommit(ctx, f, obs.Discard(), "classify", "TASKS.2", staged)
	state := func(id string) string {
		o, err := e.store.GetNotification(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return o.State
	}
	if got := state(staged[0].ID); got != store.OutboxPublished {
		t.Errorf("staged notification = %s, want %s", got, store.OutboxPublished)
	}
	if got := state(leftover.ID); got != store.OutboxPending {
		t.Errorf("another flush's leftover = %s, want %s until the next sweep", got, store.OutboxPending)
	}
	notify.AfterCommit(ctx, f, obs.Discard(), "replay", "TASKS.1", nil)
	if got := state(leftover.ID); got != store.OutboxPublished {
		t.Errorf("leftover after a flush of what is pending = %s, want %s", got, store.OutboxPublished)
	}
}

// receivedOnceEach checks that the subscription received n distinct
// notifications, each once.
func (e *env) receivedOnceEach(t *testing.T, n int) {
	t.Helper()
	ids := map[string]int{}
	for _, m := range e.received(t) {
		ids[m.Attributes[event.AttrNotificationID]]++
	}
	if len(ids) != n {
		t.Errorf("received %d distinct notifications, want %d", len(ids), n)
	}
	for id, c := range ids {
		if c != 1 {
			t.Errorf("notification %s received %d times, want once", id, c)
		}
	}
}

// slowTopic publishes to topic, the store's clock moving on by step with
// each publish: a flush that outlasts its claims.
type slowTopic struct {
	topic notify.Topic
	clock *testenv.Clock
	step  time.Duration
}

func (s slowTopic) Publish(ctx context.Context, data []byte, attrs map[string]string) error {
	s.clock.Add(s.step)
	return s.topic.Publish(ctx, data, attrs)
}

// A flush stops publishing what it claimed once the claims' lease is nearly
// over: another flush may claim them then, and both would publish. What is
// left is published by a later flush, each notification once.
func TestFlushStopsBeforeItsClaimsRunOut(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	for seq := 1; seq <= 3; seq++ {
		e.escalate(t, seq)
	}
	tasks := func(context.Context) (notify.Tasks, error) { return e.js, nil }
	slow := notify.New(e.store, slowTopic{notify.PubSubTopic(e.pub), e.clock, 50 * time.Second},
		notify.WithTasks(tasks), notify.WithLease(2*time.Minute))
	res, err := slow.Flush(ctx)
	if err != nil || res.Published != 2 || res.Failed != 1 || !strings.Contains(strings.Join(res.Errors, ";"), notify.ErrLeaseRunningOut.Error()) {
		t.Fatalf("Flush() = %+v, %v; want 2 published, 1 left as its lease ran out", res, err)
	}
	e.clock.Add(time.Minute)
	if res, err := e.flusher().Flush(ctx); err != nil || res.Published != 1 {
		t.Errorf("the next Flush() = %+v, %v; want the one left", res, err)
	}
	e.receivedOnceEach(t, 3)
}
