package testenv

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jsdlq/jsdlq/emulator/stack"
)

// FunctionsHost builds the local functions host (cmd/functions) and starts
// it on a free loopback port with env (PORT is set here), as the local stack
// runs it; it is stopped when the test ends. It returns the host's address
// and its log file.
func FunctionsHost(t testing.TB, env ...string) (addr, logFile string) {
	t.Helper()
	SkipShort(t, "a build of cmd/functions")
	dir := t.TempDir()
	bin := filepath.Join(dir, "functions")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/jsdlq/jsdlq/cmd/functions").CombinedOutput(); err != nil {
		t.Fatalf("testenv: go build cmd/functions: %v\n%s", err, out)
	}
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
