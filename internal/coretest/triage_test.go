package coretest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/functions/classify"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// defaultPolicy is the default triage policy, always.
type defaultPolicy struct{ p *triage.Policy }

func (d defaultPolicy) Current(context.Context) *triage.Policy { return d.p }

// deadEvent is the explicit record of task (message seq of the work
// stream) of agent and tenant, which failed with code.
func deadEvent(tenant, agent, task string, seq uint64, code string) jevent.Event {
	subject := "agents." + agent + ".tasks.work"
	h := map[string][]string{jevent.HeaderTenant: {tenant}, jevent.HeaderTaskID: {task}, jevent.HeaderIdempotencyKey: {task + "-v1"}}
	ev := jevent.Event{Schema: jevent.Schema, ID: jevent.ID(jevent.DefaultWorkStream, seq), Kind: jevent.KindExplicit,
		Stream: jevent.DefaultWorkStream, StreamSeq: seq, Consumer: agent, Tenant: tenant, Agent: agent, ObservedAt: time.Now().UTC()}
	ev.Message.Subject = subject
	ev.Message.Headers = jevent.EncodeHeaders(h)
	ev.Message.SetPayload([]byte(`{"task":"` + task + `"}`))
	ev.Failure = &jevent.Failure{Code: code, Detail: "detail of " + code, Attempt: 1, Agent: agent, RecordedAt: time.Now().UTC()}
	return ev
}

// pushEvent hands ev to h as the Pub/Sub push subscription does.
func pushEvent(ctx context.Context, h *classify.Handler, ev jevent.Event) error {
	body, err := jevent.Encode(ev)
	if err != nil {
		return err
	}
	ce, err := testenv.PubSubEvent("msg-"+ev.ID, body, ev.Attributes())
	if err != nil {
		return err
	}
	return h.Handle(ctx, ce)
}

// notifications receives the notifications topic's messages through a
// subscription of the emulator.
type notifications struct {
	mu  sync.Mutex
	got []map[string]string
}

func (n *notifications) wait(t *testing.T, want int) []map[string]string {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, func() error {
		n.mu.Lock()
		defer n.mu.Unlock()
		if len(n.got) < want {
			return fmt.Errorf("%d notifications received, want %d", len(n.got), want)
		}
		return nil
	})
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.got)
}

// notificationsTopic makes the notifications topic and a subscription on
// the Pub/Sub emulator: the topic to publish to and what it received.
func notificationsTopic(t *testing.T) (notify.Topic, *notifications) {
	t.Helper()
	ctx := testenv.Context(t)
	ps, project := testenv.PubSub(t)
	topic, sub := "projects/"+project+"/topics/"+jevent.DefaultNotificationsTopic, "projects/"+project+"/subscriptions/operators"
	testenv.TopicWithSubscription(t, ctx, ps, topic, sub)
	pub := ps.Publisher(topic)
	got := &notifications{}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ps.Subscriber(sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
			got.mu.Lock()
			got.got = append(got.got, m.Attributes)
			got.mu.Unlock()
			m.Ack()
		})
	}()
	t.Cleanup(func() { cancel(); <-done; pub.Stop() })
	return notify.PubSubTopic(pub), got
}

