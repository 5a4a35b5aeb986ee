package doccheck

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jsdlq/jsdlq/internal/testenv"
)

// citations returns where data cites the product spec: its name in capitals
// as a word, its file name (any case), or "spec" (any case) followed by a
// section sign. The spec lives with the team that wrote jsdlq, not in this
// repository: a reader of the code, a godoc page or the default policy cannot
// open it, so a citation must name the docs/ page that documents the concept.
// A word that merely contains the name (HTTP_METHOD_UNSPECIFIED) is not a
// citation. It scans with bytes.Index rather than a regular expression because
// it reads every file of the repository on every run.
func citations(data []byte) []int {
	lower := bytes.Clone(data)
	for i, c := range lower {
		if 'A' <= c && c <= 'Z' {
			lower[i] = c + 'a' - 'A'
		}
	}
	var at []int
	for i := 0; ; i += 4 {
		n := bytes.Index(lower[i:], []byte("spec"))
		if n < 0 {
			return at
		}
		i += n
		if i > 0 && isWord(data[i-1]) {
			continue
		}
		rest := lower[i+4:]
		switch {
		case bytes.Equal(data[i:i+4], bytes.ToUpper(data[i:i+4])) && (len(rest) == 0 || !isWord(rest[0])):
		case bytes.HasPrefix(rest, []byte(".md")) && (len(rest) == 3 || !isWord(rest[3])):
		case bytes.HasPrefix(bytes.TrimLeft(rest, " \t\r\n"), []byte("§")):
		default:
			continue
		}
		at = append(at, i)
	}
}

func isWord(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// TestNothingCitesTheSpec fails for each line of the repository's files
// (eachFile) that cites the spec.
func TestNothingCitesTheSpec(t *testing.T) {
	eachFile(t, func(rel string, data []byte) {
		for _, at := range citations(data) {
			line := 1 + bytes.Count(data[:at], []byte("\n"))
			t.Errorf("%s:%d cites the product spec, a document users never see: %q; name the docs/ page that documents the concept, or state the rule itself", rel, line, excerpt(data, at))
		}
	})
}

// schemaDocument is how `terraform providers schema -json` output opens its
// schemas; Go code that decodes the format names the key in a struct tag
// (`json:"provider_schemas"`), which this does not match.
var schemaDocument = regexp.MustCompile(`"provider_schemas"\s*:\s*\{`)

// The offline Terraform checks read the provider schema file where it lies
// beside the checkout (or where TF_PROVIDERS_SCHEMA points); a copy of it
// (several megabytes of a provider's schema) never belongs in the
// repository, under any name.
func TestNoProviderSchemaCopy(t *testing.T) {
	eachFile(t, func(rel string, data []byte) {
		if loc := schemaDocument.FindIndex(data); loc != nil {
			t.Errorf("%s:%d holds a `terraform providers schema -json` document; read it from outside the checkout (TF_PROVIDERS_SCHEMA, terraform/README.md) instead of committing a copy",
				rel, 1+bytes.Count(data[:loc[0]], []byte("\n")))
		}
	})
}

// eachFile calls check with every file of the repository git tracks or
// would add (code, shipped files, docs and tests alike; not what it
// ignores, such as build outputs and installed node modules). Outside a git
// checkout the test is skipped, saying why.
func eachFile(t *testing.T, check func(rel string, data []byte)) {
	t.Helper()
	root := testenv.ModuleRoot(t)
	files, err := listFiles(root)
	if errors.Is(err, errNotCheckout) {
		t.Skipf("%s is not a git checkout (an unpacked module or archive): no file list to check; run in a clone", root)
	}
	if err != nil {
		t.Fatal(err)
	}
	// The list must hold the files users read most, or a wrong root would
	// let a check pass by reading nothing.
	mustRead := map[string]bool{"go.mod": false, "shared/triage/default.yaml": false, "docs/policy.md": false}
	for _, rel := range files {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if errors.Is(err, fs.ErrNotExist) { // deleted in the working tree, or removed while we read
			continue
		}
		if err != nil {
			t.Fatalf("read %s: %v", rel, err)
		}
		if _, ok := mustRead[rel]; ok {
			mustRead[rel] = true
		}
		check(rel, data)
	}
	for rel, read := range mustRead {
		if !read {
			t.Errorf("git ls-files in %s never listed %s", root, rel)
		}
	}
}

// errNotCheckout is listFiles' error for a directory outside any git
// checkout, where there is no list of the repository's files to read.
var errNotCheckout = errors.New("doccheck: not a git checkout")

// listFiles lists the files git tracks and would add in root, relative to
// it with forward slashes.
func listFiles(root string) ([]string, error) {
	ls := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	ls.Dir = root
	out, err := ls.Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && bytes.Contains(ee.Stderr, []byte("not a git repository")) {
		return nil, fmt.Errorf("git ls-files in %s: %w", root, errNotCheckout)
	}
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w", root, err)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00"), nil
}

// excerpt is the citation at and what follows it on its line, at most 40
// bytes, so that the failure shows which citation it means.
func excerpt(data []byte, at int) string {
	end := min(len(data), at+40)
	if nl := bytes.IndexByte(data[at:end], '\n'); nl >= 0 {
		end = at + nl
	}
	return string(data[at:end])
}

// citations finds the spec by name, by file name and by "spec" before a
// section sign, in any case and across a line break, and nothing that only
// contains the letters or speaks of a spec in prose. A middle dot splits each
// citation below, so that this file does not cite the spec itself; the test
// removes it.
func TestCitations(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"S·PEC §6", []int{0}},
		{"see S·PEC.md", []int{4}},
		{"S·pec\n§", []int{0}},
		{"see s·pec §3", []int{4}},
		{"S·PEC §1 and s·pec.md", []int{0, 13}},
		{"HTTP_METHOD_UNSPECIFIED", nil},
		{"SPECIAL", nil},
		{"specification §3", nil},
		{"the spec says so", nil},
		{"respec §2", nil},
		{"", nil},
	} {
		in := strings.ReplaceAll(tc.in, "·", "")
		if got := citations([]byte(in)); !slices.Equal(got, tc.want) {
			t.Errorf("citations(%q) = %v, want %v", in, got, tc.want)
		}
	}
}

// Outside a git checkout listFiles says so, which lets the test skip
// instead of failing for want of a file list.
func TestListFilesOutsideCheckout(t *testing.T) {
	dir := t.TempDir()
	// Keep git from finding a repository above the temporary directory.
	t.Setenv("GIT_CEILING_DIRECTORIES", filepath.Dir(dir))
	if _, err := listFiles(dir); !errors.Is(err, errNotCheckout) {
		t.Errorf("listFiles(%s) = %v, want %v", dir, err, errNotCheckout)
	}
}
