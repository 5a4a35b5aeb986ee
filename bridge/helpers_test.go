package bridge_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/internal/eventschema"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// sink collects the events published to a topic through a subscription,
// validating each against docs/event.schema.json and event.Decode.
type sink struct {
	t      testing.TB
	mu     sync.Mutex
	events map[string][]event.Event // by id: duplicates are kept
	attrs  map[string]map[string]string
	bad    []string
	total  int
}

var schemaOnce = sync.OnceValues(eventschema.FromModule)

// newTopic creates a topic and a subscription on it in project.
func newTopic(t testing.TB, ctx context.Context, ps *pubsub.Client, project, id string) (topic, sub string) {
	t.Helper()
	topic = "projects/" + project + "/topics/" + id
	sub = "projects/" + project + "/subscriptions/" + id + "-sub"
	testenv.TopicWithSubscription(t, ctx, ps, topic, sub)
	return topic, sub
}

func collect(t testing.TB, ps *pubsub.Client, sub string) *sink {
	t.Helper()
	v, err := schemaOnce()
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{t: t, events: map[string][]event.Event{}, attrs: map[string]map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ps.Subscriber(sub).Receive(ctx, func(_ context.Context, m *pubsub.Message) {
			m.Ack()
			s.mu.Lock()
			defer s.mu.Unlock()
			s.total++
			if err := v.Validate(m.Data); err != nil {
				s.bad = append(s.bad, err.Error())
				return
			}
			e, err := event.Decode(m.Data)
			if err != nil {
				s.bad = append(s.bad, err.Error())
				return
			}
			if got, want := fmt.Sprint(m.Attributes), fmt.Sprint(e.Attributes()); got != want {
				s.bad = append(s.bad, fmt.Sprintf("attributes %s, want %s", got, want))
			}
			s.events[e.ID] = append(s.events[e.ID], e)
			s.attrs[e.ID] = m.Attributes
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// waitFor waits until n distinct event ids arrived (or fails the test).
func (s *sink) waitFor(n int, within time.Duration) map[string][]event.Event {
	s.t.Helper()
	testenv.WaitFor(s.t, within, func() error {
		s.mu.Lock()
		got, bad := len(s.events), append([]string(nil), s.bad...)
		s.mu.Unlock()
		if len(bad) > 0 {
			s.t.Fatalf("invalid events received: %v", bad)
		}
		if got < n {
			return fmt.Errorf("received %d distinct events, want %d", got, n)
		}
		return nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]event.Event, len(s.events))
	for k, v := range s.events {
		out[k] = append([]event.Event(nil), v...)
	}
	return out
}

// one returns the single distinct event with id.
func (s *sink) one(id string) event.Event {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	evs := s.events[id]
	if len(evs) == 0 {
		s.t.Fatalf("no event %s; have %v", id, keys(s.events))
	}
	return evs[0]
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// harness is a NATS server, a Pub/Sub project with a topic and subscription,
// and a running bridge.
type harness struct {
	nats    *testenv.NATS
	nc      *nats.Conn
	js      jetstream.JetStream
	ps      *pubsub.Client
	project string
	topic   string
	sink    *sink
	b       *bridge.Bridge
	stop    func()
	// bridgeConn dials the bridge's own connection (default: h.nats).
	bridgeConn func(t *testing.T) *nats.Conn
}

type option func(*bridge.Config)

// newHarness starts a harness, and returns it with the test's context (every
// test using it talks to its servers).
func newHarness(t *testing.T, opts ...option) (*harness, context.Context) {
	t.Helper()
	ctx := testenv.Context(t)
	h := &harness{nats: testenv.NewNATS(t)}
	h.nc, h.js = h.nats.Connect(t)
	h.ps, h.project = testenv.PubSub(t)
	var sub string
	h.topic, sub = newTopic(t, ctx, h.ps, h.project, "dlq-events")
	h.sink = collect(t, h.ps, sub)
	h.startBridge(t, opts...)
	return h, ctx
}

func (h *harness) startBridge(t *testing.T, opts ...option) {
	t.Helper()
	cfg := bridge.Config{
		Topic:    h.topic,
		Names:    bridge.DefaultNames,
		Consumer: "dlq-bridge", MaxInFlight: 64, FetchTimeout: time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	// The bridge gets a connection of its own, as in production.
	var bnc *nats.Conn
	if h.bridgeConn != nil {
		bnc = h.bridgeConn(t)
	} else {
		bnc, _ = h.nats.Connect(t)
	}
	b, err := bridge.New(cfg, bnc, h.ps, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	h.b = b
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // also a bridge that never became healthy
	done := runHealthy(t, ctx, b)
	h.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("bridge Run = %v", err)
		}
	}
	t.Cleanup(h.stopBridge)
}

// stopBridge stops the bridge startBridge started, if it still runs:
// advisories wait in their stream until the next startBridge.
func (h *harness) stopBridge() {
	if h.stop != nil {
		h.stop()
		h.stop = nil
	}
}

// runHealthy runs b until ctx ends and waits until it reports healthy,
// failing the test at once if Run ends first: a bridge that cannot start
// says why rather than timing out. What Run returns arrives on the channel.
func runHealthy(t testing.TB, ctx context.Context, b *bridge.Bridge) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	testenv.WaitFor(t, 20*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("bridge Run ended early: %v", err)
		default:
		}
		if ok, why := b.Healthy(); !ok {
			return fmt.Errorf("bridge not healthy: %s", why)
		}
		return nil
	})
	return done
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	if testing.Verbose() {
		w.t.Log(string(p))
	}
	return len(p), nil
}

// publish publishes data on subject, failing the test unless JetStream
// acknowledges it.
func publish(t testing.TB, ctx context.Context, js jetstream.JetStream, subject string, data []byte) *jetstream.PubAck {
	t.Helper()
	ack, err := js.Publish(ctx, subject, data)
	if err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
	return ack
}

// taskStream creates a work stream on subjects with a worker consumer.
func taskStream(t testing.TB, js jetstream.JetStream, name, subjects string, retention jetstream.RetentionPolicy, maxDeliver int) jetstream.Consumer {
	t.Helper()
	ctx := testenv.Context(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subjects},
		Retention: retention, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
	c, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "worker",
		AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: maxDeliver, AckWait: 30 * time.Second})
	if err != nil {
		t.Fatalf("create consumer: %v", err)
	}
	return c
}

