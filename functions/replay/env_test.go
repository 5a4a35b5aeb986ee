package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/firestore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jsdlq/jsdlq/functions/replay"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/auth"
	"github.com/jsdlq/jsdlq/shared/config"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/triage"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	tasksSA    = "tasks@test-project.iam.gserviceaccount.com"
	workStream = "TASKS"
	tenant     = "acme"
)

// delivery is one HTTP request Cloud Tasks made to the replay function.
type delivery struct {
	task   string
	status int // what the function answered
	sent   int // what the test let Cloud Tasks see
	result replay.Result
}

// env is the replay function on a real stack: the Firestore emulator, an
// embedded JetStream server, the Cloud Tasks emulator dispatching with OIDC
// tokens to an httptest server that verifies them (AUTH_MODE=emulator).
type env struct {
	ctx    context.Context
	fs     *firestore.Client
	store  *store.Store
	js     jetstream.JetStream
	nats   *testenv.NATS
	ct     *testenv.CloudTasks
	queue  string
	sched  *tasks.Scheduler
	op     *operator.Operator
	url    string
	policy *triage.Loader
	logs   *testenv.LogBuffer

	mu         sync.Mutex
	deliveries []delivery
	// override, when set, replaces the status the test lets Cloud Tasks see.
	override func(d delivery) int
}

// setup starts replay behind a Cloud Tasks emulator. Each wrap, if any,
// stands between replay and JetStream: tests inject faults there.
func setup(t testing.TB, wrap ...func(replay.Publisher) replay.Publisher) *env {
	t.Helper()
	return setupWith(t, replay.Config{}, wrap...)
}

func setupWith(t testing.TB, cfg replay.Config, wrap ...func(replay.Publisher) replay.Publisher) *env {
	t.Helper()
	e := &env{ctx: testenv.Context(t)}
	var project string
	e.fs, project = testenv.Firestore(t)
	e.store = store.New(e.fs)
	e.nats = testenv.NewNATS(t)
	_, e.js = e.nats.Connect(t, nats.ReconnectWait(100*time.Millisecond), nats.MaxReconnects(-1))
	// The duplicate window must cover Cloud Tasks' retries of one task:
	// that is what makes a publish repeated after a crash a no-op.
	if _, err := e.js.CreateStream(e.ctx, jetstream.StreamConfig{
		Name: workStream, Subjects: []string{"agents.>"}, Duplicates: time.Hour,
	}); err != nil {
		t.Fatalf("CreateStream() = %v", err)
	}
	e.ct = testenv.NewCloudTasks(t)
	e.queue = e.ct.Queue(t, project, "dlq-replay")
	e.policy = triage.NewLoader(store.New(e.fs), obs.Discard(), triage.WithRefresh(0))

	var h http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		d := delivery{task: r.Header.Get(tasks.HeaderTaskName), status: rec.Code, sent: rec.Code}
		_ = json.Unmarshal(rec.Body.Bytes(), &d.result)
		e.mu.Lock()
		if e.override != nil {
			d.sent = e.override(d)
		}
		e.deliveries = append(e.deliveries, d)
		e.mu.Unlock()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(d.sent)
		_, _ = io.Copy(w, rec.Body)
	}))
	t.Cleanup(srv.Close)
	e.url = srv.URL + "/Replay"
	a, err := auth.New(config.Auth{Mode: config.AuthEmulator, Audience: e.url, AllowedEmails: []string{tasksSA}}, e.ct.Host)
	if err != nil {
		t.Fatalf("auth.New() = %v", err)
	}
	var log *slog.Logger
	log, e.logs = testenv.Logger()
	var pub replay.Publisher = e.js
	for _, w := range wrap {
		pub = w(pub)
	}
	h = a.Middleware(replay.New(cfg, replay.Deps{
		Logger: log, Store: e.store, Policy: e.policy, Publisher: pub,
	}))
	e.sched = tasks.New(tasks.Config{Queue: e.queue, ReplayURL: e.url, ServiceAccount: tasksSA, EmulatorHost: e.ct.Host})
	t.Cleanup(func() { e.sched.Close() })
	e.op = operator.New(e.store, e.sched, operator.WithRunner(e.ct.Client))
	return e
}

