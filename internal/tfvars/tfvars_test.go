package tfvars

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestDefaults(t *testing.T) {
	const vars = `
variable "stream" {
  type    = string
  default = "DLQ"
}
variable "streams" {
  type    = list(string)
  default = ["TASKS", "JOBS"]
}
variable "no_default" {
  type = string
}
variable "count" {
  default = 3
}
`
	path := filepath.Join(t.TempDir(), "variables.tf")
	if err := os.WriteFile(path, []byte(vars), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := Defaults(path)
	if err != nil {
		t.Fatalf("Defaults() = %v", err)
	}
	if got, err := String(d, "stream"); err != nil || got != "DLQ" {
		t.Errorf(`String("stream") = %q, %v; want "DLQ"`, got, err)
	}
	if got, err := Strings(d, "streams"); err != nil || !slices.Equal(got, []string{"TASKS", "JOBS"}) {
		t.Errorf(`Strings("streams") = %q, %v; want [TASKS JOBS]`, got, err)
	}
	if _, err := String(d, "no_default"); !errors.Is(err, ErrNoDefault) {
		t.Errorf(`String("no_default") = %v, want ErrNoDefault`, err)
	}
	if _, err := String(d, "count"); err == nil || !strings.Contains(err.Error(), "not a string") {
		t.Errorf(`String("count") = %v, want "not a string"`, err)
	}
	if _, err := Strings(d, "stream"); err == nil || !strings.Contains(err.Error(), "not a list") {
		t.Errorf(`Strings("stream") = %v, want "not a list"`, err)
	}
}

// A file Terraform could not parse, or a default that is not a constant,
// is an error naming the file, never an empty table.
func TestDefaultsBadInput(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"unclosed block", `variable "x" {`, "parse"},
		{"default refers to a variable", "variable \"x\" {\n  default = var.y\n}\n", `variable "x"`},
	} {
		path := filepath.Join(t.TempDir(), "variables.tf")
		if err := os.WriteFile(path, []byte(tc.src), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Defaults(path); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("Defaults(%s) = %v, want an error naming %s and %q", tc.name, err, path, tc.want)
		}
	}
	if _, err := Defaults(filepath.Join(t.TempDir(), "absent.tf")); err == nil {
		t.Error("Defaults(absent file) = nil error")
	}
}
