package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

// webhookUsage is the webhook command's part of the usage text.
const webhookUsage = `webhook add TENANT URL | list TENANT [--json] | remove TENANT ID | enable TENANT ID`

// cmdWebhook manages tenant webhooks. add prints the endpoint's signing
// secret alone on stdout, the only time it is shown: pipe it to the
// tenant's receiver configuration. A URL jsdlq must not call (not https,
// not public, one of jsdlq's own) is refused (exit 2). enable re-enables an
// endpoint disabled after its run of failures.
func (a *app) cmdWebhook(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("usage: dlqctl %s", webhookUsage)
	}
	sub, rest := args[0], args[1:]
	fs := newFlags("webhook " + sub)
	asJSON := fs.Bool("json", false, "JSON output (list)")
	by := fs.String("by", "", "who acts (default DLQCTL_ACTOR or dlqctl:$USER)")
	pos, err := parseFlags(fs, rest)
	if err != nil {
		return err
	}
	want, ok := map[string]int{"add": 2, "list": 1, "remove": 2, "enable": 2}[sub]
	if !ok {
		return usagef("unknown webhook command %q (usage: dlqctl %s)", sub, webhookUsage)
	}
	if len(pos) != want {
		return usagef("usage: dlqctl %s", webhookUsage)
	}
	tenant := pos[0]
	if a.scope != "" && tenant != a.scope {
		return usagef("this caller is limited to tenant %q; webhook %s %q is refused", a.scope, sub, tenant)
	}
	var target string
	if sub == "add" {
		// Checked before any client is made: a refused URL changes nothing.
		cfg := a.config().Webhooks
		g := webhook.NewGuard(webhook.WithLocal(cfg.Local), webhook.WithOwnURLs(cfg.OwnURLs...))
		u, err := g.Check(ctx, pos[1])
		if err != nil {
			return usagef("%v", err)
		}
		target = u.String()
	}
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	switch sub {
	case "add":
		w, err := st.CreateWebhook(ctx, tenant, target, a.actor(*by))
		if err != nil {
			return webhookError(err)
		}
		fmt.Fprintln(a.stdout, w.Secret.Reveal())
		fmt.Fprintf(a.stderr, "webhook %s added for tenant %s (%s); its signing secret is shown once, above\n", w.ID, tenant, w.URL)
		return nil
	case "list":
		hooks, err := st.ListWebhooks(ctx, tenant)
		if err != nil {
			return webhookError(err)
		}
		if *asJSON {
			return writeJSON(a.stdout, hooks)
		}
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "WEBHOOK_ID\tURL\tSTATE\tFAILURES\tDELIVERED\tLAST")
		for _, w := range hooks {
			state := "enabled"
			if !w.Enabled {
				state = "disabled " + w.DisabledAt.Format("2006-01-02T15:04:05Z")
			}
			last := "-"
			if !w.LastAttemptAt.IsZero() {
				last = w.LastAttemptAt.Format("2006-01-02T15:04:05Z")
				if w.LastError != "" {
					last += " " + w.LastError
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", w.ID, w.URL, state, w.Failures, w.Deliveries, last)
		}
		return tw.Flush()
	case "remove":
		if err := st.DeleteWebhook(ctx, tenant, pos[1]); err != nil {
			return webhookError(err)
		}
		fmt.Fprintf(a.stdout, "webhook %s of tenant %s removed\n", pos[1], tenant)
		return nil
	default: // enable
		if _, err := st.EnableWebhook(ctx, tenant, pos[1], a.actor(*by)); err != nil {
			return webhookError(err)
		}
		fmt.Fprintf(a.stdout, "webhook %s of tenant %s enabled\n", pos[1], tenant)
		return nil
	}
}

// webhookError turns a refused tenant name into a usage error (exit 2) and
// a refused endpoint (limit, duplicate) into a conflict (exit 4).
func webhookError(err error) error {
	switch {
	case errors.Is(err, store.ErrInvalid):
		return usagef("%v", err)
	case errors.Is(err, store.ErrWebhookRefused):
		return conflictError{err.Error()}
	}
	return err
}
