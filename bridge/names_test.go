package bridge_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
)

// A dead task is forwarded whatever names it carries. A tenant header that
// no Pub/Sub attribute can hold (over 1,024 bytes, not UTF-8) used to make
// every publish fail, and the advisory was NAKed for ever; now the event
// names the reserved tenant, in its body and its attributes, and keeps the
// header as it was, so classify records the task flagged.
func TestTasksWithInvalidNamesAreForwarded(t *testing.T) {
	t.Parallel()
	h, ctx := newHarness(t)
	cons := taskStream(t, h.js, "WORK", "work.>", jetstream.LimitsPolicy, 1)
	var want []string
	for i, hn := range testenv.HostileNames() {
		if !hn.Header {
			continue // NATS headers cannot carry a line break
		}
		m := nats.NewMsg(fmt.Sprintf("work.%d", i))
		m.Header[event.HeaderTenant] = []string{hn.Value}
		m.Data = []byte(hn.Name)
		ack, err := h.js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatalf("publish %s: %v", hn.Name, err)
		}
		want = append(want, event.ID("WORK", ack.Sequence))
	}
	exhaust(t, cons)
	got := h.sink.waitFor(len(want), 60*time.Second)
	byName := map[string]testenv.HostileName{}
	for _, hn := range testenv.HostileNames() {
		byName[hn.Name] = hn
	}
	for _, id := range want {
		evs, ok := got[id]
		if !ok {
			t.Errorf("event %s was not forwarded", id)
			continue
		}
		ev := evs[0]
		hn := byName[string(ev.Message.Data)]
		headers, err := event.DecodeHeaders(ev.Message.Headers)
		if err != nil {
			t.Fatal(err)
		}
		if got := event.Header(headers, event.HeaderTenant); got != hn.Value {
			t.Errorf("%s: the forwarded headers carry tenant %q, want the original", hn.Name, got)
		}
		wantTenant := hn.Value
		if !hn.Valid {
			wantTenant = event.ReservedTenant
		}
		if ev.Tenant != wantTenant {
			t.Errorf("%s: event tenant = %q, want %q", hn.Name, ev.Tenant, wantTenant)
		}
	}
	if f := h.b.Counts().Failed["publish"]; f != 0 {
		t.Errorf("failed[publish] = %d, want 0: no name can make a publish fail", f)
	}
}
