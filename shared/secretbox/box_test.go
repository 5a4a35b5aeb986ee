package secretbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/secretbox"
)

// localBox is a box over a new local key file in a temporary directory,
// the way make up makes one.
func localBox(t *testing.T) (*secretbox.Box, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), ".local", "secrets.key")
	if created, err := secretbox.CreateLocalKey(path); err != nil || !created {
		t.Fatalf("CreateLocalKey(%s) = %v, %v", path, created, err)
	}
	box, err := secretbox.FromConfig(config.Secrets{LocalKeyFile: path})
	if err != nil {
		t.Fatalf("FromConfig(local key) = %v", err)
	}
	return box, path
}

// TestLocalSealOpen: the stored form is not the secret and opens only
// with the associated data it was sealed with; a tampered one or one
// sealed with another key does not open.
func TestLocalSealOpen(t *testing.T) {
	ctx := context.Background()
	box, _ := localBox(t)
	secret := []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	aad := []byte("acme/0a1b")
	sealed, err := box.Seal(ctx, secret, aad)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, secret) || bytes.Contains(sealed, secret[6:]) {
		t.Errorf("Seal() = %s contains the secret", sealed)
	}
	again, _ := box.Seal(ctx, secret, aad)
	if bytes.Equal(sealed, again) {
		t.Errorf("two seals of one secret are equal: every seal has its own data key and nonce")
	}
	if got, err := box.Open(ctx, sealed, aad); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Open(sealed) = %q, %v, want the secret", got, err)
	}

	tamper := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(sealed, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	flip := func(field string) func(map[string]any) {
		return func(m map[string]any) {
			s := m[field].(string)
			r := []byte(s)
			if r[0] == 'A' {
				r[0] = 'B'
			} else {
				r[0] = 'A'
			}
			m[field] = string(r)
		}
	}
	other, _ := localBox(t)
	tests := []struct {
		name   string
		box    *secretbox.Box
		sealed []byte
		aad    []byte
		want   error
	}{
		{"another record", box, sealed, []byte("globex/0a1b"), secretbox.ErrOpen},
		{"another webhook", box, sealed, []byte("acme/0a1c"), secretbox.ErrOpen},
		{"no associated data", box, sealed, nil, secretbox.ErrOpen},
		{"ciphertext tampered", box, tamper(flip("ct")), aad, secretbox.ErrOpen},
		{"data key tampered", box, tamper(flip("dek")), aad, secretbox.ErrOpen},
		{"nonce tampered", box, tamper(flip("nonce")), aad, secretbox.ErrOpen},
		{"unknown version", box, tamper(func(m map[string]any) { m["v"] = 2 }), aad, secretbox.ErrOpen},
		{"another key", other, sealed, aad, secretbox.ErrKey},
		{"the secret in clear", box, secret, aad, secretbox.ErrOpen},
		{"empty", box, nil, aad, secretbox.ErrOpen},
	}
	for _, tt := range tests {
		got, err := tt.box.Open(ctx, tt.sealed, tt.aad)
		if !errors.Is(err, tt.want) || got != nil {
			t.Errorf("%s: Open() = %q, %v, want %v", tt.name, got, err, tt.want)
		}
	}
}

// TestLocalKeyFile: make up's key file is created once (never replaced:
// the secrets sealed with it stay readable), readable by its owner only,
// and a key file others may read, or that is no key, is refused.
func TestLocalKeyFile(t *testing.T) {
	ctx := context.Background()
	box, path := localBox(t)
	sealed, _ := box.Seal(ctx, []byte("s"), []byte("a"))
	if created, err := secretbox.CreateLocalKey(path); err != nil || created {
		t.Errorf("CreateLocalKey(existing) = %v, %v, want false, nil", created, err)
	}
	reread, err := secretbox.LoadLocalKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := secretbox.New(reread).Open(ctx, sealed, []byte("a")); err != nil || string(got) != "s" {
		t.Errorf("Open() with the key read again = %q, %v", got, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode = %04o, want 0600", fi.Mode().Perm())
	}
	// The key never prints.
	var logs strings.Builder
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "key", reread)
	raw, _ := os.ReadFile(path)
	for _, s := range []string{logs.String(), fmt.Sprint(reread), fmt.Sprintf("%v %s", reread, reread)} {
		if strings.Contains(s, strings.TrimSpace(string(raw))) || !strings.Contains(s, secretbox.LocalKeyPrefix) {
			t.Errorf("a formatted local key shows %q, want its name only", s)
		}
	}

	dir := t.TempDir()
	for name, file := range map[string]struct {
		content string
		mode    os.FileMode
	}{
		"readable by others": {strings.TrimSpace(string(raw)), 0o644},
		"not base64":         {"not a key!", 0o600},
		"short":              {"c2hvcnQ=", 0o600},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(p, []byte(file.content), file.mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, file.mode)
		if _, err := secretbox.LoadLocalKey(p); !errors.Is(err, secretbox.ErrKey) {
			t.Errorf("LoadLocalKey(%s) = %v, want ErrKey", name, err)
		}
	}
	if _, err := secretbox.LoadLocalKey(filepath.Join(dir, "missing")); !errors.Is(err, secretbox.ErrKey) {
		t.Errorf("LoadLocalKey(missing) = %v, want ErrKey", err)
	}
	if _, err := secretbox.FromConfig(config.Secrets{}); !errors.Is(err, secretbox.ErrKey) {
		t.Errorf("FromConfig(none) = %v, want ErrKey", err)
	}
}
