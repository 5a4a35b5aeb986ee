// Package secrettest makes the secret boxes tests seal with: a real local
// key file, as make up makes the local stack's. It is a package of its own,
// not part of testenv, because shared/secretbox sits above shared/config,
// whose tests use testenv.
package secrettest

import (
	"path/filepath"
	"testing"

	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/secretbox"
)

// Box is a secretbox over a new local key file in the test's temporary
// directory; path is the file, for SECRETS_LOCAL_KEY_FILE.
func Box(t testing.TB) (box *secretbox.Box, path string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "secrets.key")
	if _, err := secretbox.CreateLocalKey(path); err != nil {
		t.Fatalf("secrettest: local secrets key: %v", err)
	}
	box, err := secretbox.FromConfig(config.Secrets{LocalKeyFile: path})
	if err != nil {
		t.Fatalf("secrettest: local secrets box: %v", err)
	}
	return box, path
}
