package kitcompat

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/auth"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// The triage agent's identity and the audience of its tokens.
const (
	triageAgentSA  = "ceo@kitcompat.iam.gserviceaccount.com"
	triageAudience = "https://jsdlq-api.kitcompat.test"
)

// triageEntry is an entry waiting for the triage agent and what the agent
// decides on its task (tools/compat.ts reads the same JSON).
type triageEntry struct {
	ID       string                 `json:"-"`
	Status   store.Status           `json:"-"`
	Category string                 `json:"-"`
	Payload  string                 `json:"-"`
	Answer   agentkit.TriageRequest `json:"answer"` // Task unset
	// Moved: the entry moved on before its task is answered (a person was
	// first).
	Moved bool `json:"-"`
}

// triageEntries cover every settled outcome of an answer: applied
// (replay with an edit, discard), refused by the authority rule (governance
// is kept for approvers), refused for good (no payload to replay), and
// decided already.
var triageEntries = []triageEntry{
	{ID: "TASKS.1", Status: store.Escalated, Category: "transient", Payload: `{"a":1}`,
		Answer: agentkit.TriageRequest{Answer: event.AnswerReplay, Payload: []byte(`{"a":10}`), SetHeaders: map[string]string{"X-Fix": "1"}}},
	{ID: "TASKS.2", Status: store.AwaitingApproval, Category: "governance", Payload: `{"a":2}`,
		Answer: agentkit.TriageRequest{Answer: event.AnswerApprove}},
	{ID: "TASKS.3", Status: store.Escalated, Category: "transient",
		Answer: agentkit.TriageRequest{Answer: event.AnswerReplay}},
	{ID: "TASKS.4", Status: store.Escalated, Category: "permanent", Payload: `{"a":4}`,
		Answer: agentkit.TriageRequest{Answer: event.AnswerDiscard, Reason: "impossible task, nothing to fix"}},
	{ID: "TASKS.5", Status: store.Escalated, Category: "transient", Payload: `{"a":5}`, Moved: true,
		Answer: agentkit.TriageRequest{Answer: event.AnswerReplay}},
}

// triageOutcome is what one kit did with a triage task and what the entry
// became.
type triageOutcome struct {
	Outcome string
	Status  string
	By      string
	Role    string
	To      string
}

// Both kits answer the same triage tasks through the console's triage
// endpoint (the Go kit's TriageClient, the TypeScript kit's) with the same
// outcomes and leave the entries alike: the answers meet the operator
// package's gates and authority rule behind the endpoint, recorded as the
// identity the token proves; a malformed task is terminated by both.
func TestKitsAnswerTriageAlike(t *testing.T) {
	dir := prepare(t)
	n := testenv.NewNATS(t)
	_, js := n.Connect(t)
	ct := testenv.NewCloudTasks(t)
	got := map[string]map[string]triageOutcome{}
	for _, kit := range []string{"go", "ts"} {
		t.Run(kit, func(t *testing.T) {
			ctx := testenv.Context(t)
			fs, project := testenv.Firestore(t)
			st := store.New(fs)
			queue := ct.Queue(t, project, "dlq-replay")
			sched := tasks.New(tasks.Config{Queue: queue, ReplayURL: testenv.NewTaskTarget(t).URL, ServiceAccount: "tasks@kitcompat.iam.gserviceaccount.com",
				EmulatorHost: ct.Host})
			t.Cleanup(func() { sched.Close() })
			op := operator.New(st, sched)
			a, err := auth.New(config.Auth{Mode: config.AuthEmulator, Audience: triageAudience, AllowedEmails: []string{triageAgentSA}}, ct.Host)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(console.New(st, op, nil, console.WithTriage(a, op.TriageAnswerer())).Handler())
			t.Cleanup(srv.Close)
			token := strings.TrimPrefix(testenv.MintToken(t, ct.Client, queue, triageAgentSA, triageAudience), "Bearer ")
			triageStreams(t, js)
			for _, en := range triageEntries {
				publishTriage(t, js, seedTriage(t, st, op, en))
			}
			malformed := nats.NewMsg("agents.ceo.tasks.dlq_triage")
			malformed.Data = []byte("not a triage task")
			malformed.Header.Set(event.HeaderTriageEntry, "TASKS.9")
			if _, err := js.PublishMsg(ctx, malformed); err != nil {
				t.Fatal(err)
			}
			var outcomes map[string]string
			if kit == "go" {
				outcomes = answerGo(t, js, srv.URL, token)
			} else {
				outcomes = answerTS(t, dir, n.URL, srv.URL, token)
			}
			got[kit] = map[string]triageOutcome{}
			for _, en := range append(triageEntries, triageEntry{ID: "TASKS.9"}) {
				o := triageOutcome{Outcome: outcomes[en.ID]}
				if e, err := st.GetMeta(ctx, en.ID); err == nil {
					last := e.History[len(e.History)-1]
					o.Status, o.By, o.Role, o.To = string(e.Status), last.By, string(last.Role), last.To
				}
				got[kit][en.ID] = o
			}
		})
	}
	want := map[string]string{"TASKS.1": "answered", "TASKS.2": "refused", "TASKS.3": "refused", "TASKS.4": "answered",
		"TASKS.5": "already_decided", "TASKS.9": "malformed"}
	for id, o := range got["go"] {
		if o.Outcome != want[id] {
			t.Errorf("Go kit: %s %s, want %s", id, o.Outcome, want[id])
		}
	}
	if o := got["go"]["TASKS.1"]; o.By != agentkit.TriageActor(triageAgentSA) || o.Role != string(authority.TriageAgent) || o.Status != string(store.Scheduled) {
		t.Errorf("Go kit: TASKS.1 after the replay answer = %+v, want scheduled by %s as triage_agent", o, agentkit.TriageActor(triageAgentSA))
	}
	if d := cmp.Diff(got["go"], got["ts"]); d != "" {
		t.Errorf("the TypeScript kit's answers differ from the Go kit's (-go +ts):\n%s", d)
	}
}

