package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestFirestoreTransactionOnEmulator(t *testing.T) {
	fs, _ := testenv.Firestore(t)
	ctx := testenv.Context(t)
	doc := fs.Collection("counters").Doc("c")
	// Concurrent read-modify-write transactions must not lose an increment:
	// this is what the emulator gives us that a mock would not.
	const writers = 8
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
				snap, err := tx.Get(doc)
				var n int64
				if err == nil {
					n, _ = snap.Data()["n"].(int64)
				}
				return tx.Set(doc, map[string]any{"n": n + 1})
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("RunTransaction() = %v, want nil", err)
		}
	}
	snap, err := doc.Get(ctx)
	if err != nil {
		t.Fatalf("Get() = %v", err)
	}
	if got := snap.Data()["n"]; got != int64(writers) {
		t.Errorf("counter after %d transactions = %v, want %d", writers, got, writers)
	}
}

func TestPubSubPublishReceiveOnEmulator(t *testing.T) {
	ps, project := testenv.PubSub(t)
	ctx := testenv.Context(t)
	topic := fmt.Sprintf("projects/%s/topics/%s", project, testenv.Name(t, "topic"))
	sub := fmt.Sprintf("projects/%s/subscriptions/%s", project, testenv.Name(t, "sub"))
	testenv.TopicWithSubscription(t, ctx, ps, topic, sub)
	pub := ps.Publisher(topic)
	defer pub.Stop()
	if _, err := pub.Publish(ctx, &pubsub.Message{Data: []byte("hello"), Attributes: map[string]string{"kind": "test"}}).Get(ctx); err != nil {
		t.Fatalf("Publish() = %v", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var got *pubsub.Message
	err := ps.Subscriber(sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		got = m
		cancel()
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive() = %v", err)
	}
	if got == nil || string(got.Data) != "hello" || got.Attributes["kind"] != "test" {
		t.Fatalf("received %+v, want data hello with attribute kind=test", got)
	}
}

func TestJetStreamPublishConsume(t *testing.T) {
	ctx, n, js, s := taskStream(t)
	if _, err := js.Publish(ctx, "agents.cto.tasks.review", []byte("t1")); err != nil {
		t.Fatalf("Publish() = %v", err)
	}
	c, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("CreateConsumer() = %v", err)
	}
	msg, err := c.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatalf("Next() = %v", err)
	}
	if string(msg.Data()) != "t1" {
		t.Errorf("Next().Data() = %q, want %q", msg.Data(), "t1")
	}
	if err := msg.DoubleAck(ctx); err != nil {
		t.Fatalf("DoubleAck() = %v", err)
	}

	// A restart keeps the stream (file store) and the port.
	url := n.URL
	n.Restart(t)
	if n.URL != url {
		t.Errorf("URL after restart = %q, want %q", n.URL, url)
	}
	_, js2 := n.Connect(t)
	info, err := js2.Stream(ctx, "TASKS")
	if err != nil {
		t.Fatalf("Stream() after restart = %v", err)
	}
	if got := info.CachedInfo().State.Msgs; got != 1 {
		t.Errorf("messages after restart = %d, want 1", got)
	}
}

