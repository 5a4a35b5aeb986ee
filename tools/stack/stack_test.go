package stack

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestCheckFreeNamesTheHolder(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	err = CheckFree(l.Addr().String())
	if !errors.Is(err, ErrPortInUse) {
		t.Fatalf("CheckFree(held) = %v, want ErrPortInUse", err)
	}
	if want := "(pid " + strconv.Itoa(os.Getpid()) + ")"; !strings.Contains(err.Error(), want) {
		t.Errorf("CheckFree(held) = %v, want it to name this process %s", err, want)
	}
}

// The servers of one stack get their ports before any of them starts: the
// addresses must be distinct (one pick at a time, each port let go before the
// next, may be handed out twice) and free once FreeAddrs returns.
func TestFreeAddrsDistinct(t *testing.T) {
	const n = 64
	addrs, err := FreeAddrs(n)
	if err != nil {
		t.Fatalf("FreeAddrs(%d) = %v", n, err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			t.Errorf("FreeAddrs(%d) returned %s twice", n, a)
		}
		seen[a] = true
		if err := CheckFree(a); err != nil {
			t.Errorf("FreeAddrs(%d) = …%s…, but CheckFree(%s) = %v", n, a, a, err)
		}
	}
	if len(addrs) != n {
		t.Errorf("FreeAddrs(%d) returned %d addresses", n, len(addrs))
	}
}

// The Cloud Tasks emulator binds the address and the next port: both must be
// free and neither one the caller has already handed out.
func TestFreeAddrPairBothPortsFree(t *testing.T) {
	taken := map[string]bool{}
	for range 3 {
		a, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		taken[a] = true
	}
	addr, err := FreeAddrPair(taken)
	if err != nil {
		t.Fatalf("FreeAddrPair() = %v", err)
	}
	host, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	next := net.JoinHostPort(host, strconv.Itoa(n+1))
	for _, a := range []string{addr, next} {
		if taken[a] {
			t.Errorf("FreeAddrPair() = %s, whose pair %s was already taken", addr, a)
		}
		if err := CheckFree(a); err != nil {
			t.Errorf("FreeAddrPair() = %s, but CheckFree(%s) = %v", addr, a, err)
		}
	}
}

