package deliver

import (
	"context"
	"io"
	"log/slog"
	"net/http"

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/httpfunc"
	"github.com/jsdlq/jsdlq/shared/secretbox"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

// FromEnv builds the deliver function from its environment (lookup:
// os.LookupEnv in production), logging to logs, behind its authentication
// (Cloud Tasks' OIDC token for WEBHOOK_SERVICE_ACCOUNT, audience
// WEBHOOK_DELIVER_URL): the Firestore client (the emulator when
// FIRESTORE_EMULATOR_HOST is set), the guarded HTTP client (its own URLs
// from the environment and the deployment's document) and the secret box
// (SECRETS_KMS_KEY, or the local stack's key file). Nothing connects before
// the first request. A configuration error is logged once
// and answered 500 on every request: Cloud Tasks keeps the task and
// retries it while the deployment is fixed.
func FromEnv(ctx context.Context, lookup config.Lookup, logs io.Writer) http.Handler {
	return httpfunc.New(ctx, logs, "deliver", func() (httpfunc.Loaded[config.Deliver], error) {
		cfg, err := config.LoadDeliver(lookup)
		return httpfunc.Loaded[config.Deliver]{Config: cfg, Common: cfg.Common, Auth: cfg.Auth}, err
	}, build)
}

func build(cfg config.Deliver, fs *firestore.Client, log *slog.Logger) (http.Handler, error) {
	box, err := secretbox.FromConfig(cfg.Secrets)
	if err != nil {
		return nil, err
	}
	st := store.New(fs)
	return New(Config{DisableAfter: cfg.Webhooks.DisableAfter, Timeout: cfg.Webhooks.Timeout}, Deps{
		Logger:  log,
		Store:   st,
		Guard:   cfg.Webhooks.Guard(webhook.WithOwnURLSource(st.OwnURLs)),
		Secrets: box,
	}), nil
}