func TestNameIsUniqueAndSafe(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z][a-z0-9-]{0,29}$`)
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		n := testenv.Name(t, "topic")
		if !valid.MatchString(n) {
			t.Fatalf("Name(topic) = %q, want lower-case letters, digits, hyphens, at most 30", n)
		}
		if seen[n] {
			t.Fatalf("Name(topic) repeated %q", n)
		}
		seen[n] = true
	}
}

func TestRestartablePubSubEmulator(t *testing.T) {
	e := testenv.NewPubSubEmulator(t)
	ctx := testenv.Context(t)
	t.Setenv("PUBSUB_EMULATOR_HOST", e.Host)
	ps, err := pubsub.NewClient(ctx, "jsdlq-test")
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	topic := "projects/jsdlq-test/topics/" + testenv.Name(t, "topic")
	if _, err := ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatalf("CreateTopic() = %v", err)
	}
	e.Stop()
	down, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := ps.TopicAdminClient.GetTopic(down, &pubsubpb.GetTopicRequest{Topic: topic}); err == nil {
		t.Fatalf("GetTopic() while the emulator is stopped = nil, want an error")
	}
	e.Start(t)
	// Same address; the emulator starts empty. A new client, because gRPC's
	// reconnect backoff (up to two minutes) would make the old one slow to
	// notice the server is back.
	ps2, err := pubsub.NewClient(ctx, "jsdlq-test")
	if err != nil {
		t.Fatal(err)
	}
	defer ps2.Close()
	if _, err := ps2.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatalf("CreateTopic() after restart = %v", err)
	}
}

// taskStream starts a NATS server of the test's own with a TASKS stream on
// agents.>, and returns the test's context, the server, a JetStream client
// and the stream.
func taskStream(t *testing.T) (context.Context, *testenv.NATS, jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	n := testenv.NewNATS(t)
	_, js := n.Connect(t)
	ctx := testenv.Context(t)
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TASKS", Subjects: []string{"agents.>"}})
	if err != nil {
		t.Fatalf("CreateStream() = %v", err)
	}
	return ctx, n, js, s
}

// The crash comes after the message is stored: the caller sees the error,
// the stream has the message, and a retry with the same Nats-Msg-Id is the
// stream's duplicate.
func TestCrashAfterPublish(t *testing.T) {
	ctx, _, js, s := taskStream(t)
	crash := errors.New("injected crash")
	crashes := 0
	pub := testenv.CrashAfterPublish(js, func(m *nats.Msg) error {
		if crashes == 0 {
			crashes++
			return crash
		}
		return nil
	})
	msg := &nats.Msg{Subject: "agents.cto.tasks.review", Data: []byte("t1")}

	tests := []struct {
		name    string
		wantErr error
		wantDup bool
	}{
		{name: "first publish crashes", wantErr: crash},
		{name: "retry is a duplicate", wantDup: true},
	}
	for _, tt := range tests {
		ack, err := pub.PublishMsg(ctx, msg, jetstream.WithMsgID("m1"))
		if !errors.Is(err, tt.wantErr) {
			t.Fatalf("%s: PublishMsg() error = %v, want %v", tt.name, err, tt.wantErr)
		}
		if err == nil && ack.Duplicate != tt.wantDup {
			t.Errorf("%s: PublishMsg() ack.Duplicate = %t, want %t", tt.name, ack.Duplicate, tt.wantDup)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatalf("Info() = %v", err)
		}
		if got := info.State.Msgs; got != 1 {
			t.Errorf("%s: messages = %d, want 1", tt.name, got)
		}
	}
}

// WithPublishDenied's user is refused exactly the denied subjects: its
// request to one stream's JetStream API gets a permissions violation and no
// answer, while its other requests, and connections without credentials, are
// served.
func TestPublishDeniedUser(t *testing.T) {
	n := testenv.NewNATS(t, testenv.WithPublishDenied("limited", "$JS.API.STREAM.INFO.DENIED"))
	ctx := testenv.Context(t)
	_, admin := n.Connect(t)
	for _, name := range []string{"ALLOWED", "DENIED"} {
		if _, err := admin.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}}); err != nil {
			t.Fatalf("CreateStream(%s) = %v", name, err)
		}
	}
	violations := make(chan error, 4)
	_, limited := n.Connect(t, nats.UserInfo("limited", "limited"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		violations <- err
	}))
	for _, tc := range []struct {
		conn       string
		js         jetstream.JetStream
		stream     string
		wantDenied bool
	}{
		{"limited", limited, "ALLOWED", false},
		{"limited", limited, "DENIED", true},
		{"without credentials", admin, "DENIED", false},
	} {
		// The denied request is never answered: bound its wait.
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := tc.js.Stream(rctx, tc.stream)
		cancel()
		if tc.wantDenied != errors.Is(err, context.DeadlineExceeded) || (!tc.wantDenied && err != nil) {
			t.Errorf("%s: Stream(%s) = %v, want denied %v", tc.conn, tc.stream, err, tc.wantDenied)
		}
	}
	select {
	case err := <-violations:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), "$JS.API.STREAM.INFO.DENIED") {
			t.Errorf("limited connection's error = %v, want a permissions violation for $JS.API.STREAM.INFO.DENIED", err)
		}
	case <-ctx.Done():
		t.Error("limited connection got no permissions violation")
	}
}