// spec describes a dead task for newEntry.
type spec struct {
	id       string
	tenant   string
	agent    string
	taskType string
	code     string
	detail   string
	payload  []byte
	missing  bool
	headers  map[string][]string
	keyless  bool   // no idempotency key: nothing can show the task completed
	stream   string // the stream the entry says it came from (workStream)
	// published is when the dead message was published (zero: unknown).
	published time.Time
}

// newEntry stores a classified entry as classify would (the default policy
// decides; status scheduled with its first task name) and returns it. It
// does not create the task.
func (e *env) newEntry(t testing.TB, s spec) *store.Entry {
	t.Helper()
	if s.tenant == "" {
		s.tenant = tenant
	}
	if s.agent == "" {
		s.agent = "backend"
	}
	if s.taskType == "" {
		s.taskType = "implementation"
	}
	if s.code == "" {
		s.code = "llm_provider_timeout"
	}
	if s.payload == nil && !s.missing {
		s.payload = []byte(`{"task":"` + s.id + `"}`)
	}
	headers := map[string][]string{
		"X-Task-ID":         {"task-" + s.id},
		"X-Idempotency-Key": {"task-" + s.id + "-v1"},
		"X-Tenant-ID":       {s.tenant},
		"X-Agent":           {s.agent},
		"X-Task-Type":       {s.taskType},
		"Nats-Msg-Id":       {"original-" + s.id},
	}
	for k, v := range s.headers {
		headers[k] = v
	}
	key := "task-" + s.id + "-v1"
	if s.keyless {
		key = ""
		delete(headers, "X-Idempotency-Key")
	}
	if s.stream == "" {
		s.stream = workStream
	}
	en := &store.Entry{
		ID: s.id, EventID: s.id, Stream: s.stream, Consumer: "workers", StreamSeq: 7,
		Subject: "agents." + s.agent + ".tasks." + s.taskType, Tenant: s.tenant, Agent: s.agent,
		TaskID: "task-" + s.id, TaskType: s.taskType, IdempotencyKey: key,
		Headers: jevent.EncodeHeaders(headers), Payload: s.payload, PayloadMissing: s.missing,
		Kind: "explicit", Failure: &jevent.Failure{Code: s.code, Detail: s.detail, Agent: s.agent}, PublishedAt: s.published,
	}
	in, err := en.PolicyInput()
	if err != nil {
		t.Fatal(err)
	}
	pol := triage.Default()
	if s.keyless {
		// A scheduled keyless entry: classified under a policy that let
		// keyless tasks replay (keylessOK), or before the keyless rule.
		pol = keylessOK(t)
	}
	d := pol.Evaluate(in, triage.Chain{})
	if d.Action != triage.AutoReplay {
		t.Fatalf("default policy: %s -> %s, want auto_replay", s.code, d.Action)
	}
	en.Category, en.ReasonCode, en.Rule, en.Action = string(d.Category), d.ReasonCode, d.Rule, string(d.Action)
	en.Strategy, en.PolicyVersion = d.Strategy, d.PolicyVersion
	en.Plan = store.Plan{Modifications: d.Modifications}
	en.Status, en.TaskName = store.Scheduled, tasks.Name(s.id, 1)
	res, err := e.store.Record(e.ctx, en, "test")
	if err != nil {
		t.Fatalf("Record(%s) = %v", s.id, err)
	}
	return res.Entry
}

// schedule creates the entry's first task, due now.
func (e *env) schedule(t testing.TB, id string) string {
	t.Helper()
	name, _, err := e.sched.Schedule(e.ctx, tasks.Request{EntryID: id, Attempt: 1, At: time.Now()})
	if err != nil {
		t.Fatalf("Schedule(%s) = %v", id, err)
	}
	return name
}

