// Command console serves jsdlq's operator web console and tenant recovery
// API (package console; docs/console.md). It runs as a Cloud Run service and
// locally (`go run ./cmd/console`, or `make up`). Configuration comes from
// the environment (docs/console.md); flags override it.
//
// On Google Cloud the operator UI sits behind IAP and verifies IAP's signed
// header (CONSOLE_AUTH=iap, CONSOLE_IAP_AUDIENCE), and gives each identity
// its role from CONSOLE_VIEWERS, CONSOLE_OPERATORS and CONSOLE_APPROVERS
// (group principals through the Cloud Identity Groups API); locally
// CONSOLE_AUTH=local names the operator (CONSOLE_OPERATOR) and its role
// (CONSOLE_ROLE), with the emulators only. With CONSOLE_TRIAGE_AGENTS the API
// also serves the triage endpoint to those identities.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"time"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/shared/auth"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/secretbox"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

func main() { obs.Command("console", run) }

func run(ctx context.Context, log *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("console", flag.ContinueOnError)
	port := fs.Int("port", 0, "listen port (PORT, else CONSOLE_PORT, else 8070)")
	host := fs.String("host", "", "listen address (default all interfaces; in local mode 127.0.0.1, and only loopback addresses are accepted)")
	operatorFlag := fs.String("operator", "", "who acts in local mode (CONSOLE_OPERATOR)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	lookup := os.LookupEnv
	if *operatorFlag != "" {
		lookup = func(k string) (string, bool) {
			if k == "CONSOLE_OPERATOR" {
				return *operatorFlag, true
			}
			return os.LookupEnv(k)
		}
	}
	cfg, err := console.LoadEnv(lookup)
	if err != nil {
		return err
	}
	if *port != 0 {
		cfg.Port = *port
	}
	if *host, err = cfg.ListenHost(*host); err != nil {
		return err
	}

	fsc, err := store.Open(ctx, cfg.Project)
	if err != nil {
		return err
	}
	defer fsc.Close()
	st := store.New(fsc, store.WithLegacyCompletionsUntil(cfg.LegacyCompletionsUntil))
	sched := tasks.New(cfg.Tasks)
	defer sched.Close()
	op := operator.New(st, sched, operator.WithRunner(sched))

	var operators console.Authenticator
	switch {
	case !cfg.UI:
		// The tenant API authenticates tenant keys, never operators.
	case cfg.Auth == console.AuthLocal:
		operators = console.LocalActor{Name: cfg.Operator, Role: cfg.Role}
		log.Warn("local mode: every request acts as the configured operator", "operator", cfg.Operator, "role", string(cfg.Role))
	default:
		roles, err := console.NewRoles(cfg.Principals, console.RoleOptions{Groups: console.NewCloudIdentityGroups(0), Log: log})
		if err != nil {
			return err
		}
		operators = console.NewRoleAuth(console.NewIAPAuth(cfg.IAPAudience, console.NewJWKSKeys(console.IAPKeysURL, nil), nil), roles)
	}
	opts := []console.Option{console.WithLogger(log), console.WithTaskState(sched), console.WithServe(cfg.UI, cfg.API),
		console.WithSecureCookies(cfg.OnGoogleCloud),
		console.WithWebhookGuard(cfg.Webhooks.Guard(webhook.WithOwnURLSource(st.OwnURLs))), console.WithHosts(cfg.Hosts(*host)...)}
	if cfg.Secrets.Set() {
		box, err := secretbox.FromConfig(cfg.Secrets)
		if err != nil {
			return err
		}
		defer box.Close()
		opts = append(opts, console.WithSecrets(box))
	}
	if len(cfg.Triage.AllowedEmails) > 0 {
		// Triage agents that do not run next to the store answer here.
		ta, err := auth.New(cfg.Triage, cfg.CloudTasksEmulatorHost, auth.WithLogger(log))
		if err != nil {
			return err
		}
		opts = append(opts, console.WithTriage(ta, op.TriageAnswerer()))
	}
	srv := console.New(st, op, operators, opts...)

	hs, err := obs.Listen(*host, cfg.Port, srv.Handler(), obs.Limits{Request: cfg.RequestTimeout})
	if err != nil {
		return err
	}
	bulkDone := make(chan struct{})
	if cfg.UI {
		// The operator UI instance works on the confirmed bulk redrives
		// (their state is in Firestore; see docs/console.md).
		go func() { defer close(bulkDone); srv.RunBulk(ctx) }()
	} else {
		close(bulkDone)
	}
	log.Info("console ready", "addr", hs.Addr(), "ui", cfg.UI, "api", cfg.API, "auth", cfg.Auth)
	select {
	case err := <-hs.Failed():
		return err
	case <-ctx.Done():
	}
	// Cloud Run allows ten seconds after SIGTERM: requests get eight, then
	// the bulk runner its last save and the release of its lease, so
	// another instance continues at once instead of after the lease.
	err = hs.Shutdown(8 * time.Second)
	select {
	case <-bulkDone:
	case <-time.After(2 * time.Second):
		log.Warn("bulk runner still stopping at exit; its run continues elsewhere once the lease expires")
	}
	return err
}
