package testenv

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"

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
