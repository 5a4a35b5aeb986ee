package replay

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/shared/auth"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/natsconn"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

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
		Publisher: natsconn.NewLazy(natsconn.Config{URL: cfg.NATSURL, Creds: cfg.NATSCreds, Name: "jsdlq-replay", Logger: log}),
	}, opts...)
	return a.Middleware(h), nil
}
