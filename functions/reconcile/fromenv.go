// Package reconcile is the reconcile function (docs/reconcile.md): Cloud
// Scheduler calls it over HTTP with OIDC; it runs the engine of
// shared/reconciler, which dlqctl audit runs too.
package reconcile

import (
	"context"
	"io"
	"log/slog"
	"net/http"

	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/httpfunc"
	"github.com/jsdlq/jsdlq/shared/natsconn"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// env is reconcile's environment: what every HTTP function reads and
// reconcile's own Config.
type env struct {
	config.HTTPFunction
	Config        reconciler.Config
	Notifications config.Notifications
}

// readEnv reads reconcile's own settings (httpfunc.Load reads the shared
// ones first, with the same Reader). Unset settings stay zero: Config's
// defaults apply.
func readEnv(r *config.Reader, base config.HTTPFunction) env {
	return env{HTTPFunction: base, Config: reconciler.ReadConfig(r), Notifications: config.ReadNotifications(r)}
}

// FromEnv builds the reconcile function from its environment (lookup:
// os.LookupEnv in production), logging to logs, behind its authentication:
// Firestore (the emulator when FIRESTORE_EMULATOR_HOST is set), the Cloud
// Tasks client (the emulator when CLOUD_TASKS_EMULATOR_HOST is set) and a
// lazily connected JetStream. Nothing connects before the first request. A
// configuration error is logged once, clearly, and every request is
// answered 500, so Cloud Scheduler shows the job failing instead of an
// audit that silently does nothing.
func FromEnv(ctx context.Context, lookup config.Lookup, logs io.Writer) http.Handler {
	return httpfunc.New(ctx, logs, "reconcile", func() (httpfunc.Loaded[env], error) {
		return httpfunc.Load(lookup, readEnv)
	}, build)
}

func build(e env, db *store.Client, log *slog.Logger) (http.Handler, error) {
	js := natsconn.NewLazy(e.NATS.Named("jsdlq-reconcile", log))
	st := store.New(db, store.WithLegacyCompletionsUntil(e.LegacyCompletionsUntil))
	h := reconciler.New(e.Config, reconciler.Deps{
		Logger:    log,
		Store:     st,
		Tasks:     tasks.New(e.Tasks),
		JetStream: js.JetStream,
		// The outbox is published each run.
		Notify: notify.FromConfig(st, e.Project, e.PubSubEmulatorHost, e.Notifications, js.JetStream, log),
	})
	return h, nil
}
