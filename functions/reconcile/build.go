package reconcile

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
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// ConnectTimeout bounds the wait for NATS within a run; the NATS sections
// then fail and the others still run.
const ConnectTimeout = 10 * time.Second

// LazyJetStream connects to NATS on first use and keeps the connection
// (which reconnects by itself). A failed connect is not remembered, so an
// instance started while NATS was down recovers without a restart.
type LazyJetStream struct {
	cfg natsconn.Config
	mu  sync.Mutex
	nc  *nats.Conn
	js  jetstream.JetStream
}

// NewLazyJetStream returns a LazyJetStream; it does no network work.
func NewLazyJetStream(cfg natsconn.Config) *LazyJetStream { return &LazyJetStream{cfg: cfg} }

// Get returns the JetStream context, connecting first if needed.
func (l *LazyJetStream) Get(ctx context.Context) (jetstream.JetStream, error) {
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
		return nil, fmt.Errorf("reconcile: jetstream: %w", err)
	}
	l.nc, l.js = nc, js
	return js, nil
}

// Close closes the connection if one was made.
func (l *LazyJetStream) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.nc != nil {
		l.nc.Close()
		l.nc, l.js = nil, nil
	}
}

// Names are the capture streams reconcile reads (the bridge's, SPEC §14).
type Names struct {
	AdvisoryStream string
	RecordStream   string
}

// Build makes the reconcile function for cfg behind its authentication:
// Firestore (the emulator when FIRESTORE_EMULATOR_HOST is set), the Cloud
// Tasks client (the emulator when CLOUD_TASKS_EMULATOR_HOST is set) and a
// lazily connected JetStream. Nothing connects before the first request.
func Build(ctx context.Context, cfg config.Reconcile, names Names, log *slog.Logger) (http.Handler, error) {
	a, err := auth.New(cfg.Auth, cfg.CloudTasksEmulatorHost, auth.WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	fs, err := firestore.NewClient(ctx, cfg.Project)
	if err != nil {
		return nil, fmt.Errorf("reconcile: firestore client for project %s: %w", cfg.Project, err)
	}
	js := NewLazyJetStream(natsconn.Config{URL: cfg.NATSURL, Creds: cfg.NATSCreds, Name: "jsdlq-reconcile", Logger: log})
	h := New(Config{
		AdvisoryStream: names.AdvisoryStream,
		RecordStream:   names.RecordStream,
		WorkStreams:    cfg.WorkStreams,
		TimeBudget:     cfg.TimeBudget,
	}, Deps{
		Logger: log,
		Store:  store.New(fs),
		Tasks: tasks.New(tasks.Config{
			Queue:          cfg.TasksQueue,
			ReplayURL:      cfg.ReplayURL,
			ServiceAccount: cfg.TasksServiceAccount,
			EmulatorHost:   cfg.CloudTasksEmulatorHost,
		}),
		JetStream: js.Get,
	})
	return a.Middleware(h), nil
}
