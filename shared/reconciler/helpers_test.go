package reconciler_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/firestore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Stream names of the fixture.
const (
	workStream = "TASKS"
	advStream  = "DLQ_ADVISORIES"
	recStream  = "DLQ_RECORDS"
)

// fixture is one test's Firestore project, Cloud Tasks queue (paused, so the
// tasks stay where the test put them) and, when asked for, JetStream.
type fixture struct {
	t     testing.TB
	ctx   context.Context
	fs    *firestore.Client
	st    *store.Store
	queue string
	sched *tasks.Scheduler
	ct    *testenv.CloudTasks
	js    jetstream.JetStream
	nats  *testenv.NATS
	logs  *logBuffer
}

// newFixture starts the fixture's emulators and, with withNATS, a JetStream
// server configured by natsOpts.
func newFixture(t testing.TB, withNATS bool, natsOpts ...testenv.NATSOption) *fixture {
	t.Helper()
	ctx := testenv.Context(t)
	fs, project := testenv.Firestore(t)
	ct := testenv.NewCloudTasks(t)
	queue := ct.Queue(t, project, "dlq-replay")
	if _, err := ct.Client.PauseQueue(ctx, &cloudtaskspb.PauseQueueRequest{Name: queue}); err != nil {
		t.Fatalf("PauseQueue: %v", err)
	}
	sched := tasks.New(tasks.Config{Queue: queue, ReplayURL: "http://127.0.0.1:9/Replay", ServiceAccount: "tasks@test.iam.gserviceaccount.com", EmulatorHost: ct.Host})
	t.Cleanup(func() { sched.Close() })
	f := &fixture{t: t, ctx: ctx, fs: fs, st: store.New(fs), queue: queue, sched: sched, ct: ct, logs: &logBuffer{}}
	if withNATS {
		n := testenv.NewNATS(t, natsOpts...)
		_, js := n.Connect(t)
		if err := bridge.Ensure(ctx, js, bridge.Names{AdvisoryStream: advStream, RecordStream: recStream, FailureBucket: "dlq_failures"}, obs.Discard()); err != nil {
			t.Fatalf("bridge.Ensure: %v", err)
		}
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: workStream, Subjects: []string{"agents.>"}}); err != nil {
			t.Fatalf("CreateStream(%s): %v", workStream, err)
		}
		f.js, f.nats = js, n
	}
	return f
}

// handler builds reconcile over the fixture. now replaces the clock when
// not nil.
func (f *fixture) handler(cfg reconciler.Config, now func() time.Time, opts ...handlerOption) *reconciler.Handler {
	deps := reconciler.Deps{Logger: obs.NewLogger(f.logs), Store: f.st, Tasks: f.sched, Now: now}
	if f.js != nil {
		deps.JetStream = func(context.Context) (jetstream.JetStream, error) { return f.js, nil }
		cfg.AdvisoryStream, cfg.RecordStream = advStream, recStream
	}
	for _, o := range opts {
		o(&deps)
	}
	return reconciler.New(cfg, deps)
}

// handlerOption changes a dependency fixture.handler builds reconcile with.
type handlerOption func(*reconciler.Deps)

// viaJetStream makes reconcile use js, such as a restricted user's
// connection (connectAs), instead of the fixture's unrestricted one.
func viaJetStream(js jetstream.JetStream) handlerOption {
	return func(d *reconciler.Deps) {
		d.JetStream = func(context.Context) (jetstream.JetStream, error) { return js, nil }
	}
}

// connectAs connects to the fixture's server as user (one made with
// testenv.WithPublishDenied) and returns its JetStream and the errors the
// connection gets asynchronously: a refused request's permissions
// violation arrives there, the request itself gets no answer.
func (f *fixture) connectAs(user string) (jetstream.JetStream, <-chan error) {
	f.t.Helper()
	async := make(chan error, 16)
	_, js := f.nats.Connect(f.t, nats.UserInfo(user, user), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case async <- err:
		default:
		}
	}))
	return js, async
}

