package replay

import (
	"context"
	"io"
	"log/slog"
	"net/http"

	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/httpfunc"
	"github.com/jsdlq/jsdlq/shared/natsconn"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/store"
)

// env is replay's environment: what every HTTP function reads and where
// notifications go.
type env struct {
	config.HTTPFunction
	Notifications config.Notifications
}

// readEnv reads replay's own settings (httpfunc.Load reads the shared ones
// first, with the same Reader, so every problem is reported at once).
func readEnv(r *config.Reader, base config.HTTPFunction) env {
	return env{HTTPFunction: base, Notifications: config.ReadNotifications(r)}
}

// FromEnv builds the replay function from its environment (lookup:
// os.LookupEnv in production), logging to logs, behind its authentication:
// the Firestore client (the emulator when FIRESTORE_EMULATOR_HOST is set),
// the policy loader and a lazily connected JetStream publisher. Nothing
// connects before the first request. A configuration error is logged once
// and answered 500 on every request: Cloud Tasks keeps the task and retries
// it, so nothing is lost while the deployment is fixed.
func FromEnv(ctx context.Context, lookup config.Lookup, logs io.Writer) http.Handler {
	return httpfunc.New(ctx, logs, "replay", func() (httpfunc.Loaded[env], error) {
		return httpfunc.Load(lookup, readEnv)
	}, build)
}

func build(cfg env, db *store.Client, log *slog.Logger) (http.Handler, error) {
	js := natsconn.NewLazy(cfg.NATS.Named("jsdlq-replay", log))
	st := store.New(db, store.WithLegacyCompletionsUntil(cfg.LegacyCompletionsUntil))
	return New(Config{}, Deps{
		Logger:    log,
		Store:     st,
		Policy:    st.PolicyLoader(log),
		Publisher: js,
		Notify: notify.FromConfig(st, cfg.Project, cfg.PubSubEmulatorHost, cfg.Notifications, js.JetStream, log,
			notify.AfterCommitOptions(cfg.Notifications)...),
	}), nil
}
