package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// ModuleRoot is the directory of go.mod above the working directory: tests
// run in their package's directory, and those that build binaries, run npm
// or read docs/ and terraform/ need the repository's root.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("testenv: working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testenv: no go.mod above the working directory")
		}
		dir = parent
	}
}

// ProvidersSchema is the `terraform providers schema -json` file the
// offline Terraform checks serve the real provider schemas from, looked for
// where tools/tfschema/validate.sh looks: TF_PROVIDERS_SCHEMA, else
// shared/terraform/providers-schema.json beside the checkout, where one file
// serves every checkout of a machine, read where it lies (no copy of it
// belongs in the repository; terraform/README.md says how to make it). The
// test is skipped, saying so, when there is none: the Terraform registry may
// not be reachable to make it.
func ProvidersSchema(t testing.TB) string {
	t.Helper()
	SkipShort(t, "terraform and the provider schema")
	path := os.Getenv("TF_PROVIDERS_SCHEMA")
	if path == "" {
		path = filepath.Join(ModuleRoot(t), "..", "shared", "terraform", "providers-schema.json")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatalf("testenv: provider schema path %q: %v", path, err)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Skipf("no provider schema file at %s (make it as terraform/README.md says, or set TF_PROVIDERS_SCHEMA)", abs)
	}
	return abs
}
