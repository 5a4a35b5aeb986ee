package testenv_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/tools/stack"
)

// A test binary that panics never reaches testenv.Main's cleanup; the
// watchdog must still stop the emulator it started and free its port.
func TestEmulatorStoppedWhenTestBinaryPanics(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	hostFile := filepath.Join(t.TempDir(), "host")
	cmd := exec.Command(exe, "-test.run=^TestHelperPanicsWithEmulator$")
	env := []string{"TESTENV_HELPER_HOST_FILE=" + hostFile}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FIRESTORE_EMULATOR_HOST=") { // make it start its own
			env = append(env, kv)
		}
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "panic: deliberate") {
		t.Fatalf("helper = %v, want it to panic:\n%s", err, out)
	}
	b, err := os.ReadFile(hostFile)
	if err != nil {
		t.Fatalf("helper never started its emulator:\n%s", out)
	}
	host := strings.TrimSpace(string(b))
	testenv.WaitFor(t, 20*time.Second, func() error {
		if err := stack.CheckFree(host); err != nil {
			return fmt.Errorf("emulator of a panicked test binary still holds its port: %w", err)
		}
		return nil
	})
}

// TestHelperPanicsWithEmulator is not a test of its own: the test above runs
// it in a child process.
func TestHelperPanicsWithEmulator(t *testing.T) {
	file := os.Getenv("TESTENV_HELPER_HOST_FILE")
	if file == "" {
		t.Skip("helper process only")
	}
	host := testenv.FirestoreHost(t)
	if err := os.WriteFile(file, []byte(host), 0o644); err != nil {
		t.Fatal(err)
	}
	panic("deliberate")
}
