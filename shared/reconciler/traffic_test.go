package reconciler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// Each run samples the work stream's last sequence and its consumer's ack
// floor; the next run's table shows what was published and acknowledged in
// between, next to completions, dead entries, duplicates and the DLQ rate.
func TestTrafficTableFromSamples(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	cons, err := f.js.CreateOrUpdateConsumer(f.ctx, workStream, jetstream.ConsumerConfig{Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(k int) {
		for i := range k {
			if _, err := f.js.Publish(f.ctx, "agents.backend.tasks.implementation", []byte(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	ack := func(k int) {
		batch, err := cons.Fetch(k, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			if err := m.DoubleAck(f.ctx); err != nil {
				t.Fatal(err)
			}
			got++
		}
		if got != k {
			t.Fatalf("fetched %d messages, want %d", got, k)
		}
	}
	publish(10)
	ack(4)
	// A dead task that replay found completed before publishing it: a
	// duplicate completion.
	old := f.storeAt(time.Now().Add(-10 * time.Minute))
	e := f.seed(old, entry(3, "acme", store.Scheduled))
	f.move(old, e.ID, store.Scheduled, store.Replaying, "replay")
	f.move(old, e.ID, store.Replaying, store.Recovered, "replay")

	h := f.handler(reconciler.Config{TimeBudget: time.Minute, WorkStreams: []string{workStream}}, nil)
	first := f.run(h, false)
	tr := first.Traffic
	if tr == nil || len(tr.Streams) != 1 || tr.Streams[0].LastSeq != 10 || tr.Streams[0].Published != 0 || tr.DLQRate != -1 {
		t.Fatalf("first traffic = %+v, want last_seq 10, nothing published since the first sample and so the DLQ rate unknown (-1)", tr)
	}
	samples, err := f.st.ReadSamples(f.ctx, time.Now().Add(-time.Hour), time.Now())
	if err != nil || len(samples[workStream]) != 1 || samples[workStream][0].Consumers["worker"].AckFloor != 4 {
		t.Fatalf("stored samples = %+v, %v; want one for %s with ack floor 4", samples, err, workStream)
	}

	publish(5)
	ack(3)
	f.complete("acme", "task-a-v1")
	f.complete("acme", "task-b-v1")
	tr = f.run(h, false).Traffic
	row := tr.Streams[0]
	if row.LastSeq != 15 || row.Published != 5 || row.Acked["worker"] != 3 || row.Pending["worker"] != 8 {
		t.Errorf("second traffic row = %+v, want last_seq 15, published 5, acked 3, pending 8", row)
	}
	if tr.Published != 5 || tr.Completed != 2 || tr.Dead != 1 || tr.Duplicates != 1 || tr.DLQRate != 0.2 {
		t.Errorf("second traffic = published %d completed %d dead %d duplicates %d rate %v; want 5, 2, 1, 1, 0.2",
			tr.Published, tr.Completed, tr.Dead, tr.Duplicates, tr.DLQRate)
	}
}
