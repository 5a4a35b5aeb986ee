// Package stack starts and stops the local servers jsdlq runs against
// (docs/local-stack.md): each in its own process group, with a readiness check
// and a log file, stopped as a group because the gcloud emulator wrappers
// leave their Java children holding the port when only the wrapper is killed.
package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrPortInUse is returned when a server's port is already taken.
var ErrPortInUse = errors.New("stack: port in use")

// Spec describes one server.
type Spec struct {
	Name string
	Path string
	Args []string
	Env  []string // added to the current environment
	Dir  string
	// Addr is host:port the server listens on; readiness waits for it.
	Addr string
	// ReadyPath, when set, must answer 2xx over HTTP on Addr to be ready;
	// otherwise a TCP connect is enough.
	ReadyPath string
	LogFile   string
	// Watch kills the whole group as soon as this process exits, however it
	// exits (a test binary that panics or is killed by a timeout included).
	Watch bool
	// ReadyTimeout defaults to 60 s: the gcloud emulators start a JVM.
	ReadyTimeout time.Duration
}

// Process is a started server.
type Process struct {
	Spec
	Pgid int
	done chan struct{} // closed when the group leader exited (only for processes started here)
}

// Start checks the port is free, starts the server in a new process group and
// waits until it is ready. On failure nothing is left running.
func Start(ctx context.Context, s Spec) (*Process, error) {
	if s.Addr != "" {
		if err := CheckFree(s.Addr); err != nil {
			return nil, fmt.Errorf("start %s: %w", s.Name, err)
		}
	}
	var logw *os.File
	if s.LogFile != "" {
		if err := os.MkdirAll(filepath.Dir(s.LogFile), 0o755); err != nil {
			return nil, fmt.Errorf("start %s: %w", s.Name, err)
		}
		f, err := os.OpenFile(s.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("start %s: open log: %w", s.Name, err)
		}
		defer f.Close()
		logw = f
	}
	path, args := s.Path, s.Args
	if s.Watch {
		// The watchdog shell leads the group; it polls its parent and takes
		// the group down with it when the parent is gone.
		script := `p=$1; shift; "$@" & c=$!; while kill -0 "$p" 2>/dev/null && kill -0 "$c" 2>/dev/null; do sleep 0.5; done; kill -KILL 0`
		args = append([]string{"-c", script, "watchdog", strconv.Itoa(os.Getpid()), path}, args...)
		path = "/bin/sh"
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(), s.Env...)
	cmd.Stdout, cmd.Stderr = logw, logw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", s.Name, s.Path, err)
	}
	p := &Process{Spec: s, Pgid: cmd.Process.Pid, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	if err := p.waitReady(ctx); err != nil {
		_ = p.Stop()
		return nil, err
	}
	return p, nil
}

func (p *Process) waitReady(ctx context.Context) error {
	if p.Addr == "" {
		return nil
	}
	timeout := p.ReadyTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if Ready(ctx, p.Addr, p.ReadyPath) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("start %s: exited before it was ready%s", p.Name, logHint(p.LogFile))
		case <-ctx.Done():
			return fmt.Errorf("start %s: not ready on %s after %s%s", p.Name, p.Addr, timeout, logHint(p.LogFile))
		case <-tick.C:
		}
	}
}

