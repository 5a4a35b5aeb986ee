package coretest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// What an agent says about its failure through agentkit reaches the
// decision over the real path: agentkit.Terminate on a JetStream work
// stream, the bridge, the Pub/Sub emulator, classify. A transient code the
// agent marked not retryable is escalated and never replayed; the explicit
// tool-failure flag with completed steps goes to manual review.
func TestAgentkitFailureFlagsReachTheDecision(t *testing.T) {
	c := newCore(t)
	ctx := testenv.Context(t)

	ps, project := testenv.PubSub(t)
	topic, sub := "projects/"+project+"/topics/dlq-events", "projects/"+project+"/subscriptions/dlq-events-classify"
	testenv.TopicWithSubscription(t, ctx, ps, topic, sub)
	startBridge(t, c.nats, ps, topic)
	delivered := pushToClassify(t, c, ps, sub)

	cons, err := c.js.CreateOrUpdateConsumer(ctx, jevent.DefaultWorkStream, jetstream.ConsumerConfig{Durable: "backend",
		AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 3, AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	no := false
	failures := map[string]agentkit.Failure{
		"no-retry": {Code: "timeout", Detail: "the provider is gone for good", Retryable: &no},
		"tool":     {Code: "network_transient", Detail: "payments API reset the connection", ToolFailure: true, CompletedSteps: []string{"charge-card"}},
	}
	for task := range failures {
		m := nats.NewMsg("agents.backend.tasks.billing")
		m.Header.Set(jevent.HeaderTaskID, task)
		m.Header.Set(jevent.HeaderTenant, "acme")
		m.Data = []byte(`{"task":"` + task + `"}`)
		if _, err := c.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	kit := agentkit.New(c.js, agentkit.WithAgent("backend"))
	for range failures {
		msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("next task: %v", err)
		}
		task := jevent.Header(msg.Headers(), jevent.HeaderTaskID)
		if err := kit.Terminate(ctx, msg, failures[task]); err != nil {
			t.Fatalf("Terminate(%s) = %v", task, err)
		}
	}

	entries := delivered.waitFor(t, 2, time.Minute)
	byTask := map[string]*store.Entry{}
	for _, en := range entries {
		byTask[en.TaskID] = en
	}
	tests := []struct {
		task                     string
		category, action, status string
		retryable                *bool
		tool                     bool
	}{
		{"no-retry", "transient", "escalate", string(store.Escalated), &no, false},
		{"tool", "unknown_commit_state", "manual_review", string(store.AwaitingApproval), nil, true},
	}
	for _, tt := range tests {
		en := byTask[tt.task]
		if en == nil {
			t.Errorf("task %s: no entry", tt.task)
			continue
		}
		if en.Kind != string(jevent.KindExplicit) || en.Category != tt.category || en.Action != tt.action || string(en.Status) != tt.status {
			t.Errorf("task %s: kind, category, action, status = %s, %s, %s, %s, want explicit, %s, %s, %s",
				tt.task, en.Kind, en.Category, en.Action, en.Status, tt.category, tt.action, tt.status)
		}
		f := en.Failure
		if f == nil || f.ToolFailure != tt.tool || (f.Retryable == nil) != (tt.retryable == nil) ||
			(f.Retryable != nil && *f.Retryable != *tt.retryable) || f.Agent != "backend" || f.Attempt != 1 {
			t.Errorf("task %s: stored failure = %+v, want tool_failure %v, retryable %v, agent backend, attempt 1", tt.task, f, tt.tool, tt.retryable)
		}
	}
	// Not replayed: no replay task was scheduled and nothing came back to
	// the work stream (a WorkQueue stream: the terminated originals are gone).
	if got := c.ct.Tasks(t, c.queue); len(got) != 0 {
		t.Errorf("replay tasks = %v, want none", got)
	}
	info, err := c.js.Stream(ctx, jevent.DefaultWorkStream)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := info.Info(ctx); st.State.Msgs != 0 {
		t.Errorf("messages on the work stream = %d, want 0 (no replay)", st.State.Msgs)
	}
}

func startBridge(t *testing.T, n *testenv.NATS, ps *pubsub.Client, topic string) {
	t.Helper()
	nc, _ := n.Connect(t)
	log, _ := testenv.Logger()
	b, err := bridge.New(bridge.Config{Topic: topic, Consumer: jevent.DefaultBridgeConsumer, MaxInFlight: 16, FetchTimeout: time.Second,
		Names: bridge.Names{AdvisoryStream: jevent.DefaultAdvisoryStream, RecordStream: jevent.DefaultRecordStream, FailureBucket: jevent.DefaultFailureBucket}},
		nc, ps, log)
	if err != nil {
		t.Fatalf("bridge.New = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("bridge Run = %v", err)
		}
	})
	testenv.WaitFor(t, 20*time.Second, func() error {
		if ok, why := b.Healthy(); !ok {
			return fmt.Errorf("bridge not healthy: %s", why)
		}
		return nil
	})
}

// classified collects the entries classify wrote for the events it was
// pushed, as the Pub/Sub push subscription delivers them in production.
type classified struct {
	mu      sync.Mutex
	entries map[string]*store.Entry
	errs    []error
}

func pushToClassify(t *testing.T, c *core, ps *pubsub.Client, sub string) *classified {
	t.Helper()
	got := &classified{entries: map[string]*store.Entry{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ps.Subscriber(sub).Receive(ctx, func(ctx context.Context, m *pubsub.Message) {
			ev, err := jevent.Decode(m.Data)
			if err == nil {
				var en *store.Entry
				if en, err = c.classifyEvent(ctx, ev); err == nil {
					got.mu.Lock()
					got.entries[en.ID] = en
					got.mu.Unlock()
					m.Ack()
					return
				}
			}
			got.mu.Lock()
			got.errs = append(got.errs, err)
			got.mu.Unlock()
			m.Nack()
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return got
}

func (g *classified) waitFor(t *testing.T, n int, within time.Duration) []*store.Entry {
	t.Helper()
	var out []*store.Entry
	testenv.WaitFor(t, within, func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.entries) < n {
			return fmt.Errorf("entries = %d, want %d (classify errors: %v)", len(g.entries), n, g.errs)
		}
		out = slices.Collect(maps.Values(g.entries))
		return nil
	})
	return out
}
