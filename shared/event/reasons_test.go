package event_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// registry is the default policy's reasons: the registry of reason codes.
func registry(t *testing.T) map[string]bool {
	t.Helper()
	var doc struct {
		Reasons map[string]string `yaml:"reasons"`
	}
	if err := yaml.Unmarshal(triage.DefaultYAML(), &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for code := range doc.Reasons {
		out[code] = true
	}
	return out
}

// reasonConstants are the Reason* string constants of reasons.go.
func reasonConstants(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "reasons.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Values) != len(vs.Names) {
			return true
		}
		for i, name := range vs.Names {
			lit, ok := vs.Values[i].(*ast.BasicLit)
			if ok && lit.Kind == token.STRING && strings.HasPrefix(name.Name, "Reason") {
				v, _ := strconv.Unquote(lit.Value)
				out[name.Name] = v
			}
		}
		return true
	})
	return out
}

// The registry (the default policy's reasons) and the Go constants are the
// same codes, and the server's TERM reasons are codes of it.
func TestReasonConstantsAreTheRegistry(t *testing.T) {
	reg := registry(t)
	consts := reasonConstants(t)
	got := map[string]bool{}
	for name, code := range consts {
		if got[code] {
			t.Errorf("code %q has two constants (one is %s)", code, name)
		}
		got[code] = true
	}
	if diff := cmp.Diff(slices.Sorted(maps.Keys(reg)), slices.Sorted(maps.Keys(got))); diff != "" {
		t.Errorf("reason constants (shared/event/reasons.go) against the registry (shared/triage/default.yaml reasons) (-registry +constants):\n%s", diff)
	}
	for code := range event.ServerTermReasons {
		if !reg[code] {
			t.Errorf("ServerTermReasons names %q, not in the registry", code)
		}
	}
}

// Every reason code jsdlq's own code emits is in the registry: the codes of
// the failure records its Go code writes (a Failure literal's Code, the
// example agent's code("…")) and the TypeScript kit's code constants.
// Constants are held to the registry by TestReasonConstantsAreTheRegistry.
func TestEmittedReasonCodesAreRegistered(t *testing.T) {
	reg := registry(t)
	root := filepath.Join("..", "..")
	found := 0
	check := func(where, code string) {
		found++
		if !reg[code] {
			t.Errorf("%s emits reason code %q, which the registry (shared/triage/default.yaml reasons) does not name", where, code)
		}
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				if !strings.HasSuffix(typeName(n.Type), "Failure") {
					return true
				}
				for _, el := range n.Elts {
					kv, ok := el.(*ast.KeyValueExpr)
					if key, _ := kv.Key.(*ast.Ident); ok && key != nil && key.Name == "Code" {
						if code, ok := stringLit(kv.Value); ok {
							check(path, code)
						}
					}
				}
			case *ast.CallExpr:
				if fn, ok := n.Fun.(*ast.Ident); ok && fn.Name == "code" && len(n.Args) == 1 {
					if code, ok := stringLit(n.Args[0]); ok {
						check(path, code)
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tsConst := regexp.MustCompile(`export const (?:Code|Reason)\w+ = "([a-z0-9_]+)"`)
	ts, err := filepath.Glob(filepath.Join(root, "clients", "typescript", "src", "*.ts"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range ts {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range tsConst.FindAllStringSubmatch(string(b), -1) {
			check(path, m[1])
		}
	}
	// The example agent alone emits several: a scan that finds none is
	// broken, not clean.
	if found < 5 {
		t.Errorf("found %d emitted reason codes, want the example agent's and the kit's at least", found)
	}
}

func typeName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}
