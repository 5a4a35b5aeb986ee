package main

import (
	"strings"
	"testing"

	"github.com/jsdlq/jsdlq/internal/testenv"
)

func TestTenantKeyCommands(t *testing.T) {
	e := newEnv(t)
	ctx := testenv.Context(t)
	vars := map[string]string{"DLQCTL_ACTOR": "ops@example.com"}

	code, out, _ := e.run(vars, "tenant-key", "create", "acme")
	key := strings.TrimSpace(out)
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.HasPrefix(key, "jsdlq_") {
		t.Fatalf("tenant-key create acme = %d, stdout %q, want the key alone on one line", code, out)
	}
	if got, err := e.st.VerifyTenantKey(ctx, key); err != nil || got != "acme" {
		t.Fatalf("VerifyTenantKey(created key) = %q, %v, want acme", got, err)
	}
	if code, _, _ := e.run(vars, "tenant-key", "create", "acme"); code != 0 {
		t.Fatalf("second create = %d", code)
	}
	id := key[len("jsdlq_") : len("jsdlq_")+16]

	code, out, _ = e.run(vars, "tenant-key", "list", "acme")
	if code != 0 || !strings.Contains(out, id) || strings.Count(out, "active") != 2 || strings.Contains(out, key[23:]) {
		t.Errorf("tenant-key list acme = %d, %q, want two active keys, %s among them, no secret", code, out, id)
	}
	// A tenant-limited caller manages only its own tenant's keys.
	if code, _, _ := e.run(map[string]string{"DLQCTL_TENANT": "globex"}, "tenant-key", "list", "acme"); code != exitUsage {
		t.Errorf("tenant-key list acme as globex = %d, want %d", code, exitUsage)
	}
	if code, _, _ := e.run(vars, "tenant-key", "revoke", "globex", id); code != exitNotFound {
		t.Errorf("tenant-key revoke globex <acme's key> = %d, want %d", code, exitNotFound)
	}
	if code, out, _ := e.run(vars, "tenant-key", "revoke", "acme", id); code != 0 {
		t.Fatalf("tenant-key revoke acme %s = %d, %q", id, code, out)
	}
	if _, err := e.st.VerifyTenantKey(ctx, key); err == nil {
		t.Errorf("VerifyTenantKey(revoked key) = nil, want refused")
	}
	code, out, _ = e.run(vars, "tenant-key", "revoke", "acme")
	if code != 0 || !strings.HasPrefix(out, "1 key(s)") {
		t.Errorf("tenant-key revoke acme = %d, %q, want 1 key revoked", code, out)
	}
	code, out, _ = e.run(vars, "tenant-key", "list", "acme", "--json")
	if code != 0 || strings.Count(out, `"revoked": true`) != 2 || !strings.Contains(out, `"revoked_by": "ops@example.com"`) {
		t.Errorf("tenant-key list --json = %d, %q, want both revoked by ops@example.com", code, out)
	}
	for _, args := range [][]string{
		{"tenant-key"}, {"tenant-key", "rotate", "acme"}, {"tenant-key", "create"},
		{"tenant-key", "create", "a", "b"}, {"tenant-key", "create", " acme"},
	} {
		if code, _, _ := e.run(vars, args...); code != exitUsage {
			t.Errorf("dlqctl %q = %d, want %d", args, code, exitUsage)
		}
	}
}