// A server that forks a child (as gcloud's wrappers start Java) must be gone
// entirely after Stop, child included, so its port is free again.
func TestStopEndsTheWholeGroup(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	childPid := filepath.Join(t.TempDir(), "child.pid")
	// The parent shell forks python as a listening child and waits.
	script := `python3 -c 'import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1",` + port + `)); s.listen(); time.sleep(600)' & echo $! > ` + childPid + `; wait`
	p, err := Start(context.Background(), Spec{Name: "forker", Path: "/bin/sh", Args: []string{"-c", script}, Addr: addr, ReadyTimeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	// The shell writes the pid before the child listens, and Start returned
	// only once it listened: the pid must be there.
	b, _ := os.ReadFile(childPid)
	child, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if child <= 0 {
		_ = p.Stop()
		t.Fatalf("child pid file %s = %q, want the forked child's pid", childPid, b)
	}
	pids, err := GroupPIDs(p.Pgid)
	if err != nil {
		t.Errorf("GroupPIDs(%d) = %v", p.Pgid, err)
	} else if !slices.Contains(pids, child) {
		t.Errorf("GroupPIDs(%d) = %v, want it to hold the forked child %d", p.Pgid, pids, child)
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("Stop() = %v", err)
	}
	if after, _ := GroupPIDs(p.Pgid); slices.Contains(after, child) {
		t.Errorf("child %d still in group %d after Stop()", child, p.Pgid)
	}
	if err := CheckFree(addr); err != nil {
		t.Errorf("CheckFree(%s) after Stop() = %v, want free", addr, err)
	}
}

// GroupCPU counts the time of the group's processes: this test's own group
// gains some while the test keeps reading /proc (which costs CPU), so the
// loop ends; a bound fails it instead of hanging when nothing is counted.
func TestGroupCPUGrowsWithWork(t *testing.T) {
	pgrp := syscall.Getpgrp()
	before := GroupCPU(pgrp)
	// A time bound, not a round count: on a busy machine a round is slow.
	deadline := time.Now().Add(30 * time.Second)
	for GroupCPU(pgrp) <= before {
		if time.Now().After(deadline) {
			t.Fatalf("GroupCPU(%d) = %v after 30 s of work, want more than %v", pgrp, GroupCPU(pgrp), before)
		}
	}
	if pids, err := GroupPIDs(pgrp); err != nil || !slices.Contains(pids, os.Getpid()) {
		t.Errorf("GroupPIDs(%d) = %v, %v; want it to hold this process %d", pgrp, pids, err, os.Getpid())
	}
}

// Build makes a binary from a package of the module, and a package that
// does not build fails with the compiler's words.
func TestBuild(t *testing.T) {
	root := filepath.Join("..", "..")
	out := filepath.Join(t.TempDir(), "stackctl")
	if err := Build(t.Context(), root, out, "./tools/stackctl"); err != nil {
		t.Fatalf("Build(./tools/stackctl) = %v", err)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("Build(./tools/stackctl) wrote %v, %v; want an executable", fi, err)
	}
	err := Build(t.Context(), root, filepath.Join(t.TempDir(), "x"), "./no/such/package")
	if err == nil || !strings.Contains(err.Error(), "go build ./no/such/package") || !strings.Contains(err.Error(), "directory not found") {
		t.Errorf("Build(./no/such/package) = %v, want the failure with go's output", err)
	}
}

// The watchdog takes the group down when the process that started it is
// gone, however it went: here the "test binary" is a shell we SIGKILL.
func TestWatchdogStopsGroupWhenParentDies(t *testing.T) {
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "pgid")
	p, err := Start(context.Background(), Spec{
		Name: "parent", Path: exe, Args: []string{"-test.run=TestHelperWatchedParent$"},
		Env: []string{"STACK_HELPER_PGID_FILE=" + pidFile},
	})
	if err != nil {
		t.Fatal(err)
	}
	var pgid int
	for i := 0; i < 200 && pgid == 0; i++ {
		b, _ := os.ReadFile(pidFile)
		pgid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		time.Sleep(50 * time.Millisecond)
	}
	if pgid == 0 {
		p.Stop()
		t.Fatal("helper never started its watched child")
	}
	_ = syscall.Kill(-p.Pgid, syscall.SIGKILL) // the parent dies without cleaning up
	deadline := time.Now().Add(15 * time.Second)
	for GroupAlive(pgid) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if GroupAlive(pgid) {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		t.Fatalf("watched group %d outlived its parent", pgid)
	}
}

// TestHelperWatchedParent is not a test: TestWatchdogStopsGroupWhenParentDies
// runs it as the parent process of a watched server.
func TestHelperWatchedParent(t *testing.T) {
	file := os.Getenv("STACK_HELPER_PGID_FILE")
	if file == "" {
		t.Skip("helper process only")
	}
	p, err := Start(context.Background(), Spec{Name: "sleeper", Path: "/bin/sleep", Args: []string{"600"}, Watch: true})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(file, []byte(strconv.Itoa(p.Pgid)), 0o644)
	time.Sleep(10 * time.Minute)
}

func TestStartReportsEarlyExitWithLog(t *testing.T) {
	addr, _ := FreeAddr()
	log := filepath.Join(t.TempDir(), "x.log")
	_, err := Start(context.Background(), Spec{Name: "broken", Path: "/bin/sh", Args: []string{"-c", "echo boom >&2; exit 3"}, Addr: addr, LogFile: log})
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "boom") {
		t.Errorf("Start(broken) = %v, want an early-exit error quoting the log", err)
	}
}

func TestCheckGcloudEmulators(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	err := CheckGcloudEmulators()
	if !errors.Is(err, ErrMissingPrerequisite) {
		t.Fatalf("CheckGcloudEmulators() without PATH = %v, want ErrMissingPrerequisite", err)
	}
	for _, want := range []string{"gcloud is not on PATH", "java is not on PATH"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("CheckGcloudEmulators() = %v, want it to say %q", err, want)
		}
	}
}
