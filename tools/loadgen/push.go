package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// pushCeiling measures the Pub/Sub emulator's own push rate on this machine:
// n event-sized messages published at once to a topic whose push
// subscription points at an endpoint that acknowledges at once. It is the
// physical limit of the push leg, next to which classify's throughput and the
// advisory → entry latency are read. It also returns the most pushes the
// emulator had outstanding at once: the concurrency classify is offered.
// With work set, the endpoint does it before answering (and answers 500
// when it fails, so the message is pushed again): the push leg with a bare
// handler behind it.
func pushCeiling(ctx context.Context, s *benchStack, name string, n int, work func(context.Context) error, progress io.Writer) (float64, int, error) {
	var got, inFlight, most atomic.Int64
	done := make(chan struct{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		_, _ = io.Copy(io.Discard, r.Body)
		if work != nil {
			if err := work(r.Context()); err != nil {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
		}
		if got.Add(1) == int64(n) {
			close(done)
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go srv.Serve(l)
	defer srv.Close()

	ps, err := pubsub.NewClient(ctx, s.project)
	if err != nil {
		return 0, 0, fmt.Errorf("pubsub client: %w", err)
	}
	defer ps.Close()
	topic := fmt.Sprintf("projects/%s/topics/%s", s.project, name)
	if _, err := ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		return 0, 0, fmt.Errorf("create topic: %w", err)
	}
	if _, err := ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: fmt.Sprintf("projects/%s/subscriptions/%s", s.project, name), Topic: topic, AckDeadlineSeconds: 60,
		PushConfig: &pubsubpb.PushConfig{PushEndpoint: "http://" + l.Addr().String() + "/"}}); err != nil {
		return 0, 0, fmt.Errorf("create subscription: %w", err)
	}
	body := make([]byte, 1500) // about an event with a 512-byte task
	for i := range body {
		body[i] = 'x'
	}
	pub := ps.Publisher(topic)
	defer pub.Stop()
	start := time.Now()
	results := make([]*pubsub.PublishResult, n)
	for i := range results {
		results[i] = pub.Publish(ctx, &pubsub.Message{Data: body})
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			return 0, 0, fmt.Errorf("publish: %w", err)
		}
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		return 0, 0, fmt.Errorf("push ceiling: %d of %d pushed within 2 minutes", got.Load(), n)
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	rate := float64(n) / time.Since(start).Seconds()
	fmt.Fprintf(progress, "    %s: the emulator pushes %.0f messages/s, at most %d at a time\n", name, rate, most.Load())
	return rate, int(most.Load()), nil
}