// An escalated and an awaiting-approval entry reach their subscribers and
// their triage agent as soon as classify commits them, with no reconcile
// run. The triage agent's answers go through the operator package and its
// gates: its approval (with an edited payload and header) publishes the
// replay exactly once, even though the triage task is delivered and
// answered twice; its discard ends the entry; its approval of an entry
// whose tenant breaker is open is held, not published; a forged task
// naming another tenant's entry changes nothing. The awaiting-approval
// entries are governance denials: the policy in force grants the triage
// agent their rule (by default only an approver may decide them).
func TestTriageAgentAnswersThroughTheGates(t *testing.T) {
	g := newGates(t)
	ctx := testenv.Context(t)
	granting := strings.Replace(string(triage.DefaultYAML()),
		"  - name: governance\n    match: {category: [governance]}\n    action: require_approval\n    strategy: none\n    approvers: [approver]\n",
		"  - name: governance\n    match: {category: [governance]}\n    action: require_approval\n    strategy: none\n    approvers: [triage_agent, approver]\n", 1)
	if _, err := g.st.SavePolicyOverride(ctx, []byte(granting)); err != nil {
		t.Fatal(err)
	}
	log, _ := testenv.Logger()
	topic, received := notificationsTopic(t)
	fl := notify.New(g.st, topic, notify.WithTasks(notify.LazyJetStream(func(context.Context) (jetstream.JetStream, error) { return g.js, nil })))
	cl := classify.New(classify.Config{}, classify.Deps{Logger: log, Store: g.st, Policy: defaultPolicy{triage.Default()},
		Scheduler: g.sched, Notify: fl})

	type dead struct {
		tenant, agent, code string
		seq                 uint64
		status              store.Status
	}
	approve := dead{"t-approve", "a-approve", "approval_required", 101, store.AwaitingApproval}
	discard := dead{"t-discard", "a-discard", "impossible_task", 102, store.Escalated}
	held := dead{"t-held", "a-held", "approval_required", 103, store.AwaitingApproval}
	ids := map[string]string{}
	for _, d := range []dead{approve, discard, held} {
		ev := deadEvent(d.tenant, d.agent, "task-"+d.agent, d.seq, d.code)
		if err := pushEvent(ctx, cl, ev); err != nil {
			t.Fatalf("classify %s: %v", ev.ID, err)
		}
		id, _ := store.EntryID(ev.ID)
		if e, err := g.st.GetMeta(ctx, id); err != nil || e.Status != d.status {
			t.Fatalf("entry %s = %+v, %v; want %s", id, e, err, d.status)
		}
		ids[d.agent] = id
	}
	// No reconcile ran: classify published its commits' notifications.
	var kinds []string
	for _, attrs := range received.wait(t, 3) {
		kinds = append(kinds, attrs[jevent.AttrKind]+"/"+attrs[jevent.AttrTenant])
	}
	slices.Sort(kinds)
	if want := []string{"awaiting_approval/t-approve", "awaiting_approval/t-held", "escalated/t-discard"}; !slices.Equal(kinds, want) {
		t.Errorf("notifications received = %v, want %v", kinds, want)
	}

	// The tenant breaker of t-held opens after its entry waits: the
	// approval meets it when the replay runs.
	opener := g.seed(t, "t-held", "opener", "held-opener", store.Escalated, cell{policy: allow, breaker: open})
	if _, err := fl.Flush(ctx); err != nil { // as reconcile would: the opener's own triage task
		t.Fatal(err)
	}

	cons, err := g.js.CreateOrUpdateConsumer(ctx, jevent.DefaultWorkStream, jetstream.ConsumerConfig{Durable: "ceo",
		FilterSubject: jevent.DefaultConventions.TaskSubject(jevent.DefaultTriageAgent, jevent.TriageTaskType),
		AckPolicy:     jetstream.AckExplicitPolicy, MaxDeliver: 5, AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	kit := agentkit.New(g.js, agentkit.WithAgent("ceo"))
	answers := map[string]agentkit.TriageAnswer{
		ids["a-approve"]: agentkit.Approve([]byte(`{"task":"fixed by the ceo"}`), map[string]string{"X-Reviewed-By": "ceo"}),
		ids["a-discard"]: agentkit.Discard("the repository does not exist"),
		ids["a-held"]:    agentkit.Approve(nil, nil),
		opener.ID:        agentkit.Discard("seeded for the test"),
		// The entry whose failure opened the breaker (gates.seed).
		opener.ID + "-filler": agentkit.Discard("opened the breaker for the test"),
	}
	decide := func(_ context.Context, task jevent.TriageTask) (agentkit.TriageAnswer, error) {
		a, ok := answers[task.EntryID]
		if !ok {
			return agentkit.TriageAnswer{}, fmt.Errorf("no answer for %s", task.EntryID)
		}
		return a, nil
	}
	answerer := g.op.TriageAnswerer()
	outcomes := map[string][]agentkit.TriageOutcome{}
	crashed := false
	for len(outcomes) < len(answers) || len(outcomes[ids["a-approve"]]) < 2 {
		msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("next triage task (answered so far %v): %v", outcomes, err)
		}
		task, err := agentkit.TriageOf(msg)
		if err != nil {
			t.Fatalf("TriageOf(%s) = %v", msg.Subject(), err)
		}
		if task.EntryID == ids["a-approve"] && !crashed {
			// The agent answers and dies before its ack: the task comes
			// again.
			crashed = true
			if _, err := kit.Answer(ctx, answerer, task, answers[task.EntryID]); err != nil {
				t.Fatalf("Answer(%s) = %v", task.EntryID, err)
			}
			outcomes[task.EntryID] = append(outcomes[task.EntryID], agentkit.TriageAnswered)
			if err := msg.Nak(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		out, err := kit.HandleTriage(ctx, msg, answerer, decide)
		if out != agentkit.TriageAnswered && out != agentkit.TriageDecided {
			t.Errorf("HandleTriage(%s) = %s, %v; want answered", task.EntryID, out, err)
		}
		outcomes[task.EntryID] = append(outcomes[task.EntryID], out)
	}
	// The second answer to the redelivered task changes nothing: the
	// operator package moves an entry only from a status that waits for a
	// decision, and the first answer moved it on (scheduled, then
	// replayed). Its replay's Nats-Msg-Id <entry>-r<attempt> would drop a
	// second publish of the same attempt anyway.
	if want := []agentkit.TriageOutcome{agentkit.TriageAnswered, agentkit.TriageDecided}; !slices.Equal(outcomes[ids["a-approve"]], want) {
		t.Errorf("outcomes of the approval's two deliveries = %v, want %v", outcomes[ids["a-approve"]], want)
	}

	tests := []struct {
		agent     string
		published uint64
		status    store.Status
	}{
		{"a-approve", 1, store.Replayed},
		{"a-discard", 0, store.Discarded},
		{"a-held", 0, store.Held},
	}
	for _, tt := range tests {
		if n := g.published(t, tt.agent); n != tt.published {
			t.Errorf("%s: replays published = %d, want %d", tt.agent, n, tt.published)
		}
		e, err := g.st.Get(ctx, ids[tt.agent])
		if err != nil {
			t.Fatal(err)
		}
		if e.Status != tt.status {
			t.Errorf("%s: entry status = %s, want %s", tt.agent, e.Status, tt.status)
		}
		by := slices.IndexFunc(e.History, func(tr store.Transition) bool { return tr.By == agentkit.TriageActor("ceo") })
		if by < 0 {
			t.Errorf("%s: history %+v has no transition by %s", tt.agent, e.History, agentkit.TriageActor("ceo"))
		}
	}
	// The approval's edits are in the replay.
	s, err := g.js.Stream(ctx, jevent.DefaultWorkStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, "agents.a-approve.tasks.work")
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != `{"task":"fixed by the ceo"}` || m.Header.Get("X-Reviewed-By") != "ceo" {
		t.Errorf("replay = %s %v, want the edited payload and X-Reviewed-By: ceo", m.Data, m.Header)
	}

	// A forged task naming t-approve's entry under another tenant is
	// refused, and acked: nothing to retry, nothing changed.
	before, _ := g.st.GetMeta(ctx, ids["a-approve"])
	n := jevent.NewNotification(jevent.NotifyAwaitingApproval, "mallory", ids["a-approve"], time.Now())
	n.EntryID, n.Status = ids["a-approve"], string(store.AwaitingApproval)
	forged, err := notify.TriageMsg(n, "work", "manual_review", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.js.PublishMsg(ctx, forged); err != nil {
		t.Fatal(err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	out, err := kit.HandleTriage(ctx, msg, answerer, func(context.Context, jevent.TriageTask) (agentkit.TriageAnswer, error) {
		return agentkit.Approve(nil, nil), nil
	})
	if out != agentkit.TriageRefused || !errors.Is(err, agentkit.ErrTriageNotFound) {
		t.Errorf("HandleTriage(forged) = %s, %v; want refused, ErrTriageNotFound", out, err)
	}
	after, _ := g.st.GetMeta(ctx, ids["a-approve"])
	if len(after.History) != len(before.History) || after.Status != before.Status {
		t.Errorf("entry after the forged task = %s (%d transitions), want %s (%d)", after.Status, len(after.History), before.Status, len(before.History))
	}
	if n := g.published(t, "a-approve"); n != 1 {
		t.Errorf("replays published after the forged task = %d, want 1", n)
	}
}
