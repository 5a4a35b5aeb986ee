package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jsdlq/jsdlq/internal/storetest"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/store"
)

// An approval with an edited payload keeps the original: show lists both
// versions with the author and the one the next replay publishes, and
// --version prints each exactly as stored (binary included). A second edit
// is version 3 based on 2.
func TestShowVersions(t *testing.T) {
	e := newEnv(t)
	e.seed(seed{id: "TASKS.60", tenant: "acme", agent: "backend", category: "poison", reason: "parse_error", status: store.Quarantined})
	dir := t.TempDir()
	edit := filepath.Join(dir, "edit.bin")
	binary := []byte{0, 1, 2, 0xff, 0xfe, '\n', 0x80}
	if err := os.WriteFile(edit, binary, 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"DLQCTL_ACTOR": "alice"}
	// The original is JSON and the edit is not: refused without the flag.
	code, _, stderr := e.run(vars, "approve", "TASKS.60", "--edit-payload", edit)
	// An edit without its confirmation is bad input: exit 2, the console's 400.
	if code != exitUsage || !strings.Contains(stderr, "--confirm-invalid-json") || !strings.Contains(stderr, "nothing changed") {
		t.Errorf("approve of a binary edit over JSON = %d %q, want %d naming --confirm-invalid-json", code, stderr, exitUsage)
	}
	if got := e.entry("TASKS.60"); got.Status != store.Quarantined || len(got.Versions()) != 1 {
		t.Fatalf("the refused approval changed the entry: %s, %d versions", got.Status, len(got.Versions()))
	}
	code, out, stderr := e.run(vars, "approve", "TASKS.60", "--edit-payload", edit, "--confirm-invalid-json", "--set-header", "X-Fixed=yes")
	if code != 0 || !strings.Contains(out, "payload version 2") {
		t.Fatalf("approve --confirm-invalid-json = %d %q %q, want payload version 2", code, out, stderr)
	}
	// The replay was refused (as replay would, say, for its size): a second edit.
	if _, err := storetest.Refuse(testenv.Context(t), e.st, "TASKS.60", store.Escalated, "replay", ""); err != nil {
		t.Fatal(err)
	}
	third := filepath.Join(dir, "third.json")
	if err := os.WriteFile(third, []byte(`{"task":"fixed"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := e.run(map[string]string{"DLQCTL_ACTOR": "bob"}, "approve", "TASKS.60", "--edit-payload", third); code != 0 {
		t.Fatalf("second approve = %d %q", code, stderr)
	}

	code, out, _ = e.run(nil, "show", "TASKS.60")
	for _, want := range []string{
		"the next replay publishes v3",
		fmt.Sprintf("   v1  original  %d B, sha256 %s", len(`{"task":"TASKS.60"}`), store.PayloadSum([]byte(`{"task":"TASKS.60"}`))),
		"   v2  edit of v1 by alice",
		"       headers set: X-Fixed",
		"       confirmed: invalid_json",
		" * v3  edit of v2 by bob",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	for n, want := range map[string][]byte{"1": []byte(`{"task":"TASKS.60"}`), "2": binary, "3": []byte(`{"task":"fixed"}`)} {
		code, out, stderr := e.run(nil, "show", "TASKS.60", "--version", n)
		if code != 0 || !bytes.Equal([]byte(out), want) {
			t.Errorf("show --version %s = %d %q %q, want exactly %q", n, code, out, stderr, want)
		}
	}
	code, out, _ = e.run(nil, "show", "TASKS.60", "--version", "2", "--json")
	var doc versionJSON
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || !bytes.Equal(doc.Payload, binary) || doc.Version.By != "alice" || doc.Version.Base != 1 {
		t.Errorf("show --version 2 --json = %d %q (%v), want version 2 by alice with its bytes", code, out, err)
	}
	code, out, _ = e.run(nil, "show", "TASKS.60", "--json")
	var shown showJSON
	if err := json.Unmarshal([]byte(out), &shown); code != 0 || err != nil || len(shown.Versions) != 3 || shown.ReplayVersion != 3 || string(shown.Payload) != `{"task":"TASKS.60"}` {
		t.Errorf("show --json = %d (%v): %d versions, replay version %d, payload %q; want 3, 3 and the original", code, err, len(shown.Versions), shown.ReplayVersion, shown.Payload)
	}
	for _, bad := range []string{"4", "0", "-1"} {
		if code, _, _ := e.run(nil, "show", "TASKS.60", "--version", bad); code == 0 {
			t.Errorf("show --version %s = 0, want a refusal", bad)
		}
	}
}

// An empty edit needs --confirm-empty; with it, the approval is recorded
// with the confirmation.
func TestApproveEmptyNeedsConfirmation(t *testing.T) {
	e := newEnv(t)
	e.seed(seed{id: "TASKS.61", tenant: "acme", agent: "backend", category: "permanent", reason: "impossible_task", status: store.Escalated})
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := e.run(nil, "approve", "TASKS.61", "--edit-payload", empty); code != exitUsage || !strings.Contains(stderr, "empty") {
		t.Errorf("approve of an empty payload = %d %q, want %d saying it is empty", code, stderr, exitUsage)
	}
	if got := e.entry("TASKS.61"); got.Status != store.Escalated || len(got.History) != 1 {
		t.Fatalf("the refused approval changed the entry: %s, %d transitions", got.Status, len(got.History))
	}
	if code, _, stderr := e.run(nil, "approve", "TASKS.61", "--edit-payload", empty, "--confirm-empty"); code != 0 {
		t.Fatalf("approve --confirm-empty = %d %q", code, stderr)
	}
	got := e.entry("TASKS.61")
	v, _ := got.ReplayVersion()
	if v.N != 2 || v.Size != 0 || strings.Join(v.Confirmed, ",") != "empty" || !strings.Contains(got.History[len(got.History)-1].Note, "confirmed: empty") {
		t.Errorf("approved version = %+v, note %q; want version 2, empty, the confirmation recorded", v, got.History[len(got.History)-1].Note)
	}
	if string(got.Payload) != `{"task":"TASKS.61"}` {
		t.Errorf("original = %q, want it kept", got.Payload)
	}
}

// show --version N prints the bytes as stored for a file or a pipe; on a
// terminal, which would act on an escape sequence or turn text around,
// the bytes a terminal would not show as themselves are escaped (visible
// text and line breaks as they are), and stderr says how to get them as
// stored.
func TestShowVersionOnATerminalEscapes(t *testing.T) {
	e := newEnv(t)
	payload := []byte("line one\n\x1b]0;pwned\x07\x1b[2J\u202eexe.txt\nlast \xff\n")
	e.seed(seed{id: "TASKS.62", tenant: "acme", agent: "backend", category: "poison", reason: "parse_error", status: store.Quarantined, payload: payload})
	code, out, stderr := e.runCtx(testenv.Context(t), nil, func(a *app) { a.stdoutTTY = func() bool { return true } }, "show", "TASKS.62", "--version", "1")
	if code != 0 {
		t.Fatalf("show --version 1 on a terminal = %d %q", code, stderr)
	}
	testenv.CheckVisible(t, "show --version 1 on a terminal", out)
	if want := "line one\n\\x1b]0;pwned\\x07\\x1b[2J\\u202eexe.txt\nlast \\xff\n"; out != want {
		t.Errorf("show --version 1 on a terminal = %q, want %q", out, want)
	}
	if !strings.Contains(stderr, "> FILE") {
		t.Errorf("stderr = %q, want how to get the bytes as stored", stderr)
	}
	// Not a terminal: the bytes as stored.
	if code, out, _ := e.run(nil, "show", "TASKS.62", "--version", "1"); code != 0 || out != string(payload) {
		t.Errorf("show --version 1 = %d %q, want exactly %q", code, out, payload)
	}
}

// policy show writes the stored document as it is (so `policy show > FILE`
// applies back unchanged), but on a terminal what the terminal would act
// on (a bidirectional override in an author's comment) is escaped.
func TestPolicyShowOnATerminalEscapes(t *testing.T) {
	e := newEnv(t)
	_, def, _ := e.run(nil, "policy", "show")
	doc := "# reviewed by \u202eevil\n" + strings.SplitN(def, "\n", 3)[2]
	file := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := e.run(nil, "policy", "apply", file); code != 0 {
		t.Fatalf("policy apply = %d %q", code, stderr)
	}
	code, out, _ := e.runCtx(testenv.Context(t), nil, func(a *app) { a.stdoutTTY = func() bool { return true } }, "policy", "show")
	if code != 0 || !strings.Contains(out, `# reviewed by \u202eevil`) {
		t.Errorf("policy show on a terminal = %d, want the override's comment escaped:\n%.300s", code, out)
	}
	testenv.CheckVisible(t, "policy show on a terminal", out)
	if code, out, _ := e.run(nil, "policy", "show"); code != 0 || !strings.Contains(out, doc) {
		t.Errorf("policy show = %d, want the document as stored:\n%.300s", code, out)
	}
}
