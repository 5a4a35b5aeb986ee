package main

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/obs"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestParseFlags(t *testing.T) {
	o, err := parse([]string{"--name", "cto", "--idempotency=false", "--backoff", "1s,2s,3s", "--max-deliver", "3"})
	if err != nil {
		t.Fatal(err)
	}
	if o.consumer != "cto" || o.subject != "agents.cto.tasks.>" {
		t.Errorf("defaults: consumer %q subject %q", o.consumer, o.subject)
	}
	if got := consumerConfig(o).BackOff; len(got) != 2 {
		t.Errorf("BackOff = %v, want two entries for MaxDeliver 3", got)
	}
	for _, bad := range [][]string{
		{"--idempotency=false"},
		{"--name", "a.b", "--idempotency=false"},
		{"--name", "x", "--fail", "explode", "--idempotency=false"},
		{"--name", "x"}, // idempotency without a project
		{"--name", "x", "--idempotency=false", "--backoff", "soon"},
	} {
		t.Setenv("GOOGLE_CLOUD_PROJECT", "")
		if _, err := parse(bad); err == nil {
			t.Errorf("parse(%v) = nil error", bad)
		}
	}
}

// The agent against real NATS and Firestore: healthy tasks complete once,
// failing ones go through agentkit, and replays carrying the strategy's
// headers succeed.
func TestAgentModes(t *testing.T) {
	ctx := testenv.Context(t)
	n := testenv.NewNATS(t)
	_, js := n.Connect(t)
	fs, _ := testenv.Firestore(t)
	if err := bridge.Ensure(ctx, js, bridge.Names{AdvisoryStream: "DLQ_ADVISORIES", RecordStream: "DLQ_RECORDS",
		FailureBucket: "dlq_failures"}, obs.Discard()); err != nil {
		t.Fatal(err)
	}
	// A consumer's BackOff is also its ack wait for each delivery: with a
	// few milliseconds, a case handled slowly on a loaded machine was
	// redelivered into the next case's place.
	o, err := parse([]string{"--name", "backend", "--idempotency=false", "--backoff", "5s", "--max-deliver", "2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TASKS", Subjects: []string{"agents.>"},
		Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "TASKS", consumerConfig(o))
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{Name: "backend", Kit: agentkit.New(js, agentkit.WithAgent("backend"), agentkit.WithFirestore(fs)),
		Log: obs.Discard(), DefaultMode: ModeNone, DefaultProb: 1, ContextWindow: 1000, Idempotent: true,
		Rand: rand.New(rand.NewPCG(1, 2))}

	tests := []struct {
		name string
		hdr  map[string]string
		want Outcome
	}{
		{"healthy", map[string]string{"X-Task-ID": "t1"}, Done},
		{"duplicate of a completed task", map[string]string{"X-Task-ID": "t1"}, Skipped},
		{"transient", map[string]string{"X-Task-ID": "t2", HeaderFail: ModeTransient}, Failed},
		{"transient replay", map[string]string{"X-Task-ID": "t2", HeaderFail: ModeTransient, event.HeaderReplayOf: "TASKS.3"}, Done},
		{"context overflow", map[string]string{"X-Task-ID": "t3", HeaderFail: ModeContext}, Terminated},
		{"context replay compressed", map[string]string{"X-Task-ID": "t3", HeaderFail: ModeContext,
			event.HeaderReplayOf: "TASKS.5", event.HeaderMaxContextTokens: "900"}, Done},
		{"hallucination", map[string]string{"X-Task-ID": "t4", HeaderFail: ModeHallucination}, Terminated},
		{"hallucination replay with instruction", map[string]string{"X-Task-ID": "t4", HeaderFail: ModeHallucination,
			event.HeaderInstruction: "Validate your output against the schema before submitting."}, Done},
		{"permanent", map[string]string{"X-Task-ID": "t5", HeaderFail: ModePermanent}, Terminated},
		{"never fails at probability 0", map[string]string{"X-Task-ID": "t6", HeaderFail: ModePermanent, HeaderFailProb: "0"}, Done},
	}
	for _, tt := range tests {
		msg := nats.NewMsg("agents.backend.tasks.review")
		msg.Data = []byte(`{"task":"review"}`)
		for k, v := range tt.hdr {
			msg.Header.Set(k, v)
		}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("%s: next: %v", tt.name, err)
		}
		got, err := a.Handle(ctx, m)
		if err != nil || got != tt.want {
			t.Errorf("%s: Handle = %s, %v; want %s", tt.name, got, err, tt.want)
		}
		if tt.want == Failed {
			// max-deliver 2: exactly one redelivery follows the NAK, and
			// none after it. Wait for it however slow the machine is (a
			// short fetch window let it arrive in the next case's place),
			// so the next case gets its own task.
			m, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
			if err != nil {
				t.Fatalf("%s: redelivery: %v", tt.name, err)
			}
			if _, err := a.Handle(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Three terminations through agentkit: three records with payloads.
	recs, _ := js.Stream(ctx, "DLQ_RECORDS")
	info, _ := recs.Info(ctx)
	if info.State.Msgs != 3 {
		t.Errorf("records = %d, want 3", info.State.Msgs)
	}
	raw, err := recs.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := event.ParseRecord(raw.Header, raw.Data)
	if err != nil || r.Meta.Failure.Code != "context_window_overflow" || !json.Valid(r.Data) {
		t.Errorf("first record = %+v, %v", r.Meta, err)
	}
	// The transient task recorded its failure before dying by max deliveries.
	kv, _ := js.KeyValue(ctx, "dlq_failures")
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n2 := 0
	for range keys.Keys() {
		n2++
	}
	if n2 != 1 {
		t.Errorf("failure records = %d, want 1 (the transient task)", n2)
	}
}

// The demo's triage agent decides from the task alone: an impossible task
// is discarded with a reason, anything else fixed (X-Demo-Fail: none) and
// replayed or approved, whichever the task offers.
func TestDecideTriage(t *testing.T) {
	tests := []struct {
		reason, status string
		want           string
	}{
		{"impossible_task", "escalated", event.AnswerDiscard},
		{"consumer_filter_rejection", "escalated", event.AnswerReplay},
		{"unknown", "escalated", event.AnswerReplay},
		{"approval_required", "awaiting_approval", event.AnswerApprove},
	}
	for _, tt := range tests {
		task := event.TriageTask{Schema: event.TriageSchema, EntryID: "TASKS.1", Tenant: "t", Status: tt.status, Reason: tt.reason,
			Answers: event.TriageAnswers(tt.status), Summary: "s"}
		a, err := DecideTriage(context.Background(), task)
		if err != nil || a.Answer != tt.want || a.Check(task) != nil {
			t.Errorf("DecideTriage(%s, %s) = %+v, %v; want a valid %s", tt.reason, tt.status, a, err, tt.want)
		}
		if a.Answer != event.AnswerDiscard && a.SetHeaders[HeaderFail] != ModeNone {
			t.Errorf("DecideTriage(%s) edits %v, want %s: %s", tt.reason, a.SetHeaders, HeaderFail, ModeNone)
		}
	}
}