// storeAt is a store whose clock stands at at, so seeded entries, breakers
// and transitions carry that time. Its breaker never opens unless asked to.
func (f *fixture) storeAt(at time.Time, breaker ...store.BreakerConfig) *store.Store {
	b := store.BreakerConfig{Threshold: 1_000_000, Window: time.Minute, Cooldown: 15 * time.Minute}
	if len(breaker) > 0 {
		b = breaker[0]
	}
	return store.New(f.fs, store.WithClock(func() time.Time { return at }), store.WithBreaker(b))
}

// entry is an entry of message seq of the work stream, as classify records it.
func entry(seq uint64, tenant string, st store.Status) *store.Entry {
	evID := event.ID(workStream, seq)
	id, err := store.EntryID(evID)
	if err != nil {
		panic(err)
	}
	e := &store.Entry{
		ID: id, EventID: evID, Stream: workStream, Consumer: "worker", StreamSeq: int64(seq),
		Subject: "agents.backend.tasks.implementation", Tenant: tenant, Agent: "backend",
		TaskID: fmt.Sprintf("task-%d", seq), IdempotencyKey: fmt.Sprintf("task-%d-v1", seq),
		Payload: []byte(`{"n":1}`), Kind: "max_deliver", Category: "transient", ReasonCode: "timeout",
		Action: "auto_replay", Strategy: "transient", PolicyVersion: "test", Status: st,
	}
	if st == store.Scheduled {
		e.TaskName = tasks.Name(id, 1)
		e.NextRetryAt = time.Now().Add(time.Hour)
	}
	return e
}

// seed records e as classify does, at the time of st's clock.
func (f *fixture) seed(st *store.Store, e *store.Entry) *store.Entry {
	f.t.Helper()
	res, err := st.Record(f.ctx, e, "classify")
	if err != nil || !res.Created {
		f.t.Fatalf("Record(%s) = %+v, %v; want created", e.ID, res, err)
	}
	return res.Entry
}

// move transitions an entry with st's clock.
func (f *fixture) move(st *store.Store, id string, from, to store.Status, by string) {
	f.t.Helper()
	if _, err := st.Transition(f.ctx, id, store.Change{From: []store.Status{from}, To: to, By: by}); err != nil {
		f.t.Fatalf("Transition(%s, %s -> %s) = %v", id, from, to, err)
	}
}

func (f *fixture) get(id string) *store.Entry {
	f.t.Helper()
	e, err := f.st.GetMeta(f.ctx, id)
	if err != nil {
		f.t.Fatalf("GetMeta(%s) = %v", id, err)
	}
	return e
}

// queueTasks lists the queue's task ids, sorted.
func (f *fixture) queueTasks() []string {
	f.t.Helper()
	var out []string
	if err := f.sched.Each(f.ctx, func(name string, _ time.Time) bool {
		out = append(out, name[strings.LastIndexByte(name, '/')+1:])
		return true
	}); err != nil {
		f.t.Fatalf("list tasks: %v", err)
	}
	slices.Sort(out)
	return out
}

// complete writes the task-idempotency completion record agentkit.Once
// writes for tenant's task with key.
func (f *fixture) complete(tenant, key string) {
	f.t.Helper()
	now := time.Now().UTC()
	rec := agentkit.IdempotencyRecord{Key: key, Tenant: tenant, Status: agentkit.StatusCompleted, Agent: "backend", CompletedAt: now, ExpireAt: now.Add(72 * time.Hour)}
	if _, err := f.fs.Collection(store.TaskIdempotency).Doc(agentkit.IdempotencyDocID(tenant, key)).Set(f.ctx, rec); err != nil {
		f.t.Fatalf("write completion record: %v", err)
	}
}

// advisory publishes a max-deliveries advisory for message seq of the work
// stream, as nats-server does, into the advisory stream.
func (f *fixture) advisory(seq uint64) {
	f.t.Helper()
	body, _ := json.Marshal(map[string]any{
		"type": event.AdvisoryMaxDeliver, "id": fmt.Sprintf("adv-%d", seq), "timestamp": time.Now().UTC(),
		"stream": workStream, "consumer": "worker", "stream_seq": seq, "deliveries": 3,
	})
	if _, err := f.js.Publish(f.ctx, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."+workStream+".worker", body); err != nil {
		f.t.Fatalf("publish advisory: %v", err)
	}
}

