package bridge_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
)

// Advisories naming a stream JetStream can never be asked for (forged, or
// from a future server with other naming rules) are rejected and counted at
// once. Before the fix they passed the parser, every direct get failed with
// "invalid stream name", and the message was NAKed forever (the bridge's
// consumer has no MaxDeliver), holding an in-flight slot and flooding the log.
func TestAdvisoryWithInvalidStreamNameIsRejected(t *testing.T) {
	h := newHarness(t)
	ctx := testenv.Context(t)
	streams := []string{`A/B`, `A\\B`, `A\tB`, `A\nB`}
	for i, s := range streams {
		adv := fmt.Sprintf(`{"type":%q,"id":"f%d","timestamp":"2026-11-21T12:00:00Z","stream":"%s","consumer":"w","stream_seq":5,"deliveries":3}`,
			event.AdvisoryMaxDeliver, i, s)
		if _, err := h.js.Publish(ctx, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.X.w", []byte(adv)); err != nil {
			t.Fatal(err)
		}
	}
	good := fmt.Sprintf(`{"type":%q,"id":"g","timestamp":"2026-11-21T12:00:00Z","stream":"GOOD","consumer":"w","stream_seq":1,"deliveries":3}`,
		event.AdvisoryMaxDeliver)
	if _, err := h.js.Publish(ctx, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.GOOD.w", []byte(good)); err != nil {
		t.Fatal(err)
	}
	got := h.sink.waitFor(1, 30*time.Second)
	if _, ok := got["GOOD.1"]; !ok || len(got) != 1 {
		t.Fatalf("events = %v, want only GOOD.1", keys(got))
	}
	deadline := time.Now().Add(15 * time.Second)
	for h.b.Counts().Rejected["malformed_advisory"] != uint64(len(streams)) {
		if time.Now().After(deadline) {
			t.Fatalf("rejected = %v failed = %v, want %d malformed_advisory and no fetch retries",
				h.b.Counts().Rejected, h.b.Counts().Failed, len(streams))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if f := h.b.Counts().Failed["fetch"]; f != 0 {
		t.Errorf("failed[fetch] = %d, want 0: a forged advisory must not be retried", f)
	}
}
