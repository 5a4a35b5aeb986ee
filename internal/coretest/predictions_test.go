package coretest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"cloud.google.com/go/pubsub/v2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/predict"
	"github.com/jsdlq/jsdlq/shared/predict/learner"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// coder is an agent whose context window holds 64 KiB of task: a bigger
// task overflows (Terminate with context_window_overflow) unless it arrives
// compressed (Jsdlq-Max-Context-Tokens, the strategy's budget); every other
// task succeeds. It reports each task it ran with its delivery count.
type coder struct {
	kit  *agentkit.Kit
	cons jetstream.Consumer
}

type ran struct {
	task       string
	deliveries uint64
	compressed bool
	predicted  string
	ok         bool
}

func (a coder) next(t *testing.T, ctx context.Context) ran {
	t.Helper()
	msg, err := a.cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatalf("coder: next task: %v", err)
	}
	md, err := msg.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	r := ran{task: jevent.Header(msg.Headers(), jevent.HeaderTaskID), deliveries: md.NumDelivered,
		compressed: agentkit.ReplayOf(msg).MaxContextTokens > 0, predicted: jevent.Header(msg.Headers(), jevent.HeaderPredictedReason)}
	if len(msg.Data()) > 64<<10 && !r.compressed {
		if err := a.kit.Terminate(ctx, msg, agentkit.Failure{Code: agentkit.CodeContextWindowOverflow,
			Detail: fmt.Sprintf("%d bytes of task do not fit the context window", len(msg.Data()))}); err != nil {
			t.Fatalf("coder: Terminate(%s) = %v", r.task, err)
		}
		return r
	}
	ran, err := a.kit.Once(ctx, agentkit.TaskOf(msg), func(context.Context) error { return nil })
	if err != nil || !ran {
		t.Fatalf("coder: Once(%s) = %v, %v", r.task, ran, err)
	}
	if err := msg.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	r.ok = true
	return r
}