func logHint(file string) string {
	if file == "" {
		return ""
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return fmt.Sprintf(" (log %s ends:\n  %s)", file, strings.Join(lines, "\n  "))
}

// Ready reports whether a server answers on addr: a TCP connect, or a 2xx for
// GET path when path is set.
func Ready(ctx context.Context, addr, path string) bool {
	if path == "" {
		d := net.Dialer{Timeout: time.Second}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode/100 == 2
}

// Stop ends the process group: SIGTERM, then SIGKILL for what is left after
// five seconds.
func (p *Process) Stop() error {
	err := StopGroup(p.Pgid, 5*time.Second)
	if p.done != nil {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
	}
	return err
}

// StopGroup signals the process group pgid and waits until it is gone.
func StopGroup(pgid int, grace time.Duration) error {
	if pgid <= 1 {
		return fmt.Errorf("stack: refusing to signal process group %d", pgid)
	}
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return fmt.Errorf("stop group %d: %w", pgid, err)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !GroupAlive(pgid) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill group %d: %w", pgid, err)
	}
	for i := 0; i < 50 && GroupAlive(pgid); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if GroupAlive(pgid) {
		return fmt.Errorf("stack: process group %d survived SIGKILL", pgid)
	}
	return nil
}

// GroupAlive reports whether any non-zombie process of group pgid is left.
func GroupAlive(pgid int) bool {
	pids, err := GroupPIDs(pgid)
	if err != nil {
		return syscall.Kill(-pgid, 0) == nil
	}
	return len(pids) > 0
}

// GroupPIDs lists the non-zombie processes of group pgid, read from /proc.
func GroupPIDs(pgid int) ([]int, error) {
	procs, err := processes()
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, p := range procs {
		if p.group() == pgid && p.stat[0] != "Z" {
			pids = append(pids, p.pid)
		}
	}
	return pids, nil
}

// GroupCPU is the user and system time the processes of group pgid have
// used so far, read from /proc (0 when it cannot be read). Zombies count:
// their time is theirs until they are reaped.
func GroupCPU(pgid int) time.Duration {
	procs, _ := processes()
	var ticks int64
	for _, p := range procs {
		if p.group() == pgid && len(p.stat) >= 13 {
			user, _ := strconv.ParseInt(p.stat[11], 10, 64)
			system, _ := strconv.ParseInt(p.stat[12], 10, 64)
			ticks += user + system
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// process is one process in /proc: its pid and the fields of its stat file
// after the parenthesised command (state ppid pgrp … utime stime …).
type process struct {
	pid  int
	stat []string
}

func (p process) group() int {
	if len(p.stat) < 3 {
		return 0
	}
	g, _ := strconv.Atoi(p.stat[2])
	return g
}

// processes reads every process from /proc; one that ends meanwhile is left
// out.
func processes() ([]process, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var procs []process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command may hold spaces and parentheses: the fields start
		// after its last ')'.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(string(stat[i+1:])); len(f) > 0 {
			procs = append(procs, process{pid: pid, stat: f})
		}
	}
	return procs, nil
}

// FreeAddr returns a loopback address with a port nobody listens on now.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// FreeAddrs returns n distinct loopback addresses nobody listens on now. It
// holds each port until it has all of them: picked one at a time and let go
// between picks, the kernel may hand out the same free port twice, and two
// servers of one stack would then race for it.
func FreeAddrs(n int) ([]string, error) {
	addrs := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find free port: %w", err)
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

// FreeAddrPair returns a free loopback address, not in taken, whose next
// port is free and not in taken either: the Cloud Tasks emulator serves its
// token keys on port+1, where AUTH_MODE=emulator looks for them.
func FreeAddrPair(taken map[string]bool) (string, error) {
	for range 50 {
		addr, err := FreeAddr()
		if err != nil {
			return "", err
		}
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		next := net.JoinHostPort(host, strconv.Itoa(p+1))
		if taken[addr] || taken[next] || CheckFree(next) != nil {
			continue
		}
		return addr, nil
	}
	return "", errors.New("stack: no free pair of loopback ports")
}

// CheckFree returns ErrPortInUse, naming the holder when it can be found,
// when something already listens on addr.
func CheckFree(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err == nil {
		l.Close()
		return nil
	}
	_, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	if holder := PortHolder(n); holder != "" {
		return fmt.Errorf("%w: %s is held by %s", ErrPortInUse, addr, holder)
	}
	return fmt.Errorf("%w: %s: %v", ErrPortInUse, addr, err)
}
