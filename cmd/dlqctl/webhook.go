package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/jsdlq/jsdlq/shared/hooksecret"
	"github.com/jsdlq/jsdlq/shared/secretbox"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

// webhookUsage is the webhook command's part of the usage text.
const webhookUsage = `webhook add TENANT URL | list TENANT [--json] | remove TENANT ID | enable TENANT ID | reseal [--json]`

// cmdWebhook manages tenant webhooks. add prints the endpoint's signing
// secret alone on stdout, the only time it is shown: pipe it to the
// tenant's receiver configuration; it is stored sealed (SECRETS_KMS_KEY).
// A URL jsdlq must not call (not https, not public, one of jsdlq's own) is
// refused (exit 2). enable re-enables an endpoint disabled after its run
// of failures. reseal seals every clear secret and rewraps every sealed
// one with the current key (docs/webhooks.md, "The signing secret at
// rest").
func (a *app) cmdWebhook(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "reseal" {
		return a.resealWebhooks(ctx, args[1:])
	}
	c, err := a.parseTenantCmd("webhook", webhookUsage, map[string][2]int{"add": {2, 2}, "list": {1, 1}, "remove": {2, 2}, "enable": {2, 2}}, args)
	if err != nil {
		return err
	}
	tenant := c.tenant
	if c.sub == "add" {
		// Checked before any client is made: a refused URL changes nothing.
		if _, err := a.config().Webhooks.Guard().Parse(c.rest[0]); err != nil {
			return usagef("%v", err)
		}
	}
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	switch c.sub {
	case "add":
		box, err := a.secrets()
		if err != nil {
			return err
		}
		// The full check: the deployment's own URLs and what the name
		// resolves to.
		u, err := a.config().Webhooks.Guard(webhook.WithOwnURLSource(st.OwnURLs)).Check(ctx, c.rest[0])
		if errors.Is(err, webhook.ErrRefusedURL) {
			return usagef("%v", err)
		}
		if err != nil {
			return err
		}
		w, sec, err := hooksecret.Create(ctx, st, box, tenant, u.String(), c.by)
		if err != nil {
			return tenantCmdError(err)
		}
		fmt.Fprintln(a.stdout, sec.Reveal())
		outf(a.stderr, "webhook %s added for tenant %s (%s); its signing secret is shown once, above\n", w.ID, tenant, w.URL)
		return nil
	case "list":
		return printTenantList(ctx, a, c, st.ListWebhooks, "WEBHOOK_ID\tURL\tSTATE\tFAILURES\tDELIVERED\tLAST", func(w *store.Webhook) string {
			state := "enabled"
			if !w.Enabled {
				state = "disabled " + w.DisabledAt.Format(listStamp)
			}
			last := "-"
			if !w.LastAttemptAt.IsZero() {
				last = w.LastAttemptAt.Format(listStamp)
				if w.LastError != "" {
					last += " " + w.LastError
				}
			}
			return termf("%s\t%s\t%s\t%d\t%d\t%s", w.ID, w.URL, state, w.Failures, w.Deliveries, last)
		})
	case "remove":
		if err := st.DeleteWebhook(ctx, tenant, c.rest[0]); err != nil {
			return tenantCmdError(err)
		}
		outf(a.stdout, "webhook %s of tenant %s removed\n", c.rest[0], tenant)
		return nil
	default: // enable
		if _, err := st.EnableWebhook(ctx, tenant, c.rest[0], c.by); err != nil {
			return tenantCmdError(err)
		}
		outf(a.stdout, "webhook %s of tenant %s enabled\n", c.rest[0], tenant)
		return nil
	}
}

// resealWebhooks is webhook reseal: every tenant's endpoints, so a caller
// limited to one tenant is refused. Endpoints that fail are listed and the
// exit is 5 (partial); running it again is harmless.
func (a *app) resealWebhooks(ctx context.Context, args []string) error {
	fs := newFlags("webhook reseal")
	asJSON := fs.Bool("json", false, "JSON output")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("usage: dlqctl webhook reseal [--json]")
	}
	if a.scope != "" {
		return usagef("this caller is limited to tenant %q; webhook reseal acts on every tenant's endpoints", a.scope)
	}
	box, err := a.secrets()
	if err != nil {
		return err
	}
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	r, err := hooksecret.Reseal(ctx, st, box)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := writeJSON(a.stdout, r); err != nil {
			return err
		}
	} else {
		outf(a.stdout, "sealed %d clear secrets, rewrapped %d with %s, %d changed meanwhile (run again to include them), %d failed\n",
			r.Sealed, r.Rewrapped, box.Key(), r.Changed, len(r.Failed))
		for _, id := range slices.Sorted(maps.Keys(r.Failed)) {
			outf(a.stdout, "  %s: %s\n", id, r.Failed[id])
		}
	}
	if len(r.Failed) > 0 {
		return partialError{fmt.Sprintf("%d webhooks not resealed", len(r.Failed))}
	}
	return nil
}

// secrets returns the box that seals webhook secrets, made on first use:
// Cloud KMS (SECRETS_KMS_KEY), or with the local stack its key file.
func (a *app) secrets() (*secretbox.Box, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.box != nil {
		return a.box, nil
	}
	cfg := a.config().Secrets
	if !cfg.Set() {
		return nil, usagef("webhook secrets are stored sealed: set SECRETS_KMS_KEY (Terraform's output secrets_kms_key) or, with the local stack, SECRETS_LOCAL_KEY_FILE (eval \"$(make -s env)\")")
	}
	box, err := secretbox.FromConfig(cfg)
	if err != nil {
		return nil, err
	}
	a.box = box
	a.closers = append(a.closers, box.Close)
	return box, nil
}
