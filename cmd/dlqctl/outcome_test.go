package main

import (
	"fmt"
	"testing"

	"github.com/jsdlq/jsdlq/shared/outcome"
)

// Every sentinel dlqctl can meet exits with its outcome's code
// (shared/outcome), the same the console and the API answer with; a usage
// error and a command's own code come first.
func TestExitCodeOfEverySentinel(t *testing.T) {
	for _, s := range outcome.Sentinels {
		if got := codeOf(fmt.Errorf("approve x: %w", s.Err)); got != s.Outcome.Exit {
			t.Errorf("codeOf(%s) = %d, want %d", s.Name, got, s.Outcome.Exit)
		}
	}
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{usagef("bad flag"), exitUsage},
		{conflictError{"lease held"}, exitConflict},
		{fmt.Errorf("read: %w", fmt.Errorf("i/o timeout")), exitError},
	} {
		if got := codeOf(tc.err); got != tc.want {
			t.Errorf("codeOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
