package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// ModuleRoot is the directory of go.mod above the working directory: tests
// run in their package's directory, and those that build binaries, run npm
// or read docs/ and terraform/ need the repository's root.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("testenv: working directory: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testenv: no go.mod above the working directory")
		}
		dir = parent
	}
}
