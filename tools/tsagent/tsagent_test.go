package tsagent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Prepare runs npm ci only for a lockfile node_modules was not installed
// from, and the build only for sources dist was not compiled from: a
// prepared package is prepared again without npm (the demo's fleet waits
// on it), a changed source or lockfile builds again. npm here is a stand-in
// that logs its arguments and makes what the build makes.
func TestPrepareSkipsWhatIsUpToDate(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, Dir)
	bin := t.TempDir()
	calls := filepath.Join(bin, "calls")
	npm := `#!/bin/sh
echo "$*" >> "` + calls + `"
if [ "$1" = run ]; then mkdir -p dist/examples dist/tools && touch ` + AgentScript + ` ` + CompatScript + `; fi
if [ "$1" = ci ]; then mkdir -p node_modules; fi
`
	for path, body := range map[string]string{
		filepath.Join(bin, "npm"):                    npm,
		filepath.Join(dir, "package-lock.json"):      `{"lockfileVersion":3}`,
		filepath.Join(dir, "package.json"):           `{"name":"@jsdlq/agentkit"}`,
		filepath.Join(dir, "tsconfig.json"):          `{}`,
		filepath.Join(dir, "src", "index.ts"):        `export const a = 1;`,
		filepath.Join(dir, "examples", "agent.ts"):   `import "../src/index.js";`,
		filepath.Join(dir, "node_modules", "x", "y"): `not a source`,
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	edit := func(rel, body string) func() {
		return func() {
			if err := os.WriteFile(filepath.Join(dir, rel), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name   string
		before func()
		want   string // npm's calls, one a line
	}{
		{"first", func() {}, "ci --no-audit --no-fund\nrun build\n"},
		{"nothing changed", func() {}, ""},
		{"a dependency's file changed (not a source)", edit("node_modules/x/y", "other"), ""},
		{"a source changed", edit("src/index.ts", `export const a = 2;`), "run build\n"},
		{"the lockfile changed", edit("package-lock.json", `{"lockfileVersion":3,"x":1}`), "ci --no-audit --no-fund\nrun build\n"},
		{"the build's output is gone", func() { os.Remove(filepath.Join(dir, AgentScript)) }, "run build\n"},
	}
	for _, tt := range tests {
		tt.before()
		os.Remove(calls)
		got, err := Prepare(context.Background(), root, &strings.Builder{})
		if err != nil || got != dir {
			t.Fatalf("%s: Prepare() = %q, %v; want %q", tt.name, got, err, dir)
		}
		b, _ := os.ReadFile(calls)
		if string(b) != tt.want {
			t.Errorf("%s: npm ran %q, want %q", tt.name, b, tt.want)
		}
	}
}
