package testenv

import (
	"os"
	"strings"
	"sync"
	"testing"
)

func TestCommandName(t *testing.T) {
	tests := []struct{ pkg, want string }{
		{"github.com/jsdlq/jsdlq/cmd/bridge", "bridge"},
		{"./cmd/dlqctl", "dlqctl"},
		{"github.com/nats-io/nats-server/v2", "nats-server"},
		{"example.com/tools/v2tool", "v2tool"},
		{"example.com/v", "v"},
	}
	for _, tt := range tests {
		if got := commandName(tt.pkg); got != tt.want {
			t.Errorf("commandName(%q) = %q, want %q", tt.pkg, got, tt.want)
		}
	}
}

// Every caller gets the one build, however many ask at once; a package that
// does not build says why, every time it is asked.
func TestBuildOnce(t *testing.T) {
	const pkg = "./tools/tfschema/cmd/tfpolicy"
	// Binary skips under -short; a skip must come from the test's own
	// goroutine, not from the ones below.
	SkipShort(t, "a build of "+pkg)
	paths := make([]string, 4)
	var wg sync.WaitGroup
	for i := range paths {
		wg.Go(func() { paths[i] = Binary(t, pkg) })
	}
	wg.Wait()
	for _, p := range paths[1:] {
		if p != paths[0] {
			t.Fatalf("Binary(%s) = %q and %q, want one build", pkg, paths[0], p)
		}
	}
	if fi, err := os.Stat(paths[0]); err != nil || fi.Mode()&0o111 == 0 || !strings.HasSuffix(paths[0], "/tfpolicy") {
		t.Errorf("Binary(%s) = %q (%v, %v), want an executable named tfpolicy", pkg, paths[0], fi, err)
	}
	for range 2 {
		if _, err := BuildOnce("./no/such/command"); err == nil || !strings.Contains(err.Error(), "go build ./no/such/command") {
			t.Errorf("BuildOnce(./no/such/command) = %v, want go build's failure", err)
		}
	}
}
