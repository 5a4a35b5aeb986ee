package bridge_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Input that can never become an event is logged, acknowledged and counted,
// never redelivered forever; good input behind it still flows.
func TestMalformedInputIsAckedAndCounted(t *testing.T) {
	t.Parallel()
	h, ctx := newHarness(t)
	bad := []struct{ subject, data string }{
		{"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.TASKS.w", "not json"},
		{"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.TASKS.w", `{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"TASKS"}`},
		{"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.TASKS.w", `{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"TASKS","stream_seq":"7"}`},
		{"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.TASKS.w", `{"type":"io.nats.jetstream.advisory.v1.nak","stream":"TASKS","stream_seq":7}`},
		{"dlq.records.TASKS", "a record without its header"},
	}
	for _, b := range bad {
		publish(t, ctx, h.js, b.subject, []byte(b.data))
	}
	// A forged record that parses but cannot become a valid event (a
	// negative attempt): the event check refuses it, so it is rejected
	// rather than retried forever.
	forged := &nats.Msg{Subject: "dlq.records.TASKS", Data: []byte("p"), Header: nats.Header{event.RecordHeader: {
		fmt.Sprintf(`{"schema":%q,"stream":"TASKS","stream_seq":8,"subject":"agents.x","failure":{"code":"timeout","attempt":-1}}`, event.RecordSchema)}}}
	if _, err := h.js.PublishMsg(ctx, forged); err != nil {
		t.Fatalf("publish forged record: %v", err)
	}
	// A valid advisory after them (for a message that does not exist).
	good := fmt.Sprintf(`{"type":%q,"id":"x","timestamp":"2026-11-21T12:00:00Z","stream":"TASKS","consumer":"w","stream_seq":7,"deliveries":3,"extra_field_of_a_newer_server":1}`,
		event.AdvisoryMaxDeliver)
	publish(t, ctx, h.js, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.TASKS.w", []byte(good))
	h.sink.waitFor(1, 30*time.Second)
	if e := h.sink.one("TASKS.7"); e.Message.MissingReason != event.MissingStreamNotFound {
		t.Errorf("valid advisory event = %+v", e.Message)
	}
	want := map[string]uint64{"malformed_advisory": 3, "unknown_advisory": 1, "malformed_record": 1, "invalid_event": 1}
	testenv.WaitFor(t, 10*time.Second, func() error {
		if got := h.b.Counts().Rejected; fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("rejected = %v, want %v", got, want)
		}
		return nil
	})
	// Acknowledged: nothing pending or awaiting redelivery on either stream.
	for _, stream := range []string{"DLQ_ADVISORIES", "DLQ_RECORDS"} {
		c, err := h.js.Consumer(ctx, stream, "dlq-bridge")
		if err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 10*time.Second, func() error {
			info, err := c.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.NumPending != 0 || info.NumAckPending != 0 || info.NumRedelivered != 0 {
				return fmt.Errorf("%s: pending %d, ack pending %d, redelivered %d; want all acked once", stream,
					info.NumPending, info.NumAckPending, info.NumRedelivered)
			}
			return nil
		})
	}
	if c := h.b.Counts(); c.Failed["publish"] != 0 {
		t.Errorf("failed = %v, want no retries", c.Failed)
	}
}

