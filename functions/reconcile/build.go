package reconcile

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
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// Build makes the reconcile function for cfg behind its authentication:
// Firestore (the emulator when FIRESTORE_EMULATOR_HOST is set), the Cloud
// Tasks client (the emulator when CLOUD_TASKS_EMULATOR_HOST is set) and a
// lazily connected JetStream. Nothing connects before the first request.
func Build(ctx context.Context, cfg config.Reconcile, log *slog.Logger) (http.Handler, error) {
	a, err := auth.New(cfg.Auth, cfg.CloudTasksEmulatorHost, auth.WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	fs, err := firestore.NewClient(ctx, cfg.Project)
	if err != nil {
		return nil, fmt.Errorf("reconcile: firestore client for project %s: %w", cfg.Project, err)
	}
	js := natsconn.NewLazy(natsconn.Config{URL: cfg.NATSURL, Creds: cfg.NATSCreds, Name: "jsdlq-reconcile", Logger: log})
	h := New(Config{
		AdvisoryStream: cfg.AdvisoryStream,
		RecordStream:   cfg.RecordStream,
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
		JetStream: js.JetStream,
	})
	return a.Middleware(h), nil
}