// wait polls until cond holds, for at most 30 s.
func wait(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitStatus waits until the entry has status want and returns it.
func (e *env) waitStatus(t *testing.T, id string, want store.Status) *store.Entry {
	t.Helper()
	var got *store.Entry
	wait(t, fmt.Sprintf("entry %s %s", id, want), func() (bool, error) {
		var err error
		got, err = e.store.GetMeta(e.ctx, id)
		return err == nil && got.Status == want, nil
	})
	return got
}

// waitTaskGone waits until Cloud Tasks has finished with a task (a 2xx
// answer deletes it): no further delivery of it can come.
func (e *env) waitTaskGone(t *testing.T, name string) {
	t.Helper()
	wait(t, "task "+name+" done", func() (bool, error) {
		_, err := e.ct.Client.GetTask(e.ctx, &cloudtaskspb.GetTaskRequest{Name: name})
		if status.Code(err) == codes.NotFound {
			return true, nil
		}
		return false, nil
	})
}

// settled waits until task is done and has left entry id in status want,
// and returns the entry.
func (e *env) settled(t *testing.T, task, id string, want store.Status) *store.Entry {
	t.Helper()
	e.waitTaskGone(t, task)
	return e.waitStatus(t, id, want)
}

// wantMsgs checks how many messages the work stream holds: the replays
// published (the tests start from an empty stream).
func (e *env) wantMsgs(t *testing.T, want int) {
	t.Helper()
	if n := len(e.msgs(t)); n != want {
		t.Errorf("messages = %d, want %d", n, want)
	}
}

func (e *env) deliveriesOf(task string) []delivery {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []delivery
	for _, d := range e.deliveries {
		if d.task == shortName(task) {
			out = append(out, d)
		}
	}
	return out
}

func shortName(n string) string {
	for i := len(n) - 1; i >= 0; i-- {
		if n[i] == '/' {
			return n[i+1:]
		}
	}
	return n
}

// msgs returns every message in the work stream.
func (e *env) msgs(t testing.TB) []*jetstream.RawStreamMsg {
	t.Helper()
	s, err := e.js.Stream(e.ctx, workStream)
	if err != nil {
		t.Fatalf("Stream() = %v", err)
	}
	info, err := s.Info(e.ctx)
	if err != nil {
		t.Fatalf("Info() = %v", err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(e.ctx, seq)
		if err != nil {
			t.Fatalf("GetMsg(%d) = %v", seq, err)
		}
		out = append(out, m)
	}
	return out
}

func (e *env) breaker(t *testing.T, b store.Breaker) {
	t.Helper()
	id, _ := store.EntryID(b.Tenant)
	if _, err := e.fs.Collection(store.Breakers).Doc(id).Set(e.ctx, b); err != nil {
		t.Fatalf("set breaker: %v", err)
	}
}

// keylessYAML is the default policy letting keyless tasks replay on their
// own (defaults.require_idempotency_key: false).
func keylessYAML() []byte {
	return []byte(strings.Replace(string(triage.DefaultYAML()), "defaults:\n", "defaults:\n  require_idempotency_key: false\n", 1))
}

func keylessOK(t testing.TB) *triage.Policy {
	t.Helper()
	p, err := triage.Parse(keylessYAML())
	if err != nil {
		t.Fatalf("Parse(keyless allowed) = %v", err)
	}
	return p
}

// overrideTransient saves, as the policy override, the default policy with
// its transient rule's body (what follows its match) replaced by rule.
func (e *env) overrideTransient(t *testing.T, rule string) {
	t.Helper()
	const def = "  - name: transient\n    match: {category: [transient]}\n"
	doc := strings.Replace(string(triage.DefaultYAML()), def+"    action: auto_replay\n    strategy: transient", def+rule, 1)
	if doc == string(triage.DefaultYAML()) {
		t.Fatal("the default policy has no transient rule to override")
	}
	if _, err := store.New(e.fs).SavePolicyOverride(e.ctx, []byte(doc)); err != nil {
		t.Fatalf("SaveOverride() = %v", err)
	}
}