// record publishes the explicit record (agentkit.Terminate) of message seq of
// the work stream into the record stream.
func (f *fixture) record(seq uint64) {
	f.t.Helper()
	now := time.Now().UTC()
	hdr, body, err := event.Record{
		Meta: event.RecordMeta{Stream: workStream, StreamSeq: seq, Subject: "agents.backend.tasks.implementation",
			PublishedAt: now, Failure: event.Failure{Code: "context_window_overflow", RecordedAt: now}},
		Data: fmt.Appendf(nil, `{"task":%d}`, seq),
	}.Encode()
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.js.PublishMsg(f.ctx, &nats.Msg{Subject: event.RecordSubject(workStream), Header: nats.Header(hdr), Data: body}); err != nil {
		f.t.Fatalf("publish record: %v", err)
	}
}

func (f *fixture) lastMsg(stream string) *jetstream.RawStreamMsg {
	f.t.Helper()
	s, err := f.js.Stream(f.ctx, stream)
	if err != nil {
		f.t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(f.ctx, ">")
	if err != nil {
		f.t.Fatalf("last message of %s: %v", stream, err)
	}
	return m
}

func (f *fixture) run(h *reconciler.Handler, dry bool) *audit.Report {
	f.t.Helper()
	rep, err := h.Run(f.ctx, dry)
	if err != nil {
		f.t.Fatalf("Run(dry=%v) = %v", dry, err)
	}
	if len(rep.Errors) > 0 {
		f.t.Fatalf("Run(dry=%v) errors: %v", dry, rep.Errors)
	}
	return rep
}

func findings(rep *audit.Report, name string) []*audit.Finding {
	var out []*audit.Finding
	for _, f := range rep.Findings {
		if f.Name == name {
			out = append(out, f)
		}
	}
	return out
}

func finding(t *testing.T, rep *audit.Report, name string) *audit.Finding {
	t.Helper()
	fs := findings(rep, name)
	if len(fs) != 1 {
		t.Fatalf("report %s has %d %s findings, want 1; findings: %s", rep.RunID, len(fs), name, summary(rep))
	}
	return fs[0]
}

func summary(rep *audit.Report) string {
	var b strings.Builder
	for _, f := range rep.Findings {
		fmt.Fprintf(&b, "[%s %s tenant=%q count=%d examples=%v repair=%+v] ", f.Section, f.Name, f.Tenant, f.Count, f.Examples, f.Repair)
	}
	return b.String()
}

// logBuffer collects log lines from concurrent writers.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// alerts returns the alert names of the ERROR entries logged so far, in order.
func (l *logBuffer) alerts(t *testing.T) []string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", sc.Text())
		}
		if a, ok := m["alert"].(string); ok {
			if m["severity"] != "ERROR" {
				t.Errorf("alert %s logged with severity %v, want ERROR", a, m["severity"])
			}
			out = append(out, a)
		}
	}
	return out
}

// bytes returns a copy of what was logged so far.
func (l *logBuffer) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.buf.Bytes())
}

func (l *logBuffer) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Reset()
}

// breakerDoc reads a tenant's breaker document as stored (GetBreaker would
// advance an expired open state in what it returns).
func (f *fixture) breakerDoc(tenant string) store.Breaker {
	f.t.Helper()
	id, err := store.EntryID(tenant)
	if err != nil {
		f.t.Fatal(err)
	}
	snap, err := f.fs.Collection(store.Breakers).Doc(id).Get(f.ctx)
	if err != nil {
		f.t.Fatalf("breaker %s: %v", tenant, err)
	}
	var b store.Breaker
	if err := snap.DataTo(&b); err != nil {
		f.t.Fatal(err)
	}
	return b
}
