package testenv

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/jsdlq/jsdlq/tools/stack"
)

// FunctionsHost builds the local functions host (cmd/functions, once per
// test binary) and starts it on a free loopback port with env (PORT is set
// here), as the local stack runs it; it is stopped when the test ends. It
// returns the host's address and its log file.
func FunctionsHost(t testing.TB, env ...string) (addr, logFile string) {
	t.Helper()
	bin := Binary(t, "github.com/jsdlq/jsdlq/cmd/functions")
	dir := t.TempDir()
	addr, err := stack.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(addr, ":")
	logFile = filepath.Join(dir, "functions.log")
	p, err := stack.Start(Context(t), stack.Spec{
		Name: "functions", Path: bin, Addr: addr, LogFile: logFile, Watch: true,
		Env: append([]string{"PORT=" + port}, env...),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	return addr, logFile
}