// Advisories naming a stream JetStream can never be asked for (forged, or
// from a future server with other naming rules) are rejected and counted at
// once. Before the fix they passed the parser, every direct get failed with
// "invalid stream name", and the message was NAKed forever (the bridge's
// consumer has no MaxDeliver), holding an in-flight slot and flooding the log.
func TestAdvisoryWithInvalidStreamNameIsRejected(t *testing.T) {
	t.Parallel()
	h, ctx := newHarness(t)
	streams := []string{`A/B`, `A\\B`, `A\tB`, `A\nB`}
	for i, s := range streams {
		adv := fmt.Sprintf(`{"type":%q,"id":"f%d","timestamp":"2026-11-21T12:00:00Z","stream":"%s","consumer":"w","stream_seq":5,"deliveries":3}`,
			event.AdvisoryMaxDeliver, i, s)
		publish(t, ctx, h.js, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.X.w", []byte(adv))
	}
	good := fmt.Sprintf(`{"type":%q,"id":"g","timestamp":"2026-11-21T12:00:00Z","stream":"GOOD","consumer":"w","stream_seq":1,"deliveries":3}`,
		event.AdvisoryMaxDeliver)
	publish(t, ctx, h.js, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.GOOD.w", []byte(good))
	got := h.sink.waitFor(1, 30*time.Second)
	if _, ok := got["GOOD.1"]; !ok || len(got) != 1 {
		t.Fatalf("events = %v, want only GOOD.1", keys(got))
	}
	testenv.WaitFor(t, 15*time.Second, func() error {
		if c := h.b.Counts(); c.Rejected["malformed_advisory"] != uint64(len(streams)) {
			return fmt.Errorf("rejected = %v failed = %v, want %d malformed_advisory and no fetch retries",
				c.Rejected, c.Failed, len(streams))
		}
		return nil
	})
	if f := h.b.Counts().Failed["fetch"]; f != 0 {
		t.Errorf("failed[fetch] = %d, want 0: a forged advisory must not be retried", f)
	}
}

// A work stream whose name NATS accepts but a KV key does not ("@"; also
// ":", "#", non-ASCII letters) has no failure records, since agentkit cannot
// write one under such a key. Its dead messages are forwarded, not NAKed for
// ever because the client refuses the lookup's key.
func TestStreamNameThatIsNoKVKeyIsForwarded(t *testing.T) {
	t.Parallel()
	h, _ := newHarness(t)
	ack := deadLetter(t, h.js, "TASKS@EU", "eu.tasks.x", []byte("payload"))
	got := h.sink.waitFor(1, 30*time.Second)
	if e, ok := got[event.ID("TASKS@EU", ack.Sequence)]; !ok || string(e[0].Message.Data) != "payload" {
		t.Fatalf("events = %v, want the dead message of TASKS@EU with its payload", keys(got))
	}
	if f := h.b.Counts().Failed["kv"]; f != 0 {
		t.Errorf("failed[kv] = %d, want 0: a key that cannot exist is no record, not a retry", f)
	}
}

// An event that would exceed the Pub/Sub limit is forwarded without its
// payload, with size and sha256, never dropped. (The limit is lowered here:
// the test server's max payload is 1 MiB, Pub/Sub's 10 MB.)
func TestOversizedEventIsTruncated(t *testing.T) {
	t.Parallel()
	h, ctx := newHarness(t, func(c *bridge.Config) { c.MaxEventBytes = 64 << 10 })
	cons := taskStream(t, h.js, "BIG", "agents.>", jetstream.LimitsPolicy, 1)
	big := bytes.Repeat([]byte{0xab, 0x00}, 60<<10) // 120 KiB, 160 KiB in base64
	small := []byte("fits")
	aBig := publish(t, ctx, h.js, "agents.a.tasks.big", big)
	aSmall := publish(t, ctx, h.js, "agents.a.tasks.small", small)
	exhaust(t, cons)
	h.sink.waitFor(2, 30*time.Second)
	e := h.sink.one(event.ID("BIG", aBig.Sequence))
	sum := sha256.Sum256(big)
	if !e.Message.Truncated || len(e.Message.Data) != 0 || e.Message.Size != int64(len(big)) ||
		e.Message.SHA256 != hex.EncodeToString(sum[:]) || e.Message.Subject != "agents.a.tasks.big" {
		t.Errorf("oversized event message = truncated %v data %d size %d sha %s", e.Message.Truncated,
			len(e.Message.Data), e.Message.Size, e.Message.SHA256)
	}
	if s := h.sink.one(event.ID("BIG", aSmall.Sequence)); s.Message.Truncated || !bytes.Equal(s.Message.Data, small) {
		t.Errorf("small event = %+v", s.Message)
	}
}

// Payloads up to the server's max payload (1 MiB here) are forwarded whole.
func TestMaxPayloadForwarded(t *testing.T) {
	t.Parallel()
	h, ctx := newHarness(t)
	cons := taskStream(t, h.js, "MAXP", "agents.>", jetstream.LimitsPolicy, 1)
	data := make([]byte, int(h.nc.MaxPayload())-512)
	for i := range data {
		data[i] = byte(i * 7)
	}
	ack := publish(t, ctx, h.js, "agents.a.tasks.huge", data)
	exhaust(t, cons)
	h.sink.waitFor(1, 30*time.Second)
	if e := h.sink.one(event.ID("MAXP", ack.Sequence)); !bytes.Equal(e.Message.Data, data) || e.Message.Truncated {
		t.Errorf("max payload event: %d bytes, truncated %v; want %d bytes", len(e.Message.Data), e.Message.Truncated, len(data))
	}
}

func TestDeleteForwarded(t *testing.T) {
	t.Parallel()
	h, ctx := newHarness(t, func(c *bridge.Config) { c.DeleteForwarded = true })
	cons := taskStream(t, h.js, "DEL", "agents.>", jetstream.WorkQueuePolicy, 1)
	var seqs []uint64
	for i := range 3 {
		ack := publish(t, ctx, h.js, "agents.a.tasks.x", []byte{byte(i)})
		seqs = append(seqs, ack.Sequence)
	}
	exhaust(t, cons)
	h.sink.waitFor(3, 30*time.Second)
	st, _ := h.js.Stream(ctx, "DEL")
	for _, seq := range seqs {
		if e := h.sink.one(event.ID("DEL", seq)); e.Message.Missing {
			t.Errorf("event %s lost its payload", e.ID)
		}
		testenv.WaitFor(t, 10*time.Second, func() error {
			if _, err := st.GetMsg(ctx, seq); err == nil {
				return fmt.Errorf("original %d still in the stream after its event was confirmed", seq)
			}
			return nil
		})
	}
}

func TestHealthAndMetrics(t *testing.T) {
	t.Parallel()
	h, _ := newHarness(t)
	deadLetter(t, h.js, "M", "agents.a.tasks.x", nil)
	h.sink.waitFor(1, 30*time.Second)
	srv := httptest.NewServer(h.b.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d %q, want 200", code, body)
	}
	_, body := get("/metrics")
	for _, want := range []string{
		`jsdlq_bridge_forwarded_total{kind="max_deliver"} 1`,
		"# TYPE jsdlq_bridge_failed_total counter",
		"# TYPE jsdlq_bridge_rejected_total counter",
		"jsdlq_bridge_in_flight 0",
		`jsdlq_bridge_consumer_lag{stream="DLQ_ADVISORIES"} 0`,
		`jsdlq_bridge_consumer_lag{stream="DLQ_RECORDS"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	// NATS gone: not healthy.
	h.nats.Shutdown()
	testenv.WaitFor(t, 10*time.Second, func() error {
		if code, _ := get("/healthz"); code != http.StatusServiceUnavailable {
			return fmt.Errorf("/healthz = %d with NATS down, want 503", code)
		}
		return nil
	})
}

// A NATS restart mid-stream: the bridge reconnects, its durable consumers
// resume, nothing is lost.
func TestNATSRestart(t *testing.T) {
	t.Parallel()
	h, ctx := newHarness(t)
	cons := taskStream(t, h.js, "R", "agents.>", jetstream.LimitsPolicy, 1)
	publishTasks := func(n int) {
		for i := range n {
			publish(t, ctx, h.js, "agents.a.tasks.x", []byte{byte(i)})
		}
	}
	publishTasks(5)
	exhaust(t, cons)
	h.sink.waitFor(5, 30*time.Second)
	h.nats.Restart(t)
	testenv.WaitFor(t, 20*time.Second, func() error {
		if !h.nc.IsConnected() {
			return errors.New("test connection did not reconnect")
		}
		return nil
	})
	publishTasks(5)
	exhaust(t, cons)
	h.sink.waitFor(10, 60*time.Second)
}

var _ = nats.NewMsg