// triageStreams gives a kit a fresh TASKS stream with the triage agent's
// consumer (a long backoff: a NAKed task does not come back during the
// run) and fresh DLQ streams.
func triageStreams(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := testenv.Context(t)
	for _, s := range []string{event.DefaultWorkStream, event.DefaultRecordStream, event.DefaultAdvisoryStream} {
		_ = js.DeleteStream(ctx, s)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: event.DefaultWorkStream, Subjects: []string{"agents.>"}}); err != nil {
		t.Fatal(err)
	}
	names := bridge.Names{AdvisoryStream: event.DefaultAdvisoryStream, RecordStream: event.DefaultRecordStream, FailureBucket: event.DefaultFailureBucket}
	if err := bridge.Ensure(ctx, js, names, obs.Discard()); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, event.DefaultWorkStream, jetstream.ConsumerConfig{Durable: "ceo",
		FilterSubject: "agents.ceo.tasks.>", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 5, BackOff: consumerBackOff}); err != nil {
		t.Fatal(err)
	}
}

// seedTriage records en and returns the triage task notify would send for
// it (for an entry that moved on, the task of the decision it left).
func seedTriage(t *testing.T, st *store.Store, op *operator.Operator, en triageEntry) *nats.Msg {
	t.Helper()
	ctx := testenv.Context(t)
	key := "key-" + en.ID
	h := map[string][]string{event.HeaderTenant: {"acme"}, event.HeaderTaskID: {en.ID}, event.HeaderIdempotencyKey: {key}}
	e := &store.Entry{ID: en.ID, EventID: en.ID, Stream: event.DefaultWorkStream, StreamSeq: 1, Subject: "agents.writer.tasks.blog_post",
		Tenant: "acme", Agent: "writer", TaskID: en.ID, TaskType: "blog_post", IdempotencyKey: key, Headers: event.EncodeHeaders(h),
		Kind: string(event.KindExplicit), Failure: &event.Failure{Code: "timeout", Agent: "writer"}, Status: en.Status,
		Category: en.Category, ReasonCode: "timeout", Action: "escalate", PolicyVersion: "test"}
	if en.Payload == "" {
		e.PayloadMissing = true
	} else {
		e.Payload = []byte(en.Payload)
	}
	if _, err := st.Record(ctx, e, "classify"); err != nil {
		t.Fatal(err)
	}
	stored, err := st.GetMeta(ctx, en.ID)
	if err != nil {
		t.Fatal(err)
	}
	kind := event.NotifyEscalated
	if en.Status == store.AwaitingApproval {
		kind = event.NotifyAwaitingApproval
	}
	nt := event.NewNotification(kind, "acme", en.ID, stored.History[len(stored.History)-1].At)
	nt.EntryID, nt.Status, nt.Category, nt.ReasonCode, nt.EscalateTo, nt.Summary = en.ID, string(en.Status), en.Category, "timeout", "ceo", "entry "+en.ID
	m, err := notify.TriageMsg(nt, "blog_post", "escalate", "")
	if err != nil {
		t.Fatal(err)
	}
	if en.Moved {
		if _, err := op.DiscardIn(ctx, "acme", en.ID, "a person was first", authority.Actor{Name: "ops@example.com", Role: authority.Approver},
			operator.Asked{}); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func publishTriage(t *testing.T, js jetstream.JetStream, m *nats.Msg) {
	t.Helper()
	if _, err := js.PublishMsg(testenv.Context(t), m); err != nil {
		t.Fatal(err)
	}
}

// decisions are the answers by entry id, both kits' decide.
func decisions() map[string]agentkit.TriageRequest {
	out := map[string]agentkit.TriageRequest{}
	for _, en := range triageEntries {
		out[en.ID] = en.Answer
	}
	return out
}

func answerGo(t *testing.T, js jetstream.JetStream, url, token string) map[string]string {
	t.Helper()
	ctx := testenv.Context(t)
	kit := agentkit.New(js, agentkit.WithAgent("ceo"))
	client := agentkit.NewTriageClient(url, func(context.Context) (string, error) { return token, nil })
	cons, err := js.Consumer(ctx, event.DefaultWorkStream, "ceo")
	if err != nil {
		t.Fatal(err)
	}
	d := decisions()
	out := map[string]string{}
	for range len(triageEntries) + 1 {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("no triage task: %v", err)
		}
		got, _ := kit.HandleTriage(ctx, m, client, func(_ context.Context, task event.TriageTask) (agentkit.TriageAnswer, error) {
			return d[task.EntryID].TriageAnswer(), nil
		})
		out[event.Header(m.Headers(), event.HeaderTriageEntry)] = string(got)
	}
	return out
}

func answerTS(t *testing.T, dir, natsURL, url, token string) map[string]string {
	t.Helper()
	var res struct {
		Outcomes map[string]string `json:"outcomes"`
	}
	runCompat(t, dir, map[string]any{"mode": "triage", "nats_url": natsURL, "console_url": url, "token": token,
		"tasks": len(triageEntries) + 1, "decisions": decisions(), "now": clock.Format(time.RFC3339Nano)}, &res)
	return res.Outcomes
}
