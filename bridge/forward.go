package bridge

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jsdlq/jsdlq/shared/event"
)

// errInput is why one input message was not forwarded, under a reason
// that labels its log line and metric. Input that can never be forwarded is
// rejected: logged, counted and acknowledged, so it is not redelivered
// forever; any other failure is worth retrying later (NAK with delay).
type errInput struct {
	reason   string
	rejected bool
	err      error
}

func (e *errInput) Error() string { return e.reason + ": " + e.err.Error() }
func (e *errInput) Unwrap() error { return e.err }

func reject(reason string, err error) error {
	return &errInput{reason: reason, rejected: true, err: err}
}

func retry(reason string, err error) error { return &errInput{reason: reason, err: err} }

// built is the event made of one input message, or why there is none.
type built struct {
	ev  event.Event
	err error
}

// buildFunc turns a batch of input messages into one built per message, in
// order.
type buildFunc func(context.Context, []jetstream.Msg) []built

// forwardBatch forwards a batch: every event is handed to the publisher at
// once (it bundles them into few requests), then each input message is
// acked as soon as Pub/Sub confirmed its own event. A message whose event
// could not be built or published is NAKed (or, for input that can never
// become an event, acked and counted) on its own: the others go on. done
// is called once per message when it is settled, so that its slot frees
// without waiting for the rest of the batch.
func (b *Bridge) forwardBatch(ctx context.Context, msgs []jetstream.Msg, build buildFunc, done func()) {
	evs := build(ctx, msgs)
	results := make([]*pubsub.PublishResult, len(msgs))
	for i := range msgs {
		err := evs[i].err
		if err == nil {
			var out *pubsub.Message
			if out, err = b.encode(&evs[i].ev); err == nil {
				results[i] = b.pub.Publish(ctx, out)
				continue
			}
		}
		b.settle(ctx, msgs[i], evs[i].ev, err)
		done()
	}
	// Each waits for its own confirmation: one slow or retried bundle must
	// not hold back the acks and slots of events Pub/Sub confirmed before.
	var confirming sync.WaitGroup
	for i, res := range results {
		if res != nil {
			confirming.Go(func() {
				b.settle(ctx, msgs[i], evs[i].ev, b.confirm(ctx, res))
				done()
			})
		}
	}
	confirming.Wait()
}

// settle acks, rejects or NAKs one input message after its outcome.
func (b *Bridge) settle(ctx context.Context, msg jetstream.Msg, ev event.Event, err error) {
	var in *errInput
	isInput := errors.As(err, &in)
	switch {
	case err == nil:
		if b.cfg.DeleteForwarded && ev.Kind == event.KindMaxDeliver && !ev.Message.Missing {
			b.deleteOriginal(ctx, ev)
		}
		if err := msg.Ack(); err != nil {
			// The event is out; a redelivery republishes it with the same id.
			b.log.Warn("ack failed after publish; the event may be sent twice", "event_id", event.Wire(ev.ID), "error", err)
		}
		b.m.inc(b.m.forwarded, string(ev.Kind))
	case isInput && in.rejected:
		b.log.Error("rejected input: acknowledged and dropped", "reason", in.reason, "error", in.err,
			"subject", event.Wire(msg.Subject()), "data", event.Wire(truncateForLog(msg.Data())))
		b.m.inc(b.m.rejected, in.reason)
		if err := msg.Ack(); err != nil {
			b.log.Warn("ack of rejected input failed", "error", err)
		}
	default:
		reason := "error"
		if isInput {
			reason = in.reason
		}
		delay := b.nakDelay(msg)
		b.log.Warn("forward failed; will retry", "reason", reason, "error", err, "retry_in", delay.String(),
			"event_id", event.Wire(ev.ID))
		b.m.inc(b.m.failed, reason)
		if err := msg.NakWithDelay(delay); err != nil {
			b.log.Warn("nak failed; redelivered after ack wait", "error", err)
		}
	}
}

// nakDelay grows with the delivery count: 1 s, 2 s, 4 s … MaxNakDelay, with
// jitter so a recovered Pub/Sub does not see every message at once.
func (b *Bridge) nakDelay(msg jetstream.Msg) time.Duration {
	n := uint64(1)
	if md, err := msg.Metadata(); err == nil && md.NumDelivered > 0 {
		n = md.NumDelivered
	}
	d := b.cfg.MaxNakDelay
	if n < 16 {
		d = min(time.Second<<(n-1), b.cfg.MaxNakDelay)
	}
	return d/2 + rand.N(d/2+1)
}

func truncateForLog(b []byte) string {
	const max = 512
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}

// encode returns the Pub/Sub message carrying the event, omitting the
// payload (then the headers) when it would exceed MaxEventBytes. The
// attributes are built once: truncation changes neither them nor their size.
func (b *Bridge) encode(ev *event.Event) (*pubsub.Message, error) {
	data, err := event.Encode(*ev)
	if err != nil {
		return nil, reject("invalid_event", err)
	}
	attrs := ev.Attributes()
	limit := b.cfg.MaxEventBytes - attrSize(attrs)
	if len(data) <= limit {
		return &pubsub.Message{Data: data, Attributes: attrs}, nil
	}
	b.log.Warn("event exceeds the Pub/Sub limit: forwarding it without the payload", "event_id", event.Wire(ev.ID),
		"size", ev.Message.Size, "event_bytes", len(data))
	ev.Message.Truncate()
	if data, err = event.Encode(*ev); err != nil {
		return nil, reject("invalid_event", err)
	}
	if len(data) > limit {
		ev.Message.Headers = nil
		if data, err = event.Encode(*ev); err != nil {
			return nil, reject("invalid_event", err)
		}
	}
	return &pubsub.Message{Data: data, Attributes: attrs}, nil
}

func attrSize(a map[string]string) int {
	n := 0
	for k, v := range a {
		n += len(k) + len(v)
	}
	return n
}

// confirm waits for Pub/Sub's answer to one publish.
func (b *Bridge) confirm(ctx context.Context, res *pubsub.PublishResult) error {
	_, err := res.Get(ctx)
	if err != nil {
		b.pubFailed.Store(true)
		if status.Code(err) == codes.NotFound && b.cfg.EnsureTopic {
			b.recreateTopic(ctx)
		}
		return retry("publish", err)
	}
	b.pubFailed.Store(false)
	return nil
}

func (b *Bridge) deleteOriginal(ctx context.Context, ev event.Event) {
	err := b.sources.delete(ctx, ev.Stream, ev.StreamSeq)
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		b.m.inc(b.m.failed, "delete")
		b.log.Warn("delete-forwarded: could not delete the original", "event_id", event.Wire(ev.ID), "error", err)
	}
}

// fromRecords builds the events of a batch of explicit records; a record
// carries everything, so nothing is read from NATS.
func (b *Bridge) fromRecords(_ context.Context, msgs []jetstream.Msg) []built {
	out := make([]built, len(msgs))
	for i, msg := range msgs {
		r, err := event.ParseRecord(msg.Headers(), msg.Data())
		if err != nil {
			out[i].err = reject("malformed_record", err)
			continue
		}
		out[i].ev = r.Event(event.DefaultConventions, b.cfg.Now())
		b.warnReserved(out[i].ev)
	}
	return out
}
