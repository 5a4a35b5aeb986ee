package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/event"
)

// rawPipeline is the bridge's work per advisory written as plainly as the
// libraries allow, in the test process, with none of the bridge's own code
// (validation, metrics, missing/permission handling, NAK backoff, logging):
// pull the advisory, direct-get the original, look up the failure record in
// the KV bucket (absent here, as in the benchmark), encode the event,
// publish it, wait for Pub/Sub's answer, ack. At most window messages are in
// flight, like the bridge's MaxInFlight.
//
// It runs on the same embedded nats-server and Pub/Sub emulator as the
// bridge and needs the same NATS and Pub/Sub work per event, so the two
// share the machine's cores the same way: the ratio bridge / pipeline
// compares like with like, where the ratio to a bare publish loop measures
// the bridge against a loop that leaves nats-server idle.
func rawPipeline(ctx context.Context, tb testing.TB, js jetstream.JetStream, pub *pubsub.Publisher, n, window int) time.Duration {
	tb.Helper()
	cons, err := js.CreateOrUpdateConsumer(ctx, "DLQ_ADVISORIES", jetstream.ConsumerConfig{
		Durable: "raw-pipeline", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 2 * window})
	if err != nil {
		tb.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "dlq_failures")
	if err != nil {
		tb.Fatal(err)
	}
	streams := sync.Map{}
	stream := func(name string) (jetstream.Stream, error) {
		if s, ok := streams.Load(name); ok {
			return s.(jetstream.Stream), nil
		}
		s, err := js.Stream(ctx, name)
		if err == nil {
			streams.Store(name, s)
		}
		return s, err
	}
	start := time.Now()
	it, err := cons.Messages(jetstream.PullMaxMessages(window))
	if err != nil {
		tb.Fatal(err)
	}
	defer it.Stop()
	sem := make(chan struct{}, window)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	for range n {
		msg, err := it.Next()
		if err != nil {
			tb.Fatal(err)
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var adv event.Advisory
			if err := json.Unmarshal(msg.Data(), &adv); err != nil {
				fail(err)
				return
			}
			st, err := stream(adv.Stream)
			if err != nil {
				fail(err)
				return
			}
			orig, err := st.GetMsg(ctx, adv.StreamSeq)
			if err != nil {
				fail(err)
				return
			}
			if _, err := kv.Get(ctx, event.ID(adv.Stream, adv.StreamSeq)); err != nil && err != jetstream.ErrKeyNotFound {
				fail(err)
				return
			}
			ev := event.Event{Schema: event.Schema, ID: event.ID(adv.Stream, adv.StreamSeq), Kind: event.KindMaxDeliver,
				Stream: adv.Stream, StreamSeq: adv.StreamSeq, Consumer: adv.Consumer, Tenant: "default", Agent: "backend",
				ObservedAt: time.Now().UTC(), Advisory: &adv}
			ev.Message.Subject = orig.Subject
			ev.Message.PublishedAt = &orig.Time
			ev.Message.SetPayload(orig.Data)
			data, err := event.Encode(ev)
			if err != nil {
				fail(err)
				return
			}
			if _, err := pub.Publish(ctx, &pubsub.Message{Data: data, Attributes: map[string]string{
				"kind": string(ev.Kind), "stream": ev.Stream, "event_id": ev.ID}}).Get(ctx); err != nil {
				fail(err)
				return
			}
			if err := msg.Ack(); err != nil {
				fail(err)
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		tb.Fatal(fmt.Errorf("raw pipeline: %w", err))
	default:
	}
	return time.Since(start)
}
