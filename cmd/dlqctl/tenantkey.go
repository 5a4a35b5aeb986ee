package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/jsdlq/jsdlq/shared/store"
)

// tenantKeyUsage is the tenant-key command's part of the usage text.
const tenantKeyUsage = `tenant-key create TENANT | list TENANT [--json] | revoke TENANT [KEY_ID]`

// cmdTenantKey manages the tenant recovery API's keys (SPEC §16). create
// prints the key alone on stdout, the only time it is shown: pipe it to
// the tenant's secret store. revoke without KEY_ID revokes every key of the
// tenant; either is effective on the API's next request.
func (a *app) cmdTenantKey(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("usage: dlqctl %s", tenantKeyUsage)
	}
	sub, rest := args[0], args[1:]
	fs := newFlags("tenant-key " + sub)
	asJSON := fs.Bool("json", false, "JSON output (list)")
	by := fs.String("by", "", "who acts (default DLQCTL_ACTOR or dlqctl:$USER)")
	pos, err := parseFlags(fs, rest)
	if err != nil {
		return err
	}
	want := map[string][2]int{"create": {1, 1}, "list": {1, 1}, "revoke": {1, 2}}[sub]
	if want == [2]int{} {
		return usagef("unknown tenant-key command %q (usage: dlqctl %s)", sub, tenantKeyUsage)
	}
	if len(pos) < want[0] || len(pos) > want[1] {
		return usagef("usage: dlqctl %s", tenantKeyUsage)
	}
	tenant := pos[0]
	if a.scope != "" && tenant != a.scope {
		return usagef("this caller is limited to tenant %q; tenant-key %s %q is refused", a.scope, sub, tenant)
	}
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	switch sub {
	case "create":
		key, id, err := st.CreateTenantKey(ctx, tenant, a.actor(*by))
		if err != nil {
			return keyError(err)
		}
		fmt.Fprintln(a.stdout, key)
		fmt.Fprintf(a.stderr, "key %s created for tenant %s; it is shown once, above\n", id, tenant)
		return nil
	case "list":
		keys, err := st.ListTenantKeys(ctx, tenant)
		if err != nil {
			return keyError(err)
		}
		if *asJSON {
			return writeJSON(a.stdout, keys)
		}
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY_ID\tCREATED\tBY\tSTATE")
		for _, k := range keys {
			state := "active"
			if k.Revoked {
				state = fmt.Sprintf("revoked %s by %s", k.RevokedAt.Format("2006-01-02T15:04:05Z"), k.RevokedBy)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.ID, k.CreatedAt.Format("2006-01-02T15:04:05Z"), k.CreatedBy, state)
		}
		return tw.Flush()
	default: // revoke
		if len(pos) == 2 {
			if err := st.RevokeTenantKey(ctx, tenant, pos[1], a.actor(*by)); err != nil {
				return keyError(err)
			}
			fmt.Fprintf(a.stdout, "key %s of tenant %s revoked\n", pos[1], tenant)
			return nil
		}
		n, err := st.RevokeTenantKeys(ctx, tenant, a.actor(*by))
		if err != nil {
			return keyError(err)
		}
		fmt.Fprintf(a.stdout, "%d key(s) of tenant %s revoked\n", n, tenant)
		return nil
	}
}

// keyError turns a refused tenant name into a usage error (exit 2).
func keyError(err error) error {
	if errors.Is(err, store.ErrInvalid) {
		return usagef("%v", err)
	}
	return err
}
