package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fakeStack makes root look like a directory whose stack runs: a state file
// per service named in addrs, each naming a live process group of its own
// (a sleep this test stops), so stackctl reads them as it reads the ones up
// writes.
func fakeStack(t *testing.T, root, project string, addrs map[string]string) {
	t.Helper()
	run := filepath.Join(root, ".local", "run")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, addr := range addrs {
		cmd := exec.Command("sleep", "600")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a stand-in for %s: %v", name, err)
		}
		pgid := cmd.Process.Pid
		t.Cleanup(func() {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			_ = cmd.Wait()
		})
		b, _ := json.Marshal(state{Name: name, Pgid: pgid, Addr: addr, Log: filepath.Join(root, name+".log"), Started: time.Now().UTC(), Project: project})
		if err := os.WriteFile(filepath.Join(run, name+".json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// shellRun runs script in a new shell of root: an environment with none of
// the stack's variables, as after opening a terminal.
func shellRun(t *testing.T, root, script string, vars ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = root
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, vars...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("sh -c %q: %v\nstdout:\n%s\nstderr:\n%s", script, err, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

// Two stacks on different ports, each in its own directory: `make -s env`
// in a new shell of either points the clients at that stack's ports and
// project (its state files), never at the defaults; dlqctl then names, on
// its listing's first line, the project and emulator it reads, and warns
// when that store holds no jsdlq data.
func TestEnvPointsAtTheRunningStack(t *testing.T) {
	stackctl := testenv.Binary(t, "./tools/stackctl")
	dlqctl := testenv.Binary(t, "./cmd/dlqctl")
	makefile := filepath.Join(testenv.ModuleRoot(t), "Makefile")
	emulator := testenv.FirestoreHost(t)
	fs, withData := testenv.Firestore(t)
	ctx := testenv.Context(t)
	seeded := &store.Entry{ID: "env-1", EventID: "env-1", Stream: "TASKS", StreamSeq: 1, Subject: "agents.a1.tasks.review", Tenant: "acme",
		Agent: "a1", TaskID: "task-1", TaskType: "review", IdempotencyKey: "task-1-v1", Kind: "terminated", Category: "permanent",
		ReasonCode: "bad_input", Action: "escalate", Strategy: "none", Status: store.Escalated, Payload: []byte(`{}`)}
	if _, err := store.New(fs).Record(ctx, seeded, "test"); err != nil {
		t.Fatalf("Record() = %v", err)
	}
	// The other stack's Firestore port is held by something that is not
	// its emulator, as a default port may be.
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	empty := testenv.Project(t)

	tests := []struct {
		name, project, firestore string
		runDlqctl                bool
		wantWarning              bool
	}{
		{"a stack whose store holds data", withData, emulator, true, false},
		{"a stack whose store is empty", empty, emulator, true, true},
		{"a stack on other ports", "other-project", other.Addr().String(), false, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			nats := fmt.Sprintf("127.0.0.1:%d", 14220+i)
			fakeStack(t, root, tt.project, map[string]string{"firestore": tt.firestore, "nats": nats})
			script := `eval "$(make -s -f "$MAKEFILE" STACK="$STACKCTL" env)" && echo "$GOOGLE_CLOUD_PROJECT $FIRESTORE_EMULATOR_HOST $NATS_URL"`
			if tt.runDlqctl {
				script += ` && "$DLQCTL" ls`
			}
			out, errs := shellRun(t, root, script, "MAKEFILE="+makefile, "STACKCTL="+stackctl, "DLQCTL="+dlqctl)
			first, _, _ := strings.Cut(out, "\n")
			if want := tt.project + " " + tt.firestore + " nats://" + nats; first != want {
				t.Errorf("make -s env in %s: project, Firestore, NATS = %q, want %q (the running stack's)", tt.name, first, want)
			}
			if strings.Contains(errs, "no local stack is running") {
				t.Errorf("make -s env stderr = %q, want no claim that nothing runs", errs)
			}
			if !tt.runDlqctl {
				return
			}
			line, _, _ := strings.Cut(errs, "\n")
			if want := "dlqctl: reading project " + tt.project + " on the Firestore emulator at " + tt.firestore; line != want {
				t.Errorf("dlqctl ls stderr first line = %q, want %q", line, want)
			}
			if got := strings.Contains(errs, "holds no jsdlq data"); got != tt.wantWarning {
				t.Errorf("dlqctl ls stderr = %q: warns of a store without jsdlq data = %v, want %v", errs, got, tt.wantWarning)
			}
		})
	}

	t.Run("no stack", func(t *testing.T) {
		out, errs := shellRun(t, t.TempDir(), `make -s -f "$MAKEFILE" STACK="$STACKCTL" env`, "MAKEFILE="+makefile, "STACKCTL="+stackctl)
		if !strings.Contains(out, `export FIRESTORE_EMULATOR_HOST="127.0.0.1:8681"`) || !strings.Contains(errs, "no local stack is running") {
			t.Errorf("make -s env without a stack = %q, stderr %q; want the defaults and a line saying none runs", out, errs)
		}
	})
}
