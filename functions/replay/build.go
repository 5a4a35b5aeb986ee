package replay

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/auth"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/natsconn"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// ConnectTimeout bounds the wait for NATS within one request; the request
// then answers 503 and Cloud Tasks retries it later.
const ConnectTimeout = 10 * time.Second

// LazyJetStream is a Publisher that connects to NATS on its first publish
// and keeps the connection (which reconnects by itself) from then on. A
// failed connect is not remembered: the next publish tries again, so a
// function instance started while NATS was down recovers without a restart.
type LazyJetStream struct {
	cfg natsconn.Config
	mu  sync.Mutex
	nc  *nats.Conn
	js  jetstream.JetStream
}

// NewLazyJetStream returns a LazyJetStream for cfg; it does no network work.
func NewLazyJetStream(cfg natsconn.Config) *LazyJetStream { return &LazyJetStream{cfg: cfg} }

func (l *LazyJetStream) get(ctx context.Context) (jetstream.JetStream, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.js != nil {
		return l.js, nil
	}
	cctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	nc, err := natsconn.Connect(cctx, l.cfg)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("replay: jetstream: %w", err)
	}
	l.nc, l.js = nc, js
	return js, nil
}

// PublishMsg publishes through the shared connection.
func (l *LazyJetStream) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	js, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	return js.PublishMsg(ctx, msg, opts...)
}

// Close drains the connection if one was made.
func (l *LazyJetStream) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.nc == nil {
		return nil
	}
	err := l.nc.Drain()
	l.nc, l.js = nil, nil
	return err
}

// Build makes the replay function for cfg behind its authentication: the
// Firestore client (the emulator when FIRESTORE_EMULATOR_HOST is set), the
// policy loader and a lazily connected JetStream publisher. Nothing connects
// before the first request.
func Build(ctx context.Context, cfg config.Replay, log *slog.Logger, opts ...Option) (http.Handler, error) {
	a, err := auth.New(cfg.Auth, cfg.CloudTasksEmulatorHost, auth.WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	fs, err := firestore.NewClient(ctx, cfg.Project)
	if err != nil {
		return nil, fmt.Errorf("replay: firestore client for project %s: %w", cfg.Project, err)
	}
	h := New(Config{}, Deps{
		Logger:    log,
		Store:     store.New(fs),
		Policy:    triage.NewLoader(fs, log),
		Publisher: NewLazyJetStream(natsconn.Config{URL: cfg.NATSURL, Creds: cfg.NATSCreds, Name: "jsdlq-replay", Logger: log}),
	}, opts...)
	return a.Middleware(h), nil
}
