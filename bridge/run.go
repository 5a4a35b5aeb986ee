package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// recordReadAheadBytes bounds the record payloads pulled ahead of processing.
const recordReadAheadBytes = 32 << 20

// Run sets up the streams, bucket, topic and consumers, then forwards until
// ctx ends; it then stops pulling, finishes what is in flight (bounded by
// DrainTimeout) and flushes the publisher.
func (b *Bridge) Run(ctx context.Context) error {
	if err := Ensure(ctx, b.js, b.cfg.Names, b.log, WithLimits(b.cfg.AdvisoryLimits, b.cfg.RecordLimits)); err != nil {
		return err
	}
	kv, err := b.js.KeyValue(ctx, b.cfg.FailureBucket)
	if err != nil {
		return fmt.Errorf("bridge: bucket %s: %w", b.cfg.FailureBucket, err)
	}
	if err := b.direct.start(); err != nil {
		return err
	}
	defer b.direct.stop()
	if b.failures, err = newFailureReader(ctx, b.direct, b.sources.isDenied, kv, b.cfg.FetchTimeout, b.log); err != nil {
		return err
	}
	if err := b.checkTopic(ctx); err != nil {
		return err
	}
	type source struct {
		stream string
		build  buildFunc
		pull   jetstream.PullMessagesOpt
		cons   jetstream.Consumer
		it     jetstream.MessagesContext
	}
	batch := min(b.cfg.MaxInFlight, 500)
	sources := []*source{
		{stream: b.cfg.AdvisoryStream, build: b.fromAdvisories, pull: jetstream.PullMaxMessages(batch)},
		// Records carry payloads: their read-ahead is bounded in bytes too.
		{stream: b.cfg.RecordStream, build: b.fromRecords,
			pull: jetstream.PullMaxMessagesWithBytesLimit(batch, recordReadAheadBytes)},
	}
	for _, src := range sources {
		stream := src.stream
		c, err := b.js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable:     b.cfg.Consumer,
			Description: "jsdlq bridge: forwards to Pub/Sub",
			AckPolicy:   jetstream.AckExplicitPolicy,
			AckWait:     b.cfg.AckWait,
			MaxDeliver:  -1, // a Pub/Sub outage must never make the bridge drop input
			// Twice the in-flight bound: after a crash, the messages the
			// dead instance held stay pending for AckWait, and the
			// successor must not wait for them to start.
			MaxAckPending: 2 * b.cfg.MaxInFlight,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			return fmt.Errorf("bridge: consumer %s on %s: %w", b.cfg.Consumer, stream, err)
		}
		b.cons.Store(stream, c)
		// A pull parked on the server when the consumer is deleted is
		// answered ErrConsumerDeleted; between pulls there is no answer,
		// only missing heartbeats, after which the loop below asks. A
		// shorter expiry than the default 30 s makes that minutes sooner.
		it, err := c.Messages(src.pull, jetstream.PullExpiry(pullExpiry))
		if err != nil {
			return fmt.Errorf("bridge: pull %s: %w", stream, err)
		}
		defer it.Stop()
		src.cons, src.it = c, it
	}
	b.ready.Store(true)
	b.log.Info("bridge ready", "topic", b.topic, "advisory_stream", b.cfg.AdvisoryStream,
		"record_stream", b.cfg.RecordStream, "consumer", b.cfg.Consumer, "max_in_flight", b.cfg.MaxInFlight)

	// Work outlives ctx by DrainTimeout so that in-flight messages finish.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	// One slot per message being forwarded, over both sources.
	sem := make(chan struct{}, b.cfg.MaxInFlight)
	maxBatch := batchSize(b.cfg.MaxInFlight)
	fatal := make(chan error, 1)
	var inflight sync.WaitGroup
	var loops sync.WaitGroup
	for _, src := range sources {
		stream, build, it, cons := src.stream, src.build, src.it, src.cons
		pulled := make(chan jetstream.Msg, maxBatch)
		loops.Go(func() {
			defer close(pulled)
			for {
				msg, err := it.Next()
				if err != nil {
					switch {
					case errors.Is(err, jetstream.ErrMsgIteratorClosed):
						return
					case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConnectionClosed):
						// Not recoverable in place: end Run with the error so
						// the process restarts and recreates its consumer.
						select {
						case fatal <- fmt.Errorf("bridge: pull %s: %w", stream, err):
						default:
						}
						return
					}
					if gone := consumerGone(ctx, cons); gone != nil {
						select {
						case fatal <- fmt.Errorf("bridge: pull %s: %w", stream, gone):
						default:
						}
						return
					}
					b.log.Warn("pull failed; retrying", "stream", stream, "error", err)
					time.Sleep(200 * time.Millisecond)
					continue
				}
				pulled <- msg
			}
		})
		loops.Go(func() {
			for {
				batch := nextBatch(pulled, sem, maxBatch)
				if batch == nil {
					return
				}
				b.m.inFlight.Add(int64(len(batch)))
				inflight.Go(func() {
					b.forwardBatch(work, batch, build, func() { <-sem; b.m.inFlight.Add(-1) })
				})
			}
		})
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-fatal:
		b.log.Error("stopping: a consumer cannot continue", "error", runErr)
	}
	b.log.Info("draining", "in_flight", b.m.inFlight.Load())
	for _, src := range sources {
		src.it.Drain()
	}
	done := make(chan struct{})
	go func() { loops.Wait(); inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(b.cfg.DrainTimeout):
		b.log.Warn("drain timeout: unfinished messages will be redelivered", "in_flight", b.m.inFlight.Load())
		cancelWork()
		<-done
	}
	b.pub.Stop()
	b.ready.Store(false)
	b.log.Info("bridge stopped", "counts", b.m.snapshot())
	return runErr
}

// batchSize is the most messages forwarded as one batch: half the in-flight
// bound, so that one batch is read while another waits for Pub/Sub.
func batchSize(maxInFlight int) int {
	return max(1, min(maxInFlight/2, 250))
}

// nextBatch waits for one pulled message and a slot for it, then adds the
// messages already pulled while slots are free, up to limit: under load
// batches fill up, and a lone message goes at once. It returns nil when
// pulled is closed and empty.
func nextBatch(pulled <-chan jetstream.Msg, sem chan struct{}, limit int) []jetstream.Msg {
	sem <- struct{}{}
	msg, ok := <-pulled
	if !ok {
		<-sem
		return nil
	}
	batch := []jetstream.Msg{msg}
	for len(batch) < limit {
		select {
		case sem <- struct{}{}:
		default:
			return batch
		}
		select {
		case msg, ok := <-pulled:
			if !ok {
				<-sem
				return batch
			}
			batch = append(batch, msg)
		default:
			<-sem
			return batch
		}
	}
	return batch
}

// pullExpiry is how long one pull request of the run waits on the server;
// its heartbeats come every half of it.
const pullExpiry = 10 * time.Second

// consumerGone reports a consumer that no longer exists, as
// jetstream.ErrConsumerDeleted: after a failed pull, to tell a deleted
// consumer (Run must end so the process recreates it) from a passing
// problem (retry).
func consumerGone(ctx context.Context, c jetstream.Consumer) error {
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.Info(ictx); errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("%w: %w", jetstream.ErrConsumerDeleted, err)
	}
	return nil
}
