package bridge_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestMaxDeliverForwardsOriginal(t *testing.T) {
	h := newHarness(t)
	ctx := testenv.Context(t)
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
