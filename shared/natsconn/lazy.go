package natsconn

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// LazyConnectTimeout bounds how long one caller of Lazy waits for the first
// connect; the caller then fails (a function answers 503, reconcile skips
// its NATS sections) and the next caller tries again.
const LazyConnectTimeout = 10 * time.Second

// Lazy is a JetStream connection made on first use, for functions that must
// do no network work before their first request. A failed connect is not
// remembered: an instance started while NATS was down recovers without a
// restart. Once made, the connection reconnects by itself.
type Lazy struct {
	cfg Config
	mu  sync.Mutex
	nc  *nats.Conn
	js  jetstream.JetStream
}

// NewLazy returns a Lazy for cfg; it does no network work.
func NewLazy(cfg Config) *Lazy { return &Lazy{cfg: cfg} }

// JetStream returns the JetStream context, connecting first if needed.
func (l *Lazy) JetStream(ctx context.Context) (jetstream.JetStream, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.js != nil {
		return l.js, nil
	}
	cctx, cancel := context.WithTimeout(ctx, LazyConnectTimeout)
	defer cancel()
	nc, err := Connect(cctx, l.cfg)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsconn: jetstream: %w", err)
	}
	l.nc, l.js = nc, js
	return js, nil
}

// PublishMsg publishes through the shared connection.
func (l *Lazy) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	js, err := l.JetStream(ctx)
	if err != nil {
		return nil, err
	}
	return js.PublishMsg(ctx, msg, opts...)
}

// Close drains the connection if one was made.
func (l *Lazy) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.nc == nil {
		return nil
	}
	err := l.nc.Drain()
	l.nc, l.js = nil, nil
	return err
}
