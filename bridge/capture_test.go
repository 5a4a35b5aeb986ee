package bridge_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestMaxDeliverForwardsOriginal(t *testing.T) {
	t.Parallel()
	h, ctx := newHarness(t)
	c := taskStream(t, h.js, "TASKS", "agents.>", jetstream.LimitsPolicy, 2)
	payloads := map[uint64][]byte{}
	for i := range 5 {
		m := nats.NewMsg(fmt.Sprintf("agents.backend.tasks.t%d", i))
		m.Data = []byte{byte(i), 0, 0xff, '\n'}
		m.Header.Set("X-Tenant-ID", "acme")
		ack, err := h.js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		payloads[ack.Sequence] = m.Data
	}
	exhaust(t, c)
	got := h.sink.waitFor(5, 30*time.Second)
	for seq, want := range payloads {
		e := got[event.ID("TASKS", seq)][0]
		if e.Kind != event.KindMaxDeliver || e.Tenant != "acme" || e.Agent != "backend" || e.Consumer != "worker" {
			t.Errorf("event %s = kind %s tenant %s agent %s consumer %s", e.ID, e.Kind, e.Tenant, e.Agent, e.Consumer)
		}
		if !bytes.Equal(e.Message.Data, want) {
			t.Errorf("event %s payload = %x, want %x", e.ID, e.Message.Data, want)
		}
		if e.Advisory.Deliveries != 2 {
			t.Errorf("event %s deliveries = %d, want 2", e.ID, e.Advisory.Deliveries)
		}
	}
}

