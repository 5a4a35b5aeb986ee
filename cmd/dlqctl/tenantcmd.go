package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// listStamp is how the lists of a tenant's keys and webhooks print times.
const listStamp = "2006-01-02T15:04:05Z"

// tenantCmd is one command line of a per-tenant command group (tenant-key,
// webhook): SUB TENANT [ARG], with --json (list) and --by.
type tenantCmd struct {
	sub, tenant string
	rest        []string // the arguments after the tenant
	asJSON      bool
	by          string // who acts
}

// parseTenantCmd reads a command line of group, whose usage line is usage
// and whose subcommands take arity[sub] arguments (at least, at most; the
// tenant included). A tenant-limited caller is refused another tenant
// before anything is read.
func (a *app) parseTenantCmd(group, usage string, arity map[string][2]int, args []string) (tenantCmd, error) {
	if len(args) == 0 {
		return tenantCmd{}, usagef("usage: dlqctl %s", usage)
	}
	c := tenantCmd{sub: args[0]}
	fs := newFlags(group + " " + c.sub)
	asJSON := fs.Bool("json", false, "JSON output (list)")
	by := fs.String("by", "", "who acts (default DLQCTL_ACTOR or dlqctl:$USER)")
	pos, err := parseFlags(fs, args[1:])
	if err != nil {
		return c, err
	}
	n, ok := arity[c.sub]
	if !ok {
		return c, usagef("unknown %s command %q (usage: dlqctl %s)", group, c.sub, usage)
	}
	if len(pos) < n[0] || len(pos) > n[1] {
		return c, usagef("usage: dlqctl %s", usage)
	}
	c.tenant, c.rest = pos[0], pos[1:]
	if _, err := event.ParseTenant(c.tenant); err != nil {
		return c, usagef("%s %s: %v", group, c.sub, err)
	}
	if a.scope != "" && c.tenant != a.scope {
		return c, usagef("this caller is limited to tenant %q; %s %s %q is refused", a.scope, group, c.sub, c.tenant)
	}
	c.asJSON, c.by = *asJSON, a.actor(*by).Name
	return c, nil
}

// tenantCmdError turns a refused tenant name into a usage error (exit 2)
// and a refused webhook endpoint (limit, duplicate) into a conflict
// (exit 4).
func tenantCmdError(err error) error {
	switch {
	case errors.Is(err, store.ErrInvalid):
		return usagef("%v", err)
	case errors.Is(err, store.ErrWebhookRefused):
		return conflictError{err.Error()}
	}
	return err
}

// printTenantList prints the list subcommand of a group: the tenant's items
// as read by list, as a JSON array with --json, else as a table under
// header, one line (tab-separated columns, each value escaped by termf)
// per item.
func printTenantList[T any](ctx context.Context, a *app, c tenantCmd, list func(context.Context, string) ([]T, error), header string, line func(T) string) error {
	items, err := list(ctx, c.tenant)
	if err != nil {
		return tenantCmdError(err)
	}
	if c.asJSON {
		return writeJSON(a.stdout, items)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, it := range items {
		fmt.Fprintln(tw, line(it))
	}
	return tw.Flush()
}