// observe calls seen with every request sent to subject from now until the
// test ends: NATS delivers a copy to the test's own connection too.
func (h *harness) observe(t testing.TB, subject string, seen func(*nats.Msg)) {
	t.Helper()
	sub, err := h.nc.Subscribe(subject, seen)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	// The server has the subscription before anyone sends a request.
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// deadLetter publishes data on subject to a new work stream of that name
// whose consumer gives up after one delivery, and fails that delivery: the
// server advises the message's max deliveries.
func deadLetter(t testing.TB, js jetstream.JetStream, stream, subject string, data []byte) *jetstream.PubAck {
	t.Helper()
	cons := taskStream(t, js, stream, subject, jetstream.LimitsPolicy, 1)
	ack := publish(t, testenv.Context(t), js, subject, data)
	exhaust(t, cons)
	return ack
}

// exhaust fetches and NAKs every message until none is delivered for a while,
// so that each one exceeds MaxDeliver.
func exhaust(t testing.TB, c jetstream.Consumer) {
	t.Helper()
	idle := 0
	for idle < 3 {
		batch, err := c.Fetch(100, jetstream.FetchMaxWait(300*time.Millisecond))
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if err := m.Nak(); err != nil {
				t.Fatalf("nak: %v", err)
			}
		}
		if n == 0 {
			idle++
		} else {
			idle = 0
		}
	}
}

func testLogger(t testing.TB) *slog.Logger {
	return obs.NewLogger(testWriter{t}, obs.WithComponent("bridge"))
}