// N tasks exhaust MaxDeliver (each attempt recorded with agentkit.Fail) and
// M are terminated with agentkit.Terminate on a WorkQueue stream: exactly
// N+M distinct event ids, the original payloads byte for byte, the recorded
// failures attached.
func TestCaptureMaxDeliverAndExplicit(t *testing.T) {
	t.Parallel()
	h, ctx := newHarness(t)
	const n, m = 12, 8
	cons := taskStream(t, h.js, "TASKS", "agents.>", jetstream.WorkQueuePolicy, 2)
	kit := agentkit.New(h.js, agentkit.WithAgent("backend"))
	payload := func(i int) []byte { return append([]byte{0xff, 0, byte(i)}, fmt.Sprintf("task %d", i)...) }
	bySeq := map[uint64]int{}
	for i := range n + m {
		msg := nats.NewMsg(fmt.Sprintf("agents.backend.tasks.t%d", i))
		msg.Data = payload(i)
		msg.Header.Set("X-Task-ID", fmt.Sprint(i))
		msg.Header.Set("X-Tenant-ID", "acme")
		msg.Header.Set("X-Bin", "\xfe\xff")
		ack, err := h.js.PublishMsg(ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		bySeq[ack.Sequence] = i
	}
	// Tasks 0..n-1 fail transiently on every delivery; the rest terminate.
	for idle := 0; idle < 3; {
		batch, err := cons.Fetch(50, jetstream.FetchMaxWait(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			md, _ := msg.Metadata()
			i := bySeq[md.Sequence.Stream]
			if i < n {
				err = kit.Fail(ctx, msg, agentkit.Failure{Code: "llm_provider_timeout", Detail: "504 from provider"})
			} else {
				err = kit.Terminate(ctx, msg, agentkit.Failure{Code: "hallucination_loop", CompletedSteps: []string{"draft"}})
			}
			if err != nil {
				t.Fatalf("task %d: %v", i, err)
			}
		}
		if got == 0 {
			idle++
		} else {
			idle = 0
		}
	}
	got := h.sink.waitFor(n+m, 60*time.Second)
	if len(got) != n+m {
		t.Fatalf("distinct events = %d, want %d: %v", len(got), n+m, keys(got))
	}
	for seq, i := range bySeq {
		id := event.ID("TASKS", seq)
		evs := got[id]
		if len(evs) == 0 {
			t.Errorf("no event for task %d (%s)", i, id)
			continue
		}
		var withPayload *event.Event
		for k := range evs {
			if !evs[k].Message.Missing {
				withPayload = &evs[k]
			}
		}
		if withPayload == nil {
			t.Errorf("task %d: no event carries the payload: %+v", i, evs)
			continue
		}
		e := *withPayload
		if !bytes.Equal(e.Message.Data, payload(i)) {
			t.Errorf("task %d payload = %x, want %x", i, e.Message.Data, payload(i))
		}
		hdr, err := event.DecodeHeaders(e.Message.Headers)
		if err != nil || event.Header(hdr, "X-Bin") != "\xfe\xff" {
			t.Errorf("task %d binary header = %q (%v), want fe ff", i, event.Header(hdr, "X-Bin"), err)
		}
		if e.Tenant != "acme" || e.Agent != "backend" {
			t.Errorf("task %d tenant, agent = %q, %q", i, e.Tenant, e.Agent)
		}
		wantKind, wantCode, wantAttempt := event.KindMaxDeliver, "llm_provider_timeout", 2
		if i >= n {
			wantKind, wantCode, wantAttempt = event.KindExplicit, "hallucination_loop", 1
		}
		if e.Kind != wantKind || e.Failure == nil || e.Failure.Code != wantCode || e.Failure.Attempt != wantAttempt || e.Failure.Agent != "backend" {
			t.Errorf("task %d: kind %s failure %+v; want %s with %s at attempt %d", i, e.Kind, e.Failure, wantKind, wantCode, wantAttempt)
		}
	}
	// Every terminated task also yields its advisory, under the same id:
	// on a WorkQueue stream TERM removed the message, so it is missing.
	for seq, i := range bySeq {
		if i < n {
			continue
		}
		var adv *event.Event
		testenv.WaitFor(t, 30*time.Second, func() error {
			for _, e := range h.sink.all(event.ID("TASKS", seq)) {
				if e.Kind == event.KindTerminated {
					adv = &e
				}
			}
			if adv == nil {
				return fmt.Errorf("no terminated advisory event for task %d", i)
			}
			return nil
		})
		if !adv.Message.Missing || adv.Message.MissingReason != event.MissingNotFound || adv.Advisory.Reason != "hallucination_loop" {
			t.Errorf("terminated advisory event of task %d = %+v", i, adv.Message)
		}
	}
	c := h.b.Counts()
	if c.Forwarded["max_deliver"] < n || c.Forwarded["explicit"] < m || c.Forwarded["terminated"] < m {
		t.Errorf("forwarded counts = %v", c.Forwarded)
	}
}

// A bare TERM (no agentkit) on a WorkQueue stream removes the message: the
// event says so with missing=true and carries the reason.
func TestBareTermOnWorkQueueIsMissing(t *testing.T) {
	t.Parallel()
	h, ctx := newHarness(t)
	cons := taskStream(t, h.js, "WQ", "agents.>", jetstream.WorkQueuePolicy, 3)
	ack := publish(t, ctx, h.js, "agents.cto.tasks.review", []byte("gone"))
	msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := msg.TermWithReason("impossible_task: no such repo"); err != nil {
		t.Fatal(err)
	}
	h.sink.waitFor(1, 30*time.Second)
	e := h.sink.one(event.ID("WQ", ack.Sequence))
	want := event.Message{Missing: true, MissingReason: event.MissingNotFound}
	if d := cmp.Diff(want, e.Message); d != "" {
		t.Errorf("message (-want +got):\n%s", d)
	}
	if e.Kind != event.KindTerminated || e.Advisory.Reason != "impossible_task: no such repo" || e.Tenant != "default" {
		t.Errorf("event = kind %s reason %q tenant %q", e.Kind, e.Advisory.Reason, e.Tenant)
	}
}

// The server terminates a delivered, unacknowledged message that is deleted
// from the stream ("Unacknowledged message was deleted"): forwarded, missing.
func TestServerGeneratedTerm(t *testing.T) {
	t.Parallel()
	h, ctx := newHarness(t)
	cons := taskStream(t, h.js, "LIM", "agents.>", jetstream.LimitsPolicy, 3)
	ack := publish(t, ctx, h.js, "agents.cso.tasks.scan", []byte("x"))
	if _, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	st, _ := h.js.Stream(ctx, "LIM")
	if err := st.DeleteMsg(ctx, ack.Sequence); err != nil {
		t.Fatal(err)
	}
	h.sink.waitFor(1, 30*time.Second)
	e := h.sink.one(event.ID("LIM", ack.Sequence))
	if e.Kind != event.KindTerminated || e.Advisory.Reason != "Unacknowledged message was deleted" || !e.Message.Missing {
		t.Errorf("event = kind %s reason %q missing %v", e.Kind, e.Advisory.Reason, e.Message.Missing)
	}
}

// The original is gone (deleted after max deliveries, or its stream deleted)
// before the bridge reads it: forwarded with missing=true and the reason.
func TestMissingOriginal(t *testing.T) {
	t.Parallel()
	h, ctx := newHarness(t)
	h.stopBridge() // advisories wait in their stream meanwhile
	a1 := deadLetter(t, h.js, "GONE", "gone.x", []byte("1"))
	a2 := deadLetter(t, h.js, "DROPPED", "dropped.x", []byte("2"))
	st, _ := h.js.Stream(ctx, "GONE")
	if err := st.DeleteMsg(ctx, a1.Sequence); err != nil {
		t.Fatal(err)
	}
	if err := h.js.DeleteStream(ctx, "DROPPED"); err != nil {
		t.Fatal(err)
	}
	h.startBridge(t)
	h.sink.waitFor(2, 30*time.Second)
	for id, reason := range map[string]string{
		event.ID("GONE", a1.Sequence):    event.MissingNotFound,
		event.ID("DROPPED", a2.Sequence): event.MissingStreamNotFound,
	} {
		e := h.sink.one(id)
		if e.Kind != event.KindMaxDeliver || !e.Message.Missing || e.Message.MissingReason != reason {
			t.Errorf("%s: kind %s message %+v, want max_deliver missing %s", id, e.Kind, e.Message, reason)
		}
	}
}

func (s *sink) all(id string) []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]event.Event(nil), s.events[id]...)
}
