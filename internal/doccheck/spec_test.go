package doccheck

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
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

// TestNothingCitesTheSpec reads every file of the repository (what git
// tracks and what it would add: code, shipped files, docs and tests alike;
// not what it ignores, such as build outputs and installed node modules)
// and fails for each line that cites the spec.
func TestNothingCitesTheSpec(t *testing.T) {
	root := testenv.ModuleRoot(t)
	ls := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	ls.Dir = root
	out, err := ls.Output()
	if err != nil {
		t.Fatalf("git ls-files in %s: %v", root, err)
	}
	// The list must hold the files users read most, or a wrong root would
	// let this test pass by reading nothing.
	mustRead := map[string]bool{"go.mod": false, "shared/triage/default.yaml": false, "docs/policy.md": false}
	for _, rel := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
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
		for _, at := range citations(data) {
			line := 1 + bytes.Count(data[:at], []byte("\n"))
			t.Errorf("%s:%d cites the product spec, a document users never see: %q; name the docs/ page that documents the concept, or state the rule itself", rel, line, excerpt(data, at))
		}
	}
	for rel, read := range mustRead {
		if !read {
			t.Errorf("git ls-files in %s never listed %s", root, rel)
		}
	}
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