// The predictions end to end, on the emulators and a real JetStream:
// producers publish through agentkit's Publish, the coder agent overflows on
// every big refactor, the deaths reach the failure log through the bridge
// and classify, the learner learns that big refactors overflow, and then a
// big refactor reaches the coder already compressed (the policy's
// context_window_overflow strategy) and succeeds on its first delivery,
// while a small one carries nothing. With a policy that sends predicted
// overflows to the DLQ instead, a big refactor becomes an entry with
// reason predicted_failure holding the whole task: nothing is lost.
func TestPredictionsCompressBeforeTheFirstAttempt(t *testing.T) {
	c := newCore(t)
	// Longer than testenv.Context's two minutes: a loaded machine needs
	// them for the history alone.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	phase := func(name string) { t.Logf("%s after %s", name, time.Since(start).Round(time.Millisecond)) }
	ps, project := testenv.PubSub(t)
	topic, sub := "projects/"+project+"/topics/dlq-events", "projects/"+project+"/subscriptions/dlq-events-classify"
	testenv.TopicWithSubscription(t, ctx, ps, topic, sub)
	startBridge(t, c.nats, ps, topic)
	classifyInTurn(t, c, ps, sub)
	fs, err := firestore.NewClient(ctx, c.project)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	cons, err := c.js.CreateOrUpdateConsumer(ctx, jevent.DefaultWorkStream, jetstream.ConsumerConfig{Durable: "coder",
		FilterSubject: "agents.coder.tasks.>", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 3, AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	agent := coder{kit: agentkit.New(c.js, agentkit.WithAgent("coder"), agentkit.WithFirestore(fs)), cons: cons}
	big, small := bytes.Repeat([]byte("b"), 100<<10), []byte(`{"rename":"x"}`)
	publish := func(kit *agentkit.Kit, task string, payload []byte) agentkit.Published {
		t.Helper()
		p, err := kit.Publish(ctx, "agents.coder.tasks.refactor", payload,
			map[string][]string{jevent.HeaderTaskID: {task}, jevent.HeaderTenant: {"acme"}})
		if err != nil {
			t.Fatalf("Publish(%s) = %v", task, err)
		}
		return p
	}

	// History: 25 big refactors die, 25 small ones succeed.
	producer := agentkit.New(c.js, agentkit.WithFirestore(fs), agentkit.WithPredictions(time.Hour))
	if err := producer.RefreshPredictions(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		publish(producer, fmt.Sprintf("big-%d", i), big)
		publish(producer, fmt.Sprintf("small-%d", i), small)
	}
	for range 50 {
		agent.next(t, ctx)
	}
	if err := producer.Close(ctx); err != nil {
		t.Fatal(err)
	}
	phase("history run")
	// The bridge and classify take their time on a loaded machine, and a
	// terminated message's advisory may be classified before its record
	// (which carries the headers) merges into the entry: wait for the merge.
	testenv.WaitFor(t, 5*time.Minute, func() error {
		page, err := c.st.Entries(ctx, store.Query{Limit: 100})
		if err != nil {
			return err
		}
		if len(page.Entries) != 25 {
			return fmt.Errorf("%d entries, want 25", len(page.Entries))
		}
		for _, en := range page.Entries {
			if en.ReasonCode != agentkit.CodeContextWindowOverflow || !strings.HasPrefix(en.TaskID, "big-") {
				return fmt.Errorf("entry %s = task %q reason %s, want a big task dead of overflow", en.ID, en.TaskID, en.ReasonCode)
			}
		}
		return nil
	})
	phase("history classified")
	// Learn, two hours on: the hour of the counts has closed.
	later := func() time.Time { return time.Now().Add(2 * time.Hour) }
	res, err := learner.Learn(ctx, c.st, triage.Default(), learner.Config{Now: later}, true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Tasks != 50 || res.Deaths != 25 || res.Predictions == 0 {
		t.Fatalf("Learn = %+v, want 50 tasks and 25 deaths folded into predictions", res)
	}

	phase("learnt")
	// With predictions: a big refactor arrives compressed and succeeds at
	// once; a small one is untouched.
	producer = agentkit.New(c.js, agentkit.WithFirestore(fs), agentkit.WithPredictions(time.Hour))
	defer producer.Close(context.Background())
	if err := producer.RefreshPredictions(ctx); err != nil {
		t.Fatal(err)
	}
	p := publish(producer, "big-new", big)
	if !p.Predicted || p.Prediction.Action != predict.ActionStrategy || p.Prediction.Reason != agentkit.CodeContextWindowOverflow {
		t.Fatalf("Publish(big-new) = %+v, want the overflow strategy applied", p)
	}
	got := agent.next(t, ctx)
	want := ran{task: "big-new", deliveries: 1, compressed: true, predicted: agentkit.CodeContextWindowOverflow, ok: true}
	if got != want {
		t.Errorf("coder ran %+v, want %+v (compressed, first delivery, success)", got, want)
	}
	publish(producer, "small-new", small)
	if got, want := agent.next(t, ctx), (ran{task: "small-new", deliveries: 1, ok: true}); got != want {
		t.Errorf("coder ran %+v, want %+v (nothing applied)", got, want)
	}

	// A policy that sends predicted overflows to the DLQ: the task is
	// recorded, classified predicted_failure and held, whole.
	yaml := strings.Replace(string(triage.DefaultYAML()), "context_window_overflow: context_window_overflow\n    token_budget_exceeded",
		"context_window_overflow: dlq\n    token_budget_exceeded", 1)
	dlqPolicy, err := triage.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := dlqPolicy.Predicted("coder", "refactor", agentkit.CodeContextWindowOverflow); !ok || a.Action != predict.ActionDLQ {
		t.Fatalf("test policy Predicted(overflow) = %+v, %v, want dlq", a, ok)
	}
	if _, err := learner.Learn(ctx, c.st, dlqPolicy, learner.Config{Now: later}, true); err != nil {
		t.Fatal(err)
	}
	if err := producer.RefreshPredictions(ctx); err != nil {
		t.Fatal(err)
	}
	p = publish(producer, "big-routed", big)
	if !p.Routed || p.Ack.Stream != jevent.DefaultRecordStream {
		t.Fatalf("Publish(big-routed) = %+v, want routed to the DLQ", p)
	}
	var routed *store.Entry
	testenv.WaitFor(t, 3*time.Minute, func() error {
		page, err := c.st.Entries(ctx, store.Query{TaskID: "big-routed", Limit: 1})
		if err != nil || len(page.Entries) == 0 {
			return fmt.Errorf("no entry for big-routed (%v)", err)
		}
		routed = page.Entries[0]
		return nil
	})
	full, err := c.st.Get(ctx, routed.ID)
	if err != nil {
		t.Fatal(err)
	}
	if full.ReasonCode != predict.ReasonPredictedFailure || full.Status != store.AwaitingApproval || full.Tenant != "acme" ||
		full.Agent != "coder" || !bytes.Equal(full.Payload, big) || full.Failure == nil ||
		!strings.Contains(full.Failure.Detail, "predicted context_window_overflow") {
		t.Errorf("routed entry = reason %s status %s tenant %s agent %s payload %d bytes failure %+v, want predicted_failure held with the whole task",
			full.ReasonCode, full.Status, full.Tenant, full.Agent, len(full.Payload), full.Failure)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 0 || info.NumAckPending != 0 {
		t.Errorf("coder's consumer has %d pending, %d unacked, want none (the routed task never ran)", info.NumPending, info.NumAckPending)
	}
}

// classifyInTurn hands classify the events of sub one at a time, as a push
// subscription does when its endpoint takes one request at a time: the
// history's fifty events at once would make classify's transactions, which
// all count into the same hour's metrics, wait on each other in the
// emulator until they time out and are redelivered, for minutes.
func classifyInTurn(t *testing.T, c *core, ps *pubsub.Client, sub string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s := ps.Subscriber(sub)
	s.ReceiveSettings.MaxOutstandingMessages = 1
	s.ReceiveSettings.NumGoroutines = 1
	go func() {
		defer close(done)
		_ = s.Receive(ctx, func(ctx context.Context, m *pubsub.Message) {
			ev, err := jevent.Decode(m.Data)
			if err != nil {
				t.Errorf("Decode(event) = %v", err)
				m.Ack()
				return
			}
			if _, err := c.classifyEvent(ctx, ev); err != nil {
				m.Nack() // a terminated advisory waiting for its record, or a conflict: redelivered
				return
			}
			m.Ack()
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
}
