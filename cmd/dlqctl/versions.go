package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
)

// This file shows an entry's payload versions: show lists them, and
// show --version N prints one as stored.

// writeVersions lists e's payload versions, oldest first, marking the one
// its next replay publishes.
func writeVersions(w io.Writer, e *store.Entry, next store.PayloadVersion) {
	outf(w, "versions    (the next replay publishes v%d; dlqctl show %s --version N prints one)\n", next.N, e.ID)
	for _, v := range e.Versions() {
		mark := " "
		if v.N == next.N {
			mark = "*"
		}
		what := "original"
		if !v.Original() {
			what = fmt.Sprintf("edit of v%d by %s at %s", v.Base, v.Author(), v.At.Format(time.RFC3339))
		}
		size := fmt.Sprintf("%d B, sha256 %s", v.Size, v.SHA256)
		if v.Missing {
			size = "missing"
		}
		outf(w, " %s v%d  %s  %s\n", mark, v.N, what, size)
		if names := v.HeaderNames(); len(names) > 0 {
			outf(w, "       headers set: %s\n", strings.Join(names, ", "))
		}
		if len(v.Confirmed) > 0 {
			outf(w, "       confirmed: %s\n", strings.Join(v.Confirmed, ", "))
		}
	}
}

// versionJSON is show --version N --json.
type versionJSON struct {
	Version store.PayloadVersion `json:"version"`
	Payload []byte               `json:"payload"` // base64
}

// showVersion prints version n of e's payload: its bytes exactly as stored
// (so `> file` keeps them), or with --json its description and bytes. On a
// terminal, which would act on an escape sequence or turn text around, a
// payload that is not plain visible text is written line by line through
// the terminal encoder, and stderr says how to get the bytes as stored.
func (a *app) showVersion(ctx context.Context, st *store.Store, e *store.Entry, n int, asJSON bool) error {
	v, ok := e.Version(n)
	if !ok {
		return fmt.Errorf("%w: entry %s has no payload version %d (it has %d)", store.ErrNotFound, e.ID, n, len(e.Versions()))
	}
	if v.Missing {
		return fmt.Errorf("%w: version %d of entry %s was not captured (%d B, sha256 %s)", store.ErrNotFound, n, e.ID, v.Size, v.SHA256)
	}
	b, err := st.VersionPayload(ctx, e, n)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(a.stdout, versionJSON{Version: v, Payload: b})
	}
	if a.stdoutIsTTY() {
		if shown := terminalLines(b); shown != string(b) {
			outf(a.stderr, "version %d of %s holds bytes a terminal would act on: shown escaped; dlqctl show %s --version %d > FILE writes them as stored\n", n, e.ID, e.ID, n)
			_, err = io.WriteString(a.stdout, shown)
			return err
		}
	}
	_, err = a.stdout.Write(b)
	return err
}

// terminalLines is b for a terminal: each line through event.Terminal,
// its line breaks kept.
func terminalLines(b []byte) string {
	lines := strings.SplitAfter(string(b), "\n")
	for i, l := range lines {
		body, nl := strings.CutSuffix(l, "\n")
		lines[i] = event.Terminal(body)
		if nl {
			lines[i] += "\n"
		}
	}
	return strings.Join(lines, "")
}

// versionFlag refuses a --version that names no version (0 is the flag
// unset only when it was not given).
func versionFlag(fs *flag.FlagSet, n int) error {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "version" })
	if given && n < 1 {
		return usagef("--version %d: payload versions are numbered from 1 (the original)", n)
	}
	return nil
}

// confirmedRisks are the risks approve's flags confirm.
func confirmedRisks(empty, invalidJSON bool) []operator.Risk {
	var out []operator.Risk
	if empty {
		out = append(out, operator.RiskEmpty)
	}
	if invalidJSON {
		out = append(out, operator.RiskInvalidJSON)
	}
	return out
}
