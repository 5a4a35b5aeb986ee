package reconciler_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// The entries reconcile records itself (messages no consumer receives) keep
// the retention the policy decides: expire_at = created_at + the rule's
// retention, and so do the chunks of a large payload.
func TestUnconsumedEntryCarriesTheRetention(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	doc := testenv.WithRules(t, triage.DefaultYAML(), `  - name: unconsumed-kept-long
    match: {reason_code: [consumer_filter_rejection]}
    action: escalate
    strategy: none
    retention: 90d
`)
	if _, err := f.st.SavePolicyOverride(f.ctx, doc); err != nil {
		t.Fatalf("SavePolicyOverride() = %v", err)
	}
	// A stream is audited once it has a consumer; this one does not take the message.
	if _, err := f.js.CreateOrUpdateConsumer(f.ctx, workStream, jetstream.ConsumerConfig{Durable: "worker", FilterSubject: "agents.backend.>", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("u"), store.InlinePayload+1)
	ack, err := f.js.Publish(f.ctx, "agents.nobody.tasks.deploy", payload)
	if err != nil {
		t.Fatal(err)
	}
	h := f.handler(reconciler.Config{TimeBudget: time.Minute, WorkStreams: []string{workStream}},
		func() time.Time { return time.Now().Add(5 * time.Minute) })
	f.run(h, false)
	id, err := store.EntryID(event.ID(workStream, ack.Sequence))
	if err != nil {
		t.Fatal(err)
	}
	e, err := f.st.Get(f.ctx, id)
	if err != nil {
		t.Fatalf("entry of the unconsumed message: %v", err)
	}
	if d := e.ExpireAt.Sub(e.CreatedAt); e.Rule != "unconsumed-kept-long" || d != 90*24*time.Hour || !bytes.Equal(e.Payload, payload) {
		t.Errorf("entry = rule %s, expire_at - created_at %v, %d bytes; want unconsumed-kept-long, 2160h, the payload", e.Rule, d, len(e.Payload))
	}
	chunks, err := f.fs.Collection(store.FailureLog).Doc(id).Collection(store.PayloadChunks).Documents(f.ctx).GetAll()
	if err != nil || len(chunks) != 1 {
		t.Fatalf("chunks = %d, %v, want 1", len(chunks), err)
	}
	if at, _ := chunks[0].Data()["expire_at"].(time.Time); !at.Equal(e.ExpireAt) {
		t.Errorf("chunk expire_at = %v, want the entry's %v", at, e.ExpireAt)
	}
}
