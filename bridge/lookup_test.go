package bridge_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jsdlq/jsdlq/shared/event"
)

// Advisories of a stream that no longer exists arrive together: each event is
// forwarded with the message missing (stream_not_found), and the bridge asks
// NATS for the stream once for the batch, not once per advisory.
func TestGoneStreamLookedUpOncePerBatch(t *testing.T) {
	t.Parallel()
	h, ctx := newHarness(t)
	h.stopBridge() // the advisories wait in their stream and reach the bridge together
	const n = 10
	for seq := uint64(1); seq <= n; seq++ {
		advise(t, ctx, h.js, "GONE", seq)
	}
	var lookups atomic.Int32
	h.observe(t, "$JS.API.STREAM.INFO.GONE", func(*nats.Msg) { lookups.Add(1) })
	h.startBridge(t)
	h.sink.waitFor(n, 30*time.Second)

	for seq := uint64(1); seq <= n; seq++ {
		if e := h.sink.one(event.ID("GONE", seq)); !e.Message.Missing || e.Message.MissingReason != event.MissingStreamNotFound {
			t.Errorf("GONE.%d message = %+v, want missing stream_not_found", seq, e.Message)
		}
	}
	// One batch needs one lookup; the fetch may split the advisories into
	// a few batches, never into one per advisory.
	if got := lookups.Load(); got < 1 || got > n/2 {
		t.Errorf("stream info requests for GONE = %d, want 1 per batch of advisories (at most %d for %d advisories)", got, n/2, n)
	}
	if c := h.b.Counts(); len(c.Failed) != 0 || len(c.Rejected) != 0 {
		t.Errorf("counts = %+v, want nothing failed or rejected", c)
	}
}
