package main

import (
	"context"
	"fmt"

	"github.com/jsdlq/jsdlq/shared/store"
)

// tenantKeyUsage is the tenant-key command's part of the usage text.
const tenantKeyUsage = `tenant-key create TENANT | list TENANT [--json] | revoke TENANT [KEY_ID]`

// cmdTenantKey manages the tenant recovery API's keys (docs/console.md, "The
// tenant recovery API"). create prints the key alone on stdout, the only time
// it is shown: pipe it to the tenant's secret store. revoke without KEY_ID
// revokes every key of the tenant; either is effective on the API's next
// request.
func (a *app) cmdTenantKey(ctx context.Context, args []string) error {
	c, err := a.parseTenantCmd("tenant-key", tenantKeyUsage, map[string][2]int{"create": {1, 1}, "list": {1, 1}, "revoke": {1, 2}}, args)
	if err != nil {
		return err
	}
	tenant := c.tenant
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	switch c.sub {
	case "create":
		key, id, err := st.CreateTenantKey(ctx, tenant, c.by)
		if err != nil {
			return tenantCmdError(err)
		}
		fmt.Fprintln(a.stdout, key)
		outf(a.stderr, "key %s created for tenant %s; it is shown once, above\n", id, tenant)
		return nil
	case "list":
		return printTenantList(ctx, a, c, st.ListTenantKeys, "KEY_ID\tCREATED\tBY\tSTATE", func(k store.TenantKey) string {
			state := "active"
			if k.Revoked {
				state = "revoked " + k.RevokedAt.Format(listStamp) + " by " + k.RevokedBy
			}
			return termf("%s\t%s\t%s\t%s", k.ID, k.CreatedAt.Format(listStamp), k.CreatedBy, state)
		})
	default: // revoke
		if len(c.rest) == 1 {
			if err := st.RevokeTenantKey(ctx, tenant, c.rest[0], c.by); err != nil {
				return tenantCmdError(err)
			}
			outf(a.stdout, "key %s of tenant %s revoked\n", c.rest[0], tenant)
			return nil
		}
		n, err := st.RevokeTenantKeys(ctx, tenant, c.by)
		if err != nil {
			return tenantCmdError(err)
		}
		outf(a.stdout, "%d key(s) of tenant %s revoked\n", n, tenant)
		return nil
	}
}
