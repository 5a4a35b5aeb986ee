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
// advisory → entry latency are read.
func pushCeiling(ctx context.Context, s *benchStack, n int, progress io.Writer) (float64, error) {
	var got atomic.Int64
	done := make(chan struct{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if got.Add(1) == int64(n) {
			close(done)
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go srv.Serve(l)
	defer srv.Close()

	ps, err := pubsub.NewClient(ctx, s.project)
	if err != nil {
		return 0, fmt.Errorf("pubsub client: %w", err)
	}
	defer ps.Close()
	topic := fmt.Sprintf("projects/%s/topics/push-ceiling", s.project)
	if _, err := ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		return 0, fmt.Errorf("create topic: %w", err)
	}
	if _, err := ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: fmt.Sprintf("projects/%s/subscriptions/push-ceiling", s.project), Topic: topic, AckDeadlineSeconds: 60,
		PushConfig: &pubsubpb.PushConfig{PushEndpoint: "http://" + l.Addr().String() + "/"}}); err != nil {
		return 0, fmt.Errorf("create subscription: %w", err)
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
			return 0, fmt.Errorf("publish: %w", err)
		}
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		return 0, fmt.Errorf("push ceiling: %d of %d pushed within 2 minutes", got.Load(), n)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	rate := float64(n) / time.Since(start).Seconds()
	fmt.Fprintf(progress, "    the emulator pushes %.0f messages/s to an endpoint that acks at once\n", rate)
	return rate, nil
}
