package main

import (
	"context"
	"fmt"

	"github.com/jsdlq/jsdlq/shared/store"
)

// webhookUsage is the webhook command's part of the usage text.
const webhookUsage = `webhook add TENANT URL | list TENANT [--json] | remove TENANT ID | enable TENANT ID`

// cmdWebhook manages tenant webhooks. add prints the endpoint's signing
// secret alone on stdout, the only time it is shown: pipe it to the
// tenant's receiver configuration. A URL jsdlq must not call (not https,
// not public, one of jsdlq's own) is refused (exit 2). enable re-enables an
// endpoint disabled after its run of failures.
func (a *app) cmdWebhook(ctx context.Context, args []string) error {
	c, err := a.parseTenantCmd("webhook", webhookUsage, map[string][2]int{"add": {2, 2}, "list": {1, 1}, "remove": {2, 2}, "enable": {2, 2}}, args)
	if err != nil {
		return err
	}
	tenant := c.tenant
	var target string
	if c.sub == "add" {
		// Checked before any client is made: a refused URL changes nothing.
		u, err := a.config().Webhooks.Guard().Check(ctx, c.rest[0])
		if err != nil {
			return usagef("%v", err)
		}
		target = u.String()
	}
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	switch c.sub {
	case "add":
		w, err := st.CreateWebhook(ctx, tenant, target, c.by)
		if err != nil {
			return tenantCmdError(err)
		}
		fmt.Fprintln(a.stdout, w.Secret.Reveal())
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
