package store

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
)

func TestTenantKeyLifecycle(t *testing.T) {
	s, clock := newStore(t)
	ctx := testenv.Context(t)
	key, id, err := s.CreateTenantKey(ctx, "acme", "test")
	if err != nil {
		t.Fatalf("CreateTenantKey() = %v", err)
	}
	if !strings.HasPrefix(key, "jsdlq_"+id+"_") {
		t.Errorf("CreateTenantKey() = %q, id %q, want jsdlq_<id>_<secret>", key, id)
	}
	clock.Add(time.Second)
	key2, id2, err := s.CreateTenantKey(ctx, "acme", "test")
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := s.CreateTenantKey(ctx, "globex", "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ key, want string }{{key, "acme"}, {key2, "acme"}, {other, "globex"}} {
		if got, err := s.VerifyTenantKey(ctx, tc.key); err != nil || got != tc.want {
			t.Errorf("VerifyTenantKey(%.12s…) = %q, %v, want %q", tc.key, got, err, tc.want)
		}
	}

	// Only a digest is stored: the secret appears in no stored field.
	snap, err := s.fs.Collection(TenantKeys).Doc(id).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for field, v := range snap.Data() {
		if str, ok := v.(string); ok && strings.Contains(key, str) && len(str) > 16 {
			t.Errorf("stored field %s = %q is part of the key", field, str)
		}
	}

	keys, err := s.ListTenantKeys(ctx, "acme")
	if err != nil || len(keys) != 2 || keys[0].ID != id || keys[1].ID != id2 {
		t.Fatalf("ListTenantKeys(acme) = %+v, %v, want %s then %s", keys, err, id, id2)
	}

	// Another tenant's key id is not found, and stays in force.
	if err := s.RevokeTenantKey(ctx, "globex", id, "test"); !errors.Is(err, ErrNotFound) {
		t.Errorf("RevokeTenantKey(globex, acme's key) = %v, want ErrNotFound", err)
	}
	if err := s.RevokeTenantKey(ctx, "acme", "../x", "test"); !errors.Is(err, ErrNotFound) {
		t.Errorf("RevokeTenantKey(acme, ../x) = %v, want ErrNotFound", err)
	}
	// No tenant is not every tenant here: a revocation names the key's.
	if err := s.RevokeTenantKey(ctx, AllTenants, id, "test"); !errors.Is(err, ErrInvalid) {
		t.Errorf("RevokeTenantKey(AllTenants, acme's key) = %v, want ErrInvalid", err)
	}
	if got, err := s.VerifyTenantKey(ctx, key); err != nil || got != "acme" {
		t.Errorf("VerifyTenantKey(after refused revocations) = %q, %v, want acme", got, err)
	}
	if err := s.RevokeTenantKey(ctx, "acme", id, "test"); err != nil {
		t.Fatalf("RevokeTenantKey(acme, %s) = %v", id, err)
	}
	if _, err := s.VerifyTenantKey(ctx, key); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("VerifyTenantKey(revoked) = %v, want ErrUnknownKey", err)
	}
	if got, err := s.VerifyTenantKey(ctx, key2); err != nil || got != "acme" {
		t.Errorf("VerifyTenantKey(other acme key) = %q, %v, want acme", got, err)
	}
	n, err := s.RevokeTenantKeys(ctx, "acme", "test")
	if err != nil || n != 1 {
		t.Errorf("RevokeTenantKeys(acme) = %d, %v, want 1", n, err)
	}
	if _, err := s.VerifyTenantKey(ctx, key2); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("VerifyTenantKey(after revoking all) = %v, want ErrUnknownKey", err)
	}
	if got, err := s.VerifyTenantKey(ctx, other); err != nil || got != "globex" {
		t.Errorf("VerifyTenantKey(globex) after revoking acme = %q, %v", got, err)
	}
	keys, err = s.ListTenantKeys(ctx, "acme")
	if err != nil || len(keys) != 2 || !keys[0].Revoked || !keys[1].Revoked || keys[0].RevokedBy != "test" {
		t.Errorf("ListTenantKeys(acme) after revoking = %+v, %v, want both revoked by test", keys, err)
	}
}

func TestVerifyTenantKeyRefusesForgeries(t *testing.T) {
	s, _ := newStore(t)
	ctx := testenv.Context(t)
	key, id, err := s.CreateTenantKey(ctx, "acme", "test")
	if err != nil {
		t.Fatal(err)
	}
	secret := key[len("jsdlq_"+id+"_"):]
	flipped := []byte(secret)
	flipped[0] ^= 1
	if flipped[0] == '_' || flipped[0] == '-' {
		flipped[0] = 'A'
	}
	for name, forged := range map[string]string{
		"empty":          "",
		"no prefix":      key[len("jsdlq_"):],
		"other prefix":   "jsdlx_" + key[len("jsdlq_"):],
		"short":          key[:len(key)-1],
		"long":           key + "A",
		"wrong secret":   "jsdlq_" + id + "_" + string(flipped),
		"unknown id":     "jsdlq_0000000000000000_" + secret,
		"upper-case id":  "jsdlq_" + strings.ToUpper(id) + "_" + secret,
		"path id":        "jsdlq_../../../xx_xx_" + secret,
		"bad separator":  "jsdlq_" + id + "-" + secret,
		"padded secret":  "jsdlq_" + id + "_" + secret[:42] + "=",
		"space in front": " " + key,
	} {
		if got, err := s.VerifyTenantKey(ctx, forged); !errors.Is(err, ErrUnknownKey) {
			t.Errorf("VerifyTenantKey(%s) = %q, %v, want ErrUnknownKey", name, got, err)
		}
	}
	for _, bad := range []string{"", " acme", "a\nb", strings.Repeat("x", 300)} {
		if _, _, err := s.CreateTenantKey(ctx, bad, "test"); !errors.Is(err, ErrInvalid) {
			t.Errorf("CreateTenantKey(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}
