package bridge

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
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
	if emulatorHost != "" {
		o = append(o,
			option.WithEndpoint(emulatorHost),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
			option.WithoutAuthentication(),
			option.WithTelemetryDisabled(),
		)
	}
	c, err := pubsub.NewClient(ctx, project, append(o, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("bridge: pubsub client: %w", err)
	}
	return c, nil
}
