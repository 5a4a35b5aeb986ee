package bridge

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jsdlq/jsdlq/shared/clientopt"
)

// NewPubSubClient returns the Pub/Sub client the bridge publishes with. gRPC
// waits up to 120 s between reconnect attempts by default, so a bridge would
// sit idle for two minutes after a Pub/Sub (emulator) restart; the backoff is
// capped at a few seconds instead. With emulatorHost set, the client talks
// to that emulator without credentials, whatever PUBSUB_EMULATOR_HOST says.
func NewPubSubClient(ctx context.Context, project, emulatorHost string, opts ...option.ClientOption) (*pubsub.Client, error) {
	o := []option.ClientOption{
		option.WithGRPCDialOption(grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  200 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   3 * time.Second,
			},
			MinConnectTimeout: 2 * time.Second,
		})),
	}
	o = append(o, clientopt.PubSubOptions(emulatorHost)...)
	c, err := pubsub.NewClient(ctx, project, append(o, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("bridge: pubsub client: %w", err)
	}
	return c, nil
}

// checkTopic verifies (or, with EnsureTopic, creates) the topic at start.
func (b *Bridge) checkTopic(ctx context.Context) error {
	_, err := b.ps.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: b.topic})
	if status.Code(err) == codes.NotFound && b.cfg.EnsureTopic {
		_, err = b.ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: b.topic})
		if status.Code(err) == codes.AlreadyExists {
			err = nil
		}
		if err == nil {
			b.log.Info("created topic", "topic", b.topic)
		}
	}
	if err != nil {
		return fmt.Errorf("bridge: topic %s: %w", b.topic, err)
	}
	return nil
}

// recreateTopic restores a topic that vanished (an emulator restart), at
// most once every two seconds however many publishes failed.
func (b *Bridge) recreateTopic(ctx context.Context) {
	now := time.Now().UnixNano()
	last := b.lastTopic.Load()
	if now-last < int64(2*time.Second) || !b.lastTopic.CompareAndSwap(last, now) {
		return
	}
	_, err := b.ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: b.topic})
	switch status.Code(err) {
	case codes.OK:
		b.log.Warn("topic was missing: recreated it (ensure-topic)", "topic", b.topic)
	case codes.AlreadyExists:
	default:
		b.log.Warn("recreate topic failed", "topic", b.topic, "error", err)
	}
}
