package deliver

import (
	"context"
	"io"
	"log/slog"
	"net/http"

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
	return httpfunc.New(ctx, logs, "deliver", func() (httpfunc.Loaded[env], error) {
		cfg, err := loadEnv(lookup)
		return httpfunc.Loaded[env]{Config: cfg, Common: cfg.Common, Auth: cfg.Auth}, err
	}, build)
}

func build(cfg env, db *store.Client, log *slog.Logger) (http.Handler, error) {
	box, err := secretbox.FromConfig(cfg.Secrets)
	if err != nil {
		return nil, err
	}
	st := store.New(db)
	return New(Config{DisableAfter: cfg.Webhooks.DisableAfter, Timeout: cfg.Webhooks.Timeout}, Deps{
		Logger:  log,
		Store:   st,
		Guard:   cfg.Webhooks.Guard(webhook.WithOwnURLSource(st.OwnURLs)),
		Secrets: box,
	}), nil
}

// env is the deliver function's configuration: it authenticates Cloud
// Tasks' calls by WEBHOOK_DELIVER_URL (its audience) and
// WEBHOOK_SERVICE_ACCOUNT (the one account allowed), not by AUTH_AUDIENCE
// and AUTH_ALLOWED_EMAILS, so the fan-out and the deliverer cannot
// disagree; AUTH_MODE applies as for every HTTP function.
type env struct {
	config.Common
	config.Auth
	Webhooks config.Webhooks
	// Secrets opens the endpoints' sealed signing secrets (required).
	Secrets config.Secrets
}

// loadEnv reads the deliver function's configuration on the shared
// config.Reader, every problem at once.
func loadEnv(lookup config.Lookup) (env, error) {
	r := config.NewReader(lookup)
	common := config.ReadCommon(r)
	d := env{Common: common, Webhooks: config.ReadWebhooks(r, common, true), Secrets: config.ReadSecrets(r, common, true)}
	d.Auth = config.Auth{Mode: r.OneOf("AUTH_MODE", config.AuthOIDC, config.AuthOIDC, config.AuthEmulator, config.AuthNone), Audience: d.Webhooks.DeliverURL}
	if d.Webhooks.ServiceAccount != "" {
		d.AllowedEmails = []string{d.Webhooks.ServiceAccount}
	}
	config.CheckAuth(r, common, d.Auth, config.AuthVars{Mode: "AUTH_MODE", Audience: "WEBHOOK_DELIVER_URL", Allowed: "WEBHOOK_SERVICE_ACCOUNT"})
	return d, r.Err()
}
