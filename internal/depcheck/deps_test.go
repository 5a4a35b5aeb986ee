// Package depcheck checks the module's import graph: what a deployed binary
// links and who may import a function.
package depcheck

import (
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const module = "github.com/jsdlq/jsdlq"

// notDeployed are the trees no deployed binary may link: test
// infrastructure (internal/), the emulators (emulator/), the tools around the
// local stack (tools/), the example agents (examples/) and DuckDB, the
// embedded SQL engine the forensics queries are tested on (cgo and a large
// static library; testOnly).
var notDeployed = []string{module + "/internal/", module + "/emulator/", module + "/tools/", module + "/examples/", duckDB}

// duckDB is the embedded SQL engine's module tree.
const duckDB = "github.com/duckdb/"

// localOnly are main packages under cmd/ that are part of the local stack,
// not deployed: the Cloud Tasks emulator is emulator/cloudtasks.
var localOnly = []string{module + "/cmd/cloudtasks-emulator"}

// mustDeploy are entry points the check must find, so that a renamed
// directory cannot make it pass by checking nothing.
var mustDeploy = []string{module, module + "/cmd/bridge", module + "/cmd/functions", module + "/cmd/dlqctl"}

// graph maps an import path to its non-test imports.
type graph map[string][]string

// goList runs `go list` with args and returns its non-empty output lines.
// `go test` puts its own toolchain first in PATH, so "go" is the one
// building this test.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	var lines []string
	for l := range strings.Lines(string(out)) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// importGraph lists pkgs (with -deps, everything they link) and their
// non-test imports.
func importGraph(t *testing.T, deps bool, pkgs ...string) graph {
	t.Helper()
	args := []string{"-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}
	if deps {
		args = append(args, "-deps")
	}
	g := graph{}
	for _, l := range goList(t, append(args, pkgs...)...) {
		f := strings.Fields(l)
		g[f[0]] = f[1:]
	}
	return g
}

// deployed returns the root package and every main package under cmd/
// except the local-only ones.
func deployed(t *testing.T) []string {
	t.Helper()
	entries := []string{module}
	for _, p := range goList(t, "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, module+"/cmd/...") {
		if !slices.Contains(localOnly, p) {
			entries = append(entries, p)
		}
	}
	for _, p := range mustDeploy {
		if !slices.Contains(entries, p) {
			t.Fatalf("deployed() = %v, want it to contain %s", entries, p)
		}
	}
	return entries
}

// firstReached walks g breadth-first from root and returns, for every
// package matching bad that is reached, the shortest import chain to it. It
// does not walk past a bad package: its own imports are the same offence.
func firstReached(g graph, root string, bad func(string) bool) map[string][]string {
	from := map[string]string{root: ""}
	found := map[string][]string{}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if bad(p) {
			var chain []string
			for q := p; q != ""; q = from[q] {
				chain = append(chain, q)
			}
			slices.Reverse(chain)
			found[p] = chain
			continue
		}
		for _, i := range g[p] {
			if _, seen := from[i]; !seen {
				from[i] = p
				queue = append(queue, i)
			}
		}
	}
	return found
}

func underAny(prefixes []string) func(string) bool {
	return func(p string) bool {
		return slices.ContainsFunc(prefixes, func(pre string) bool { return strings.HasPrefix(p, pre) })
	}
}

// No deployed binary links test infrastructure or the local stack: a test
// hook or an emulator in a binary is code that runs in production untested
// as production.
func TestDeployedBinariesLinkNoTestCode(t *testing.T) {
	entries := deployed(t)
	g := importGraph(t, true, entries...)
	for _, e := range entries {
		found := firstReached(g, e, underAny(notDeployed))
		for _, bad := range slices.Sorted(maps.Keys(found)) {
			t.Errorf("%s links %s: %s", e, bad, strings.Join(found[bad], " -> "))
		}
	}
}

// DuckDB is linked by tests only: no package of the module, whatever binary
// it ends in (the local stack's included), imports it outside a _test.go
// file, so only a test build pays for its cgo compile.
func TestDuckDBOnlyInTests(t *testing.T) {
	g := importGraph(t, true, module+"/...")
	for _, p := range slices.Sorted(maps.Keys(g)) {
		if strings.HasPrefix(p, module) {
			for _, i := range g[p] {
				if strings.HasPrefix(i, duckDB) {
					t.Errorf("%s imports %s outside its tests", p, i)
				}
			}
		}
	}
}

// The functions are leaves: only the deploy root wires them. What a
// function shares with other code (types, store operations) lives in
// shared/, so a function's change cannot silently change another binary.
// A function may import its own subpackages.
func TestOnlyRootImportsFunctions(t *testing.T) {
	const functions = module + "/functions/"
	g := importGraph(t, false, module+"/...")
	for _, p := range slices.Sorted(maps.Keys(g)) {
		if p == module {
			continue
		}
		for _, i := range g[p] {
			if !strings.HasPrefix(i, functions) || sameFunction(p, i) {
				continue
			}
			t.Errorf("%s imports %s; only %s may (test files aside)", p, i, module)
		}
	}
}

// sameFunction reports whether a and b are in one function's tree
// (functions/NAME/...).
func sameFunction(a, b string) bool {
	name := func(p string) string {
		rest, ok := strings.CutPrefix(p, module+"/functions/")
		if !ok {
			return ""
		}
		n, _, _ := strings.Cut(rest, "/")
		return n
	}
	return name(a) != "" && name(a) == name(b)
}

func TestFirstReached(t *testing.T) {
	g := graph{
		"root":  {"fmt", "a", "b"},
		"a":     {"bad/x"},
		"b":     {"c"},
		"c":     {"bad/y", "a"},
		"bad/x": {"bad/z"},
	}
	bad := underAny([]string{"bad/"})
	tests := []struct {
		root string
		want map[string][]string
	}{
		{"root", map[string][]string{
			"bad/x": {"root", "a", "bad/x"},
			"bad/y": {"root", "b", "c", "bad/y"},
		}},
		{"b", map[string][]string{
			"bad/x": {"b", "c", "a", "bad/x"},
			"bad/y": {"b", "c", "bad/y"},
		}},
		{"fmt", map[string][]string{}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, firstReached(g, tt.root, bad)); diff != "" {
			t.Errorf("firstReached(g, %q) mismatch (-want +got):\n%s", tt.root, diff)
		}
	}
}

func TestSameFunction(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{module + "/functions/replay", module + "/functions/replay/internal/x", true},
		{module + "/functions/replay/sub", module + "/functions/replay", true},
		{module + "/functions/replay", module + "/functions/reconcile", false},
		{module + "/functions/replayer", module + "/functions/replay", false},
		{module + "/cmd/dlqctl", module + "/functions/reconcile", false},
		{module, module + "/functions/replay", false},
	}
	for _, tt := range tests {
		if got := sameFunction(tt.a, tt.b); got != tt.want {
			t.Errorf("sameFunction(%q, %q) = %t, want %t", tt.a, tt.b, got, tt.want)
		}
	}
}
