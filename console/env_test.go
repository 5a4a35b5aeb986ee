package console_test

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/functions/replay"
	"github.com/jsdlq/jsdlq/internal/testenv"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/triage"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// env is the pipeline behind a console: Firestore, the Cloud Tasks
// emulator dispatching to the real replay function, which publishes to an
// embedded JetStream work stream.
type env struct {
	fs    *firestore.Client
	st    *store.Store
	js    jetstream.JetStream
	ct    *testenv.CloudTasks
	queue string
	sched *tasks.Scheduler
	op    *operator.Operator
	srv   *httptest.Server
}

func newEnv(t testing.TB, auth console.Authenticator, opts ...console.Option) *env {
	t.Helper()
	ctx := testenv.Context(t)
	fs, project := testenv.Firestore(t)
	log, _ := testenv.Logger()
	e := &env{fs: fs, st: store.New(fs)}
	n := testenv.NewNATS(t)
	_, e.js = n.Connect(t)
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: jevent.DefaultWorkStream, Subjects: []string{"agents.>"}, Duplicates: time.Hour}); err != nil {
		t.Fatalf("create work stream: %v", err)
	}
	target := httptest.NewServer(replay.New(replay.Config{}, replay.Deps{Logger: log, Store: e.st, Policy: triage.NewLoader(store.New(fs), log), Publisher: e.js}))
	t.Cleanup(target.Close)
	e.ct = testenv.NewCloudTasks(t)
	e.queue = e.ct.Queue(t, project, "dlq-replay")
	e.sched = tasks.New(tasks.Config{Queue: e.queue, ReplayURL: target.URL, ServiceAccount: "tasks@test.iam.gserviceaccount.com", EmulatorHost: e.ct.Host})
	t.Cleanup(func() { e.sched.Close() })
	e.op = operator.New(e.st, e.sched, operator.WithRunner(e.ct.Client))
	c := console.New(e.st, e.op, auth, append([]console.Option{console.WithLogger(log), console.WithTaskState(e.sched)}, opts...)...)
	e.srv = httptest.NewServer(c.Handler())
	t.Cleanup(e.srv.Close)
	return e
}

// seed records an entry of tenant in status st; edit, if any, changes the
// entry before it is recorded.
func (e *env) seed(t *testing.T, tenant, id string, st store.Status, payload string, edit ...func(*store.Entry)) *store.Entry {
	t.Helper()
	key := "key-" + id
	h := map[string][]string{jevent.HeaderTenant: {tenant}, jevent.HeaderTaskID: {id}, jevent.HeaderIdempotencyKey: {key}}
	en := &store.Entry{ID: id, EventID: id, Stream: jevent.DefaultWorkStream, StreamSeq: 1,
		Subject: "agents.writer.tasks.blog_post", Tenant: tenant, Agent: "writer", TaskID: "task-" + id, TaskType: "blog_post", IdempotencyKey: key,
		Headers: jevent.EncodeHeaders(h), Payload: []byte(payload), Kind: string(jevent.KindExplicit),
		Failure: &jevent.Failure{Code: "timeout", Attempt: 3, Agent: "writer"}, Status: st, Strategy: "transient",
		Category: "transient", ReasonCode: "timeout", Action: "auto_replay", PolicyVersion: "test"}
	if st == store.Scheduled {
		en.TaskName, en.NextRetryAt = tasks.Name(id, 1), time.Now().Add(time.Hour)
	}
	for _, f := range edit {
		f(en)
	}
	if _, err := e.st.Record(testenv.Context(t), en, "classify"); err != nil {
		t.Fatalf("Record(%s) = %v", id, err)
	}
	return en
}

// published is the number of messages on the work stream.
func (e *env) published(t *testing.T) uint64 {
	t.Helper()
	s, err := e.js.Stream(testenv.Context(t), jevent.DefaultWorkStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(testenv.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// waitPublished waits until the work stream holds want messages.
func (e *env) waitPublished(t *testing.T, want uint64) {
	t.Helper()
	testenv.WaitFor(t, 20*time.Second, func() error {
		if got := e.published(t); got < want {
			return fmt.Errorf("work stream holds %d messages, want %d", got, want)
		}
		return nil
	})
}

// snapshot is what the test compares before and after refused requests:
// every entry's status, update time, history length and task; the tasks in
// the queue; the messages on the work stream.
type snapshot struct {
	Entries map[string]string
	Tasks   int
	Stream  uint64
}

func (e *env) snapshot(t *testing.T) snapshot {
	t.Helper()
	s := snapshot{Entries: map[string]string{}}
	p, err := e.st.Entries(testenv.Context(t), store.Query{Limit: 1000, View: store.ScanView})
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range p.Entries {
		s.Entries[en.ID] = string(en.Status) + "|" + en.UpdatedAt.String() + "|" + en.TaskName + "|" + fmt.Sprint(len(en.History))
	}
	s.Tasks = len(e.ct.Tasks(t, e.queue))
	s.Stream = e.published(t)
	return s
}

// do sends a request (with key as the bearer key, if any) and answers
// the status and body; an answer of the tenant API is validated against
// its OpenAPI document (checkAPI).
func do(t *testing.T, method, url, key, body string) (int, string) {
	t.Helper()
	code, b, _ := exchange(t, method, url, key, body)
	return code, b
}

// apiKeys creates the keys the tenant API tests use: one of acme's, one of
// globex's and one of acme's that is revoked at once.
func (e *env) apiKeys(t *testing.T) (acme, globex, revoked string) {
	t.Helper()
	ctx := testenv.Context(t)
	acme, _, err := e.st.CreateTenantKey(ctx, "acme", "test")
	if err != nil {
		t.Fatal(err)
	}
	globex, _, err = e.st.CreateTenantKey(ctx, "globex", "test")
	if err != nil {
		t.Fatal(err)
	}
	revoked, revokedID, err := e.st.CreateTenantKey(ctx, "acme", "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.RevokeTenantKey(ctx, "acme", revokedID, "test"); err != nil {
		t.Fatal(err)
	}
	return acme, globex, revoked
}
