package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// Values from the wire reach the terminal escaped: an entry whose subject,
// headers, failure detail and history note hold escape sequences, a line
// break that would forge a history line, and a bidirectional override is
// shown by show, ls and breaker show with each escaped visibly, in text
// and in JSON.
func TestOutputEscapesWireValues(t *testing.T) {
	e := newEnv(t)
	const forged = "x\n  2026-01-01T00:00:00Z  escalated -> discarded  by admin  forged"
	e.seed(seed{id: "TASKS.1", tenant: "acme", agent: "writer", category: "permanent", reason: "impossible_task", status: store.Escalated})
	ctx := testenv.Context(t)
	if _, err := e.st.Transition(ctx, "TASKS.1", store.Change{From: []store.Status{store.Escalated}, To: store.Discarded,
		By: "agent\x1b[2J", Note: forged, Apply: func(en *store.Entry) error {
			en.Subject = "agents.w\u202eetirw.tasks.x"
			en.Headers = event.EncodeHeaders(map[string][]string{"X-Note": {"\x1b]0;owned\x07"}, "X-Bytes": {"\xff\xfe"}})
			en.Failure = &event.Failure{Code: "impossible_task", Detail: "boom\rOK"}
			return nil
		}}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := e.run(nil, "show", "TASKS.1")
	if code != exitOK {
		t.Fatalf("show = %d %s", code, stderr)
	}
	testenv.CheckVisible(t, "show", out)
	for _, want := range []string{`by agent\x1b[2J`, `x\n  2026-01-01T00:00:00Z`, `w\u202eetirw`, `X-Note: \x1b]0;owned\x07`, `X-Bytes: \xff\xfe`, `boom\rOK`} {
		if !strings.Contains(out, want) {
			t.Errorf("show does not print %s escaped as %q:\n%s", want, want, out)
		}
	}
	if strings.Count(out, "escalated -> discarded") != 0 && !strings.Contains(out, `\n  2026`) {
		t.Errorf("show prints the forged history line as a line of its own:\n%s", out)
	}
	code, out, _ = e.run(nil, "show", "TASKS.1", "--json")
	testenv.CheckVisible(t, "show --json", out)
	var doc struct{ Entry *store.Entry }
	if err := json.Unmarshal([]byte(out), &doc); code != exitOK || err != nil || doc.Entry.Subject != "agents.w\u202eetirw.tasks.x" {
		t.Errorf("show --json = %d, %v, subject %q: want the value intact once decoded", code, err, doc.Entry.Subject)
	}
	for _, args := range [][]string{{"ls"}, {"ls", "--json"}, {"breaker", "show", "acme"}} {
		code, out, stderr := e.run(nil, args...)
		if code != exitOK {
			t.Errorf("dlqctl %q = %d %s", args, code, stderr)
		}
		testenv.CheckVisible(t, strings.Join(args, " "), out)
	}
}

// A name, an entry id or a reason that breaks its rule is a usage error
// (exit 2) before anything is read or changed.
func TestMalformedNamesAndReasonsAreUsageErrors(t *testing.T) {
	e := newEnv(t)
	e.seed(seed{id: "TASKS.1", tenant: "acme", agent: "writer", category: "permanent", reason: "impossible_task", status: store.Escalated})
	for _, args := range [][]string{
		{"ls", "--tenant", "acme\x1b[2J"},
		{"ls", "--tenant", ".."},
		{"ls", "--tenant", "(others)"},
		{"ls", "--agent", "a\u202eb"},
		{"ls", "--reason", "a\xff"},
		{"ls", "--category", strings.Repeat("c", 300)},
		{"--tenant", "acme\n", "ls"},
		{"redrive", "--filter", "tenant=a\x00b", "--rate", "1/s", "--dry-run"},
		{"breaker", "show", "a\u202eb"},
		{"breaker", "close", "acme", "--reason", "fixed\nby admin"},
		{"breaker", "close", "a\xffb", "--reason", "fixed"},
		{"breaker", "probe", "TASKS.1", "--reason", "try\u202e"},
		{"breaker", "probe", "TASKS/1", "--reason", "try"},
		{"discard", "TASKS.1", "--reason", "dup\x1b[2J"},
		{"discard", "TASKS.1", "--reason", strings.Repeat("r", 1001)},
		{"discard", "TASKS.1/x", "--reason", "dup"},
		{"tenant-key", "create", "(invalid)"},
		{"webhook", "list", "a/\u202e"},
		{"policy", "test", "current", "--entry", "a/b"},
	} {
		code, _, stderr := e.run(nil, args...)
		if code != exitUsage || stderr == "" {
			t.Errorf("dlqctl %q = exit %d (%q), want %d with a message", args, code, stderr, exitUsage)
		}
		testenv.CheckVisible(t, "stderr of "+strings.Join(args, " "), stderr)
	}
	if en := e.entry("TASKS.1"); en.Status != store.Escalated || len(en.History) != 1 {
		t.Errorf("TASKS.1 = %s with %d transitions, want untouched", en.Status, len(en.History))
	}
	// The reserved tenant is one an operator may name.
	if code, _, stderr := e.run(nil, "ls", "--tenant", event.ReservedTenant); code != exitOK {
		t.Errorf("ls --tenant %s = %d (%s), want 0", event.ReservedTenant, code, stderr)
	}
}

func TestTermf(t *testing.T) {
	for _, tc := range []struct {
		format string
		args   []any
		want   string
	}{
		{"%s: %d", []any{"a\nb", 3}, `a\nb: 3`},
		{"%-6s|", []any{"é\x1b"}, `é\x1b |`},
		{"%q", []any{"a\u202e"}, `"a\u202e"`}, // Go's quoting escapes it already, once
		{"%*d %s", []any{3, 7, "\x00"}, `  7 \x00`},
		{"%v", []any{[]string{"x\ty"}}, `[x\ty]`},
		{"%s", []any{store.Status("held\r")}, `held\r`},
		{"100%% %s", []any{"\u2066"}, `100% \u2066`},
	} {
		if got := termf(tc.format, tc.args...); got != tc.want {
			t.Errorf("termf(%q, %q) = %q, want %q", tc.format, tc.args, got, tc.want)
		}
	}
}
