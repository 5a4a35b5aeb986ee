package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file argument (a policy, an event, an --edit-payload) is read whole up
// to the command's limit, from a file or from stdin ("-") alike; one byte
// more is refused with an error naming where it came from, and a missing
// file names the file.
func TestReadFileArg(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, n int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, bytes.Repeat([]byte("x"), n), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const limit = 8
	atLimit, overLimit, empty := write("at", limit), write("over", limit+1), write("empty", 0)
	for _, tc := range []struct {
		name, path, stdin string
		want              int    // bytes read
		wantErr           string // "" = no error
	}{
		{"file at the limit", atLimit, "", limit, ""},
		{"empty file", empty, "", 0, ""},
		{"file over the limit", overLimit, "", 0, "read " + overLimit + ": more than 8 bytes"},
		{"missing file", filepath.Join(dir, "none"), "", 0, "read " + filepath.Join(dir, "none") + ": open "},
		{"stdin at the limit", "-", strings.Repeat("y", limit), limit, ""},
		{"stdin over the limit", "-", strings.Repeat("y", limit+1), 0, "read stdin: more than 8 bytes"},
	} {
		a := &app{stdin: strings.NewReader(tc.stdin)}
		b, err := readFileArg(a, tc.path, limit)
		switch {
		case tc.wantErr == "" && (err != nil || len(b) != tc.want):
			t.Errorf("%s: readFileArg(%q, %d) = %d bytes, %v, want %d bytes", tc.name, tc.path, limit, len(b), err, tc.want)
		case tc.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.wantErr)):
			t.Errorf("%s: readFileArg(%q, %d) = %d bytes, %v, want error %q…", tc.name, tc.path, limit, len(b), err, tc.wantErr)
		case tc.wantErr == "" && b == nil:
			// approve --edit-payload tells "edit to empty" from "no edit"
			// by nil.
			t.Errorf("%s: readFileArg(%q, %d) = nil, want an empty non-nil slice", tc.name, tc.path, limit)
		}
	}
}
