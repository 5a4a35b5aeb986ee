package testenv

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Publisher publishes to JetStream: jetstream.JetStream, and what replay
// publishes through.
type Publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// CrashAfterPublish returns a Publisher that publishes through p and then
// asks crash about the message: a non-nil error is returned in place of the
// ack. The caller is left where a crash between the publish and its next
// write would leave it (the message is in the stream, nothing after the
// publish ran), which is also what a lost ack does. Faults are injected at
// the seams production code already has, so deployed code carries no hooks.
func CrashAfterPublish(p Publisher, crash func(*nats.Msg) error) Publisher {
	return crashAfterPublish{next: p, crash: crash}
}

type crashAfterPublish struct {
	next  Publisher
	crash func(*nats.Msg) error
}

func (c crashAfterPublish) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ack, err := c.next.PublishMsg(ctx, msg, opts...)
	if err != nil {
		return nil, err
	}
	if err := c.crash(msg); err != nil {
		return nil, err
	}
	return ack, nil
}
