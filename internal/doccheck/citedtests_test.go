package doccheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
)

// A doc that says which test holds a rule is only worth its word while the
// test exists: a renamed or deleted test leaves the page promising a check
// nobody runs. A test is cited as a backquoted name (`TestHostCheck`) after
// a backquoted _test.go file or package directory on the same line
// (`console/host_test.go` `TestHostCheck`, `functions/replay`
// `TestAuthentication`); the check below finds each such citation in the
// repository's Markdown and asks the Go parser whether that file or package
// declares the test.

// securityDoc is the threat model: every test it names holds a trust
// boundary, so every one must come with the file that declares it.
const securityDoc = "docs/security.md"

// backquoted is a code span of one line.
var backquoted = regexp.MustCompile("`([^`\n]+)`")

// testFuncName is what go test runs: Test, Fuzz or Benchmark and a name
// that does not start with a lower-case letter.
var testFuncName = regexp.MustCompile(`^(Test|Fuzz|Benchmark)([A-Z0-9_][A-Za-z0-9_]*)?$`)

// citation is a test a doc names: its line, the function, and the _test.go
// file or package directory the line names before it ("" when none).
type citation struct {
	Line int
	Path string
	Name string
}

// citedTests returns the tests data cites, in order. A code span is a path
// when isPath says so (a _test.go file, a package directory of the
// repository); each test name takes the nearest path before it on its line.
func citedTests(data []byte, isPath func(string) bool) []citation {
	var out []citation
	for i, line := range bytes.Split(data, []byte("\n")) {
		where := ""
		for _, m := range backquoted.FindAllSubmatch(line, -1) {
			span := string(m[1])
			switch {
			case testFuncName.MatchString(span):
				out = append(out, citation{Line: i + 1, Path: where, Name: span})
			case isPath(span):
				where = span
			}
		}
	}
	return out
}

// repoPath reports whether span names a _test.go file or a directory of
// the repository at root, as a doc writes it (slash-separated, relative,
// without ./).
func repoPath(root string) func(string) bool {
	return func(span string) bool {
		if span != path.Clean(span) || path.IsAbs(span) || strings.HasPrefix(span, "..") || strings.ContainsAny(span, " \t*") {
			return false
		}
		if strings.HasSuffix(span, "_test.go") {
			return true
		}
		fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(span)))
		return err == nil && fi.IsDir()
	}
}

// declaredTests returns the test functions (Test, Fuzz, Benchmark; not
// methods) declared in the _test.go file rel, or in every _test.go file of
// the directory rel, under root.
func declaredTests(root, rel string) (map[string]bool, error) {
	files := []string{filepath.Join(root, filepath.FromSlash(rel))}
	if !strings.HasSuffix(rel, "_test.go") {
		var err error
		if files, err = filepath.Glob(filepath.Join(files[0], "*_test.go")); err != nil {
			return nil, err
		}
	}
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", f, err)
		}
		for _, d := range file.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && testFuncName.MatchString(fn.Name.Name) {
				out[fn.Name.Name] = true
			}
		}
	}
	return out, nil
}

// TestDocsCiteTestsThatExist fails for each test a Markdown file of the
// repository cites in a file or package that does not declare it, and for
// each test docs/security.md names without its file or package.
func TestDocsCiteTestsThatExist(t *testing.T) {
	root := testenv.ModuleRoot(t)
	isPath := repoPath(root)
	declared := map[string]map[string]bool{}
	securityCites := 0
	eachFile(t, func(rel string, data []byte) {
		if !strings.HasSuffix(rel, ".md") {
			return
		}
		for _, c := range citedTests(data, isPath) {
			if c.Path == "" {
				if rel == securityDoc {
					t.Errorf("%s:%d cites `%s` without a _test.go file or package before it on its line; name where it is declared (`console/host_test.go` `%s`)", rel, c.Line, c.Name, c.Name)
				}
				continue
			}
			if rel == securityDoc {
				securityCites++
			}
			tests, ok := declared[c.Path]
			if !ok {
				var err error
				if tests, err = declaredTests(root, c.Path); err != nil {
					t.Errorf("%s:%d cites `%s` in %s: %v", rel, c.Line, c.Name, c.Path, err)
				}
				declared[c.Path] = tests
			}
			if !tests[c.Name] {
				t.Errorf("%s:%d cites `%s` in %s, which declares no such test (renamed or removed?)", rel, c.Line, c.Name, c.Path)
			}
		}
	})
	// The threat model names a test for every boundary: a page that lost
	// them, or a parser that stopped finding them, must not pass quietly.
	if securityCites < 50 {
		t.Errorf("%s cites %d tests with their files, want every boundary's (at least 50)", securityDoc, securityCites)
	}
}

