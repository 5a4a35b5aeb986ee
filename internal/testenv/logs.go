package testenv

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/jsdlq/jsdlq/shared/obs"
)

// LogBuffer collects the JSON log lines of handlers running concurrently, for
// tests that check what was logged.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Logger returns a Cloud Logging JSON logger writing into a new LogBuffer.
func Logger() (*slog.Logger, *LogBuffer) {
	b := &LogBuffer{}
	return obs.NewLogger(b, obs.WithLevel(slog.LevelDebug)), b
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// Lines returns the lines containing substr.
func (b *LogBuffer) Lines(substr string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.b.String(), "\n") {
		if l != "" && strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// String is everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// CheckVisibleLines fails the test unless every line written is one JSON
// object whose strings (keys and values, at any depth) hold only what
// CheckVisible allows: a wire value is logged through its encoder
// (event.Wire), never raw.
func (b *LogBuffer) CheckVisibleLines(t testing.TB, what string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line != "" {
			CheckVisibleLogLine(t, what, line)
		}
	}
}

// CheckVisibleLogLine is CheckVisibleLines of one line (a line of a
// process's log file).
func CheckVisibleLogLine(t testing.TB, what, line string) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Errorf("%s: log line %.200q is not one JSON object: %v", what, line, err)
		return
	}
	walkStrings(m, func(s string) { CheckVisible(t, what+": log line "+line, s) })
}

func walkStrings(v any, f func(string)) {
	switch v := v.(type) {
	case string:
		f(v)
	case map[string]any:
		for k, x := range v {
			f(k)
			walkStrings(x, f)
		}
	case []any:
		for _, x := range v {
			walkStrings(x, f)
		}
	}
}
