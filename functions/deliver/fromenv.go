package deliver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/shared/auth"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

// FromEnv builds the deliver function from its environment (lookup:
// os.LookupEnv in production), logging to logs, behind its authentication
// (Cloud Tasks' OIDC token for WEBHOOK_SERVICE_ACCOUNT, audience
// WEBHOOK_DELIVER_URL): the Firestore client (the emulator when
// FIRESTORE_EMULATOR_HOST is set) and the guarded HTTP client. Nothing
// connects before the first request. A configuration error is logged once
// and answered 500 on every request: Cloud Tasks keeps the task and
// retries it while the deployment is fixed.
func FromEnv(ctx context.Context, lookup config.Lookup, logs io.Writer) http.Handler {
	return obs.HTTPFunction(logs, "deliver", func() (config.Deliver, string, error) {
		cfg, err := config.LoadDeliver(lookup)
		return cfg, cfg.Project, err
	}, func(cfg config.Deliver, log *slog.Logger) (http.Handler, error) {
		return build(ctx, cfg, log)
	})
}

func build(ctx context.Context, cfg config.Deliver, log *slog.Logger) (http.Handler, error) {
	a, err := auth.New(cfg.Auth, cfg.CloudTasksEmulatorHost, auth.WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("deliver: %w", err)
	}
	fs, err := firestore.NewClient(ctx, cfg.Project)
	if err != nil {
		return nil, fmt.Errorf("deliver: firestore client for project %s: %w", cfg.Project, err)
	}
	h := New(Config{DisableAfter: cfg.Webhooks.DisableAfter, Timeout: cfg.Webhooks.Timeout}, Deps{
		Logger: log,
		Store:  store.New(fs),
		Guard:  webhook.NewGuard(webhook.WithLocal(cfg.Webhooks.Local), webhook.WithOwnURLs(cfg.Webhooks.OwnURLs...)),
	})
	return a.Middleware(h), nil
}