// citedTests pairs each test name with the nearest path before it on its
// line, and only names go test runs.
func TestCitedTests(t *testing.T) {
	isPath := func(s string) bool {
		return strings.HasSuffix(s, "_test.go") || s == "console" || s == "functions/replay"
	}
	for _, tc := range []struct {
		in   string
		want []citation
	}{
		{"`console/host_test.go` `TestHostCheck`, `TestHosts`", []citation{{1, "console/host_test.go", "TestHostCheck"}, {1, "console/host_test.go", "TestHosts"}}},
		{"`functions/replay` `TestAuthentication`; `a/b_test.go`: `FuzzReadTask`", []citation{{1, "functions/replay", "TestAuthentication"}, {1, "a/b_test.go", "FuzzReadTask"}}},
		{"`TestIamPermissions` is an RPC", []citation{{1, "", "TestIamPermissions"}}},
		{"`console`\n`TestHostCheck`", []citation{{2, "", "TestHostCheck"}}},
		{"`console` `BenchmarkPages` `Test` `Testing` `TestMain` `Tester_x`", []citation{{1, "console", "BenchmarkPages"}, {1, "console", "Test"}, {1, "console", "TestMain"}}},
		{"`console/host.go` `TestHostCheck`", []citation{{1, "", "TestHostCheck"}}},
		{"`go test -run TestHostCheck ./console/`", nil},
	} {
		if diff := cmp.Diff(tc.want, citedTests([]byte(tc.in), isPath)); diff != "" {
			t.Errorf("citedTests(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

// repoPath takes what a doc writes for a test file or package and nothing
// that only looks like one.
func TestRepoPath(t *testing.T) {
	isPath := repoPath(testenv.ModuleRoot(t))
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"console", true},
		{"shared/event", true},
		{"console/host_test.go", true},
		{"console/host.go", false},
		{"./console", false},
		{"console/", false},
		{"../console", false},
		{"/console", false},
		{"no/such/dir", false},
		{"shared/*", false},
		{"go test ./console", false},
	} {
		if got := isPath(tc.in); got != tc.want {
			t.Errorf("repoPath(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// declaredTests finds top-level test functions of a file or a package,
// never methods or helpers.
func TestDeclaredTests(t *testing.T) {
	dir := t.TempDir()
	src := "package p\n\nimport \"testing\"\n\n" +
		"func TestA(t *testing.T) {}\nfunc FuzzB(f *testing.F) {}\nfunc BenchmarkC(b *testing.B) {}\n" +
		"func helper() {}\ntype s struct{}\nfunc (s) TestMethod(t *testing.T) {}\n"
	if err := os.WriteFile(filepath.Join(dir, "a_test.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "b_test.go"), []byte("package p\n\nimport \"testing\"\n\nfunc TestD(t *testing.T) {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "c.go"), []byte("package p\n\nfunc TestNotATestFile() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rel  string
		want map[string]bool
	}{
		{"a_test.go", map[string]bool{"TestA": true, "FuzzB": true, "BenchmarkC": true}},
		{".", map[string]bool{"TestA": true, "FuzzB": true, "BenchmarkC": true, "TestD": true}},
	} {
		got, err := declaredTests(dir, tc.rel)
		if err != nil {
			t.Fatalf("declaredTests(%s) = %v", tc.rel, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("declaredTests(%s) (-want +got):\n%s", tc.rel, diff)
		}
	}
	if _, err := declaredTests(dir, "missing_test.go"); err == nil {
		t.Errorf("declaredTests(missing_test.go) = nil error, want one")
	}
}
