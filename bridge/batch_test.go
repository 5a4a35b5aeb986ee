package bridge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/google/go-cmp/cmp"
	goption "google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// directStream creates a work stream that allows direct gets, the setting
// under which the bridge reads originals in batches.
func directStream(t testing.TB, ctx context.Context, js jetstream.JetStream, name, subjects string) {
	t.Helper()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subjects},
		Storage: jetstream.FileStorage, AllowDirect: true}); err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
}

// workTasks creates the direct-get stream WORK on subjects and publishes n
// tasks to work.x, "task 1" to "task n", at sequences 1 to n.
func workTasks(t testing.TB, ctx context.Context, js jetstream.JetStream, subjects string, n int) {
	t.Helper()
	directStream(t, ctx, js, "WORK", subjects)
	for i := range n {
		publish(t, ctx, js, "work.x", fmt.Appendf(nil, "task %d", i+1))
	}
}

// advise publishes the max-deliveries advisory the server would emit for
// stream's message seq.
func advise(t testing.TB, ctx context.Context, js jetstream.JetStream, stream string, seq uint64) {
	t.Helper()
	adv := fmt.Sprintf(`{"type":%q,"id":"a%d","timestamp":"2026-11-21T12:00:00Z","stream":%q,"consumer":"worker","stream_seq":%d,"deliveries":3}`,
		event.AdvisoryMaxDeliver, seq, stream, seq)
	publish(t, ctx, js, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."+stream+".worker", []byte(adv))
}

// A batch of advisories whose originals are partly gone: deleted messages
// at the start, in the middle and at the end of the batch's sequence range,
// a sequence past the stream's end, and a stream that does not exist. Each
// gets its own answer (payload, or missing with the reason), and the
// failure records read in the same batch land on the right events,
// including a deleted record (no failure) and an unreadable one (ignored).
func TestBatchWithMissingOriginals(t *testing.T) {
	t.Parallel()
	h, ctx := newHarness(t)
	h.stopBridge() // the advisories wait in their stream and reach the bridge together
	const n = 12
	workTasks(t, ctx, h.js, "work.>", n)
	st, err := h.js.Stream(ctx, "WORK")
	if err != nil {
		t.Fatal(err)
	}
	deleted := []uint64{1, 6, 7, n}
	for _, seq := range deleted {
		if err := st.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := h.js.KeyValue(ctx, "dlq_failures")
	if err != nil {
		t.Fatal(err)
	}
	put := func(key, value string) {
		t.Helper()
		if _, err := kv.PutString(ctx, key, value); err != nil {
			t.Fatal(err)
		}
	}
	put("WORK.2", `{"code":"llm_provider_timeout","attempt":2,"agent":"backend"}`)
	put("WORK.6", `{"code":"tool_failure","attempt":1}`)
	put("WORK.3", `{"code":"gone"}`)
	if err := kv.Delete(ctx, "WORK.3"); err != nil {
		t.Fatal(err)
	}
	put("WORK.4", `not json`)
	for seq := uint64(1); seq <= n+1; seq++ {
		advise(t, ctx, h.js, "WORK", seq)
	}
	advise(t, ctx, h.js, "NOSUCH", 5)
	// Every direct get the bridge sends, batch or single, is seen here too:
	// the batch path must answer the 13 sequences and their failure records
	// in a few requests, where the one-at-a-time fallback asks once per
	// sequence (13 here).
	var mu sync.Mutex
	gets, batches := 0, 0
	for _, stream := range []string{"WORK", "KV_dlq_failures"} {
		h.observe(t, "$JS.API.DIRECT.GET."+stream, func(m *nats.Msg) {
			mu.Lock()
			defer mu.Unlock()
			gets++
			if bytes.Contains(m.Data, []byte(`"batch"`)) || bytes.Contains(m.Data, []byte(`"multi_last"`)) {
				batches++
			}
		})
	}
	h.startBridge(t)
	h.sink.waitFor(n+2, 30*time.Second)
	mu.Lock()
	if batches == 0 || gets > 8 {
		t.Errorf("direct gets = %d (%d batch or multi-subject), want a few batch requests, not one per sequence", gets, batches)
	}
	mu.Unlock()

	for seq := uint64(1); seq <= n+1; seq++ {
		e := h.sink.one(event.ID("WORK", seq))
		switch {
		case slices.Contains(deleted, seq) || seq == n+1:
			if !e.Message.Missing || e.Message.MissingReason != event.MissingNotFound {
				t.Errorf("WORK.%d message = %+v, want missing not_found", seq, e.Message)
			}
		default:
			if want := fmt.Sprintf("task %d", seq); string(e.Message.Data) != want || e.Message.Subject != "work.x" {
				t.Errorf("WORK.%d message = %q on %q, want %q on work.x", seq, e.Message.Data, e.Message.Subject, want)
			}
			if len(e.Message.Headers) != 0 {
				t.Errorf("WORK.%d headers = %v, want none (the batch get's own headers dropped)", seq, e.Message.Headers)
			}
		}
		var want *event.Failure
		switch seq {
		case 2:
			want = &event.Failure{Code: "llm_provider_timeout", Attempt: 2, Agent: "backend"}
		case 6:
			want = &event.Failure{Code: "tool_failure", Attempt: 1}
		}
		if diff := cmp.Diff(want, e.Failure); diff != "" {
			t.Errorf("WORK.%d failure (-want +got):\n%s", seq, diff)
		}
	}
	if e := h.sink.one(event.ID("NOSUCH", 5)); e.Message.MissingReason != event.MissingStreamNotFound {
		t.Errorf("NOSUCH.5 message = %+v, want missing stream_not_found", e.Message)
	}
	if c := h.b.Counts(); len(c.Failed) != 0 || len(c.Rejected) != 0 {
		t.Errorf("counts = %+v, want nothing failed or rejected", c)
	}
}

// Malformed advisories in the middle of a batch are rejected one by one:
// they neither hold back nor lose the valid advisories around them, and
// nothing is retried.
func TestMalformedAdvisoriesWithinBatch(t *testing.T) {
	t.Parallel()
	h, ctx := newHarness(t)
	h.stopBridge()
	const n = 20
	workTasks(t, ctx, h.js, "work.>", n)
	subject := "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.WORK.worker"
	bad := []string{
		"not json",
		`{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"WORK"}`,
		`{"type":"io.nats.jetstream.advisory.v1.nak","stream":"WORK","stream_seq":3}`,
		`{"type":"io.nats.jetstream.advisory.v1.max_deliver","timestamp":"2026-11-21T12:00:00Z","stream":"A B","stream_seq":4}`,
	}
	for seq := uint64(1); seq <= n; seq++ {
		advise(t, ctx, h.js, "WORK", seq)
		if seq%5 == 0 {
			publish(t, ctx, h.js, subject, []byte(bad[seq/5-1]))
		}
	}
	h.startBridge(t)
	got := h.sink.waitFor(n, 30*time.Second)
	for seq := uint64(1); seq <= n; seq++ {
		id := event.ID("WORK", seq)
		if evs := got[id]; len(evs) != 1 || string(evs[0].Message.Data) != fmt.Sprintf("task %d", seq) {
			t.Errorf("%s: %d events %+v, want one with its payload", id, len(evs), evs)
		}
	}
	want := map[string]uint64{"malformed_advisory": 3, "unknown_advisory": 1}
	testenv.WaitFor(t, 10*time.Second, func() error {
		if c := h.b.Counts(); fmt.Sprint(c.Rejected) != fmt.Sprint(want) || len(c.Failed) != 0 {
			return fmt.Errorf("rejected = %v, failed = %v; want rejected %v, nothing failed", c.Rejected, c.Failed, want)
		}
		return nil
	})
}

// failingPublisher fails Pub/Sub publish requests that carry one of the
// marked event ids, the first time it sees the mark. A "lost" mark fails the request before
// it reaches Pub/Sub; an "unanswered" one lets Pub/Sub store the messages
// and fails only the answer, as a connection cut after the commit would.
type failingPublisher struct {
	mu         sync.Mutex
	lost       map[string]bool // event id → still to fail
	unanswered map[string]bool
	// Every event id of the requests failed, by kind of failure.
	failedLost, failedUnanswered []string
}

func (f *failingPublisher) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	pr, ok := req.(*pubsubpb.PublishRequest)
	if !ok {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	var ids []string
	lose, unanswer := false, false
	f.mu.Lock()
	for _, m := range pr.Messages {
		id := m.Attributes["event_id"]
		ids = append(ids, id)
		lose = lose || f.lost[id]
		unanswer = unanswer || f.unanswered[id]
	}
	// One failure per request: a refusal first; an unanswered mark in a
	// refused request waits for the retry's request.
	unanswer = unanswer && !lose
	for _, id := range ids {
		if lose {
			f.lost[id] = false
		}
		if unanswer {
			f.unanswered[id] = false
		}
	}
	switch {
	case lose:
		f.failedLost = append(f.failedLost, ids...)
	case unanswer:
		f.failedUnanswered = append(f.failedUnanswered, ids...)
	}
	f.mu.Unlock()
	if lose {
		// Not retried by the client: the bridge's own retry is tested.
		return status.Error(codes.FailedPrecondition, "injected: publish refused")
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if unanswer && err == nil {
		return status.Error(codes.FailedPrecondition, "injected: answer lost after the publish")
	}
	return err
}

// Pub/Sub fails part of a batch: the events it did not confirm are not
// acked, so JetStream redelivers their advisories and they are published
// again; the confirmed ones are acked once and not sent again. Where
// Pub/Sub did store an event but its answer was lost, the retry publishes
// it a second time with the same event id: that retry is idempotent
// because the id is the source message's <stream>.<seq>, the same on every
// attempt, and classify creates an entry only if none with that id exists,
// so the second copy changes nothing downstream.
func TestBatchPublishFailsHalfway(t *testing.T) {
	t.Parallel()
	h, ctx := newHarness(t)
	h.stopBridge()
	// Batches of 32 (64 in flight) bundled by the publisher (up to 100
	// messages or 5 ms): the failed requests hold part of the events.
	const n = 300
	workTasks(t, ctx, h.js, "work.x", n)
	for seq := uint64(1); seq <= n; seq++ {
		advise(t, ctx, h.js, "WORK", seq)
	}
	f := &failingPublisher{lost: map[string]bool{"WORK.5": true}, unanswered: map[string]bool{"WORK.250": true}}
	ps, err := bridge.NewPubSubClient(ctx, h.project, testenv.PubSubHost(t),
		goption.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(f.intercept)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	sinkClient := h.ps
	h.ps = ps // the bridge publishes through the failing client
	h.startBridge(t)
	h.ps = sinkClient
	h.sink.waitFor(n, 60*time.Second)

	f.mu.Lock()
	lost, unanswered := slices.Clone(f.failedLost), slices.Clone(f.failedUnanswered)
	f.mu.Unlock()
	if !slices.Contains(lost, "WORK.5") || !slices.Contains(unanswered, "WORK.250") {
		t.Fatalf("failed requests held %v (refused) and %v (unanswered), want WORK.5 and WORK.250 among them", lost, unanswered)
	}
	if len(lost)+len(unanswered) >= n {
		t.Fatalf("every event was in a failed request (%d refused, %d unanswered): the test needs some confirmed at once", len(lost), len(unanswered))
	}
	testenv.WaitFor(t, 20*time.Second, func() error {
		c, err := h.js.Consumer(ctx, "DLQ_ADVISORIES", "dlq-bridge")
		if err != nil {
			return err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending != 0 || info.NumAckPending != 0 {
			return fmt.Errorf("pending %d, ack pending %d; want all acked", info.NumPending, info.NumAckPending)
		}
		return nil
	})
	// Both copies of each unanswered event are in Pub/Sub once its
	// advisory is acked; wait for the subscription to deliver them.
	testenv.WaitFor(t, 20*time.Second, func() error {
		for _, id := range unanswered {
			if k := len(h.sink.all(id)); k < 2 {
				return fmt.Errorf("%s arrived %d times so far, want 2", id, k)
			}
		}
		return nil
	})
	got := h.sink.waitFor(n, time.Second)
	for seq := 1; seq <= n; seq++ {
		id := event.ID("WORK", uint64(seq))
		want := 1
		if slices.Contains(unanswered, id) {
			want = 2 // stored by Pub/Sub, then published again by the retry
		}
		evs := got[id]
		if len(evs) != want {
			t.Errorf("%s arrived %d times, want %d", id, len(evs), want)
			continue
		}
		if string(evs[0].Message.Data) != fmt.Sprintf("task %d", seq) {
			t.Errorf("%s payload = %q", id, evs[0].Message.Data)
		}
		if want == 2 {
			// The copies differ only in when the bridge observed them.
			a, b := evs[0], evs[1]
			a.ObservedAt, b.ObservedAt = time.Time{}, time.Time{}
			aj, _ := json.Marshal(a)
			bj, _ := json.Marshal(b)
			if string(aj) != string(bj) {
				t.Errorf("%s: the retry's copy differs:\n%s\n%s", id, aj, bj)
			}
		}
	}
	if c := h.b.Counts(); c.Failed["publish"] != uint64(len(lost)+len(unanswered)) {
		t.Errorf("failed = %v, want publish = %d (every event of the failed requests, once)", c.Failed, len(lost)+len(unanswered))
	}
}
