package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/secretbox"
	"github.com/jsdlq/jsdlq/tools/stack"
)

// service is one server of the local stack.
type service struct {
	name      string
	port      int
	readyPath string
	// build, when set, is the package built into .local/bin/<name>.
	build string
	// skip explains why the service is not started yet (a part not built).
	skip string
	// live: the service runs, on port (adoptRunning read its state file).
	live bool
	spec func(s *localStack, addr string) stack.Spec
}

type localStack struct {
	root, binDir, runDir, logDir string
	project, location            string
	services                     []service
}

// state is what `up` leaves in .local/run/<name>.json for down and status.
type state struct {
	Name      string    `json:"name"`
	Pgid      int       `json:"pgid"`
	Addr      string    `json:"addr"`
	ReadyPath string    `json:"ready_path,omitempty"`
	Log       string    `json:"log"`
	Started   time.Time `json:"started"`
	// Project is the project the stack was started for: env prints it.
	Project string `json:"project,omitempty"`
}

func envPort(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	p, err := strconv.Atoi(v)
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("%s=%q is not a port number", name, v)
	}
	return p, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func newStack(root string) (*localStack, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	local := filepath.Join(abs, ".local")
	s := &localStack{
		root: abs, binDir: filepath.Join(local, "bin"), runDir: filepath.Join(local, "run"), logDir: filepath.Join(local, "log"),
		project:  envOr("GOOGLE_CLOUD_PROJECT", "jsdlq-local"),
		location: envOr("TASKS_LOCATION", "us-central1"),
	}
	ports := map[string]int{}
	var errs []error
	for _, p := range []struct {
		env, name string
		def       int
	}{
		{"FIRESTORE_PORT", "firestore", 8681}, {"PUBSUB_PORT", "pubsub", 8682}, {"NATS_PORT", "nats", 4222},
		{"CLOUD_TASKS_PORT", "cloudtasks", 8123}, {"FUNCTIONS_PORT", "functions", 8080}, {"BRIDGE_PORT", "bridge", 8090},
		{"CONSOLE_PORT", "console", console.DefaultPort},
	} {
		port, err := envPort(p.env, p.def)
		errs = append(errs, err)
		ports[p.name] = port
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s.services = []service{
		{name: "firestore", port: ports["firestore"], readyPath: "/", spec: func(s *localStack, addr string) stack.Spec {
			return stack.FirestoreEmulator(addr, s.logFile("firestore"))
		}},
		{name: "pubsub", port: ports["pubsub"], readyPath: "/", spec: func(s *localStack, addr string) stack.Spec {
			return stack.PubSubEmulator(addr, s.logFile("pubsub"))
		}},
		{name: "nats", port: ports["nats"], build: "github.com/nats-io/nats-server/v2", spec: func(s *localStack, addr string) stack.Spec {
			host, port, _ := net.SplitHostPort(addr)
			return stack.Spec{Path: s.bin("nats"), Args: []string{"-js", "-a", host, "-p", port, "-sd", filepath.Join(s.root, ".local", "data", "nats"), "-n", "jsdlq-local"}}
		}},
		{name: "cloudtasks", port: ports["cloudtasks"], build: "./cmd/cloudtasks-emulator", spec: func(s *localStack, addr string) stack.Spec {
			return stack.Spec{Path: s.bin("cloudtasks"), Args: []string{"--host-port=" + addr, "--data-dir=" + filepath.Join(s.root, ".local", "data", "cloudtasks")}}
		}},
		{name: "functions", port: ports["functions"], build: "./cmd/functions", spec: func(s *localStack, addr string) stack.Spec {
			_, port, _ := net.SplitHostPort(addr)
			return stack.Spec{Path: s.bin("functions"), Env: append(s.clientEnv(), "PORT="+port)}
		}},
		{name: "bridge", port: ports["bridge"], readyPath: "/healthz", build: "./cmd/bridge", spec: func(s *localStack, addr string) stack.Spec {
			_, port, _ := net.SplitHostPort(addr)
			return stack.Spec{Path: s.bin("bridge"), Env: append(s.clientEnv(), "PORT="+port)}
		}},
		// The console acts as one fixed local operator, an approver (the
		// local stack's operator may do everything): CONSOLE_AUTH=local is
		// refused without the emulators and on Cloud Run (docs/console.md).
		// Its triage endpoint takes the triage agent's answers, proven by
		// tokens the Cloud Tasks emulator signs (stack.MintTriageToken).
		{name: "console", port: ports["console"], readyPath: "/healthz", build: "./cmd/console", spec: func(s *localStack, addr string) stack.Spec {
			host, port, _ := net.SplitHostPort(addr)
			env := append(s.clientEnv(), "PORT="+port, "CONSOLE_AUTH="+console.AuthLocal, "CONSOLE_OPERATOR="+localOperator, "CONSOLE_ROLE="+string(authority.Approver))
			return stack.Spec{Path: s.bin("console"), Args: []string{"--host", host},
				Env: append(env, s.endpoints().ConsoleTriageEnv("http://"+addr)...)}
		}},
	}
	s.adoptRunning()
	for i, svc := range s.services {
		if strings.HasPrefix(svc.build, "./") {
			if _, err := os.Stat(filepath.Join(abs, svc.build, "main.go")); err != nil {
				s.services[i].skip = svc.build + " is not built yet"
			}
		}
	}
	return s, nil
}

// adoptRunning takes each running service's port from its state file: a
// stack started with other ports (FIRESTORE_PORT=…) is where env, with and
// every client must point, whatever this shell's variables say, or a client
// in a new shell would talk to whatever holds the default port.
func (s *localStack) adoptRunning() {
	for i, svc := range s.services {
		st, ok := s.readState(svc.name)
		if !ok || !stack.GroupAlive(st.Pgid) {
			continue
		}
		_, port, err := net.SplitHostPort(st.Addr)
		if p, perr := strconv.Atoi(port); err == nil && perr == nil && p > 0 && p <= 65535 {
			s.services[i].port, s.services[i].live = p, true
		}
		if st.Project != "" {
			s.project = st.Project
		}
	}
}

// live reports whether any service of the stack runs (its state file names
// a live process group).
func (s *localStack) live() bool {
	for _, svc := range s.services {
		if svc.live {
			return true
		}
	}
	return false
}

func (s *localStack) bin(name string) string     { return filepath.Join(s.binDir, name) }
func (s *localStack) logFile(name string) string { return filepath.Join(s.logDir, name+".log") }
func (s *localStack) addr(name string) string {
	for _, svc := range s.services {
		if svc.name == name {
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(svc.port))
		}
	}
	return ""
}

func (s *localStack) queue() string {
	return fmt.Sprintf("projects/%s/locations/%s/queues/dlq-replay", s.project, s.location)
}

// webhookQueue is the webhook deliveries' queue.
func (s *localStack) webhookQueue() string {
	return fmt.Sprintf("projects/%s/locations/%s/queues/dlq-webhooks", s.project, s.location)
}

// endpoints are where the local stack's servers listen.
func (s *localStack) endpoints() stack.Endpoints {
	return stack.Endpoints{Project: s.project, Firestore: s.addr("firestore"), PubSub: s.addr("pubsub"),
		CloudTasks: s.addr("cloudtasks"), NATS: s.addr("nats"), Functions: s.addr("functions"), Queue: s.queue(),
		WebhookQueue: s.webhookQueue(), SecretsKeyFile: s.secretsKey()}
}

// clientEnv points every client at the local stack (docs/configuration.md,
// "Everywhere").
func (s *localStack) clientEnv() []string {
	env := s.endpoints().ClientEnv()
	// Local mode allows loopback endpoints: every port of the stack itself
	// stays refused.
	var own []string
	for _, svc := range s.services {
		own = append(own, "http://"+s.addr(svc.name))
	}
	return append(env, "WEBHOOK_DENY_URLS="+strings.Join(own, ","))
}

// secretsKey is the local key file that seals the webhooks' signing
// secrets: up makes it once; it outlives the stores (which start empty on
// every up) as a production key outlives its data.
func (s *localStack) secretsKey() string { return filepath.Join(s.root, ".local", "secrets.key") }

// localOperator is who acts in the local console's entry history.
const localOperator = "local-operator"

// printEnv writes the client variables of the running stack (its ports,
// adoptRunning), or, when none runs, of the stack up would start; stderr
// then says so, since a client pointed at nothing would find nothing.
func (s *localStack) printEnv(w, stderr io.Writer) {
	if !s.live() {
		fmt.Fprintln(stderr, "stackctl: no local stack is running here (make up): these are the ports it would use")
	}
	env := s.clientEnv()
	if s.running("console") {
		env = append(env, "CONSOLE_URL=http://"+s.addr("console"))
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(w, "export %s=%q\n", k, v)
	}
}

func (s *localStack) statePath(name string) string { return filepath.Join(s.runDir, name+".json") }

func (s *localStack) readState(name string) (state, bool) {
	b, err := os.ReadFile(s.statePath(name))
	if err != nil {
		return state{}, false
	}
	var st state
	if json.Unmarshal(b, &st) != nil || st.Pgid <= 1 {
		return state{}, false
	}
	return st, true
}

func (s *localStack) build(ctx context.Context, w io.Writer) error {
	var pkgs, outs []string
	for _, svc := range s.services {
		if svc.build != "" && svc.skip == "" {
			pkgs = append(pkgs, svc.build)
			outs = append(outs, svc.name)
		}
	}
	if err := os.MkdirAll(s.binDir, 0o755); err != nil {
		return err
	}
	// One go build per binary, all at once: they share the build cache,
	// and a warm build is mostly the links, which then run side by side
	// (an up-to-date binary is not linked again).
	errs := make([]error, len(pkgs))
	var wg sync.WaitGroup
	for i, pkg := range pkgs {
		fmt.Fprintf(w, "  build %-10s %s\n", outs[i], pkg)
		wg.Go(func() { errs[i] = stack.Build(ctx, s.root, s.bin(outs[i]), pkg) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (s *localStack) up(ctx context.Context, w io.Writer) error {
	if err := stack.CheckGcloudEmulators(); err != nil {
		return err
	}
	for _, svc := range s.services {
		if st, ok := s.readState(svc.name); ok && stack.GroupAlive(st.Pgid) {
			return fmt.Errorf("%s is already running (pgid %d on %s); run 'make down' first", svc.name, st.Pgid, st.Addr)
		}
	}
	// Check every port before starting anything, so a clash is reported
	// with its holder and nothing is left half up.
	var busy []error
	for _, svc := range s.services {
		if svc.skip == "" {
			if err := stack.CheckFree(s.addr(svc.name)); err != nil {
				busy = append(busy, fmt.Errorf("%s: %w (set %s to use another port)", svc.name, err, portEnv(svc.name)))
			}
		}
	}
	if err := errors.Join(busy...); err != nil {
		return err
	}
	// Firestore and Pub/Sub keep nothing across a restart, so JetStream and
	// Cloud Tasks state left by an earlier run would only point at entries
	// that no longer exist: every `up` starts from empty stores.
	if os.Getenv("KEEP_DATA") == "" {
		if err := os.RemoveAll(filepath.Join(s.root, ".local", "data")); err != nil {
			return fmt.Errorf("clear .local/data: %w", err)
		}
	}
	if created, err := secretbox.CreateLocalKey(s.secretsKey()); err != nil {
		return err
	} else if created {
		fmt.Fprintf(w, "created the local secrets key %s (it seals the webhooks' signing secrets)\n", rel(s.root, s.secretsKey()))
	}
	for _, d := range []string{s.runDir, s.logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// The emulators (no binary of ours) take seconds to start and need
	// nothing built: they start, side by side, while the binaries build;
	// the rest starts in order once they are built.
	var emulators, built []service
	for _, svc := range s.services {
		switch {
		case svc.skip != "":
			fmt.Fprintf(w, "  skip  %-10s (%s)\n", svc.name, svc.skip)
		case svc.build == "":
			emulators = append(emulators, svc)
		default:
			built = append(built, svc)
		}
	}
	fmt.Fprintln(w, "building binaries into .local/bin; the emulators start meanwhile")
	// Each job's lines are written whole when it is done.
	var mu sync.Mutex
	job := func(run func(io.Writer) error) error {
		var out bytes.Buffer
		err := run(&out)
		mu.Lock()
		defer mu.Unlock()
		w.Write(out.Bytes())
		return err
	}
	buildCtx, cancelBuild := context.WithCancel(ctx)
	defer cancelBuild()
	buildDone := make(chan error, 1)
	go func() { buildDone <- job(func(out io.Writer) error { return s.build(buildCtx, out) }) }()
	errs := make([]error, len(emulators))
	var wg sync.WaitGroup
	for i, svc := range emulators {
		wg.Go(func() { errs[i] = job(func(out io.Writer) error { return s.start(ctx, svc, out) }) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		cancelBuild()
	}
	if err := errors.Join(append(errs, <-buildDone)...); err != nil {
		_ = s.down(io.Discard)
		return fmt.Errorf("%w\n(stack stopped again)", err)
	}
	for _, svc := range built {
		if err := s.start(ctx, svc, w); err != nil {
			_ = s.down(io.Discard)
			return fmt.Errorf("%w\n(stack stopped again)", err)
		}
	}
	fmt.Fprintln(w, "\nthe local stack is up; point a shell at it with:  eval \"$(go run ./tools/stackctl env)\"")
	if s.running("console") {
		fmt.Fprintf(w, "the operator console (local mode, acting as %s): http://%s\n", localOperator, s.addr("console"))
	}
	return nil
}

// start starts one service, records its state for down and status, and
// provisions what the pipeline expects of it; w gets its lines.
func (s *localStack) start(ctx context.Context, svc service, w io.Writer) error {
	addr := s.addr(svc.name)
	spec := svc.spec(s, addr)
	spec.Name, spec.Addr, spec.ReadyPath = svc.name, addr, svc.readyPath
	if spec.LogFile == "" {
		spec.LogFile = s.logFile(svc.name)
	}
	fmt.Fprintf(w, "  start %-10s on %s ", svc.name, addr)
	t0 := time.Now()
	p, err := stack.Start(ctx, spec)
	if err != nil {
		fmt.Fprintln(w, "FAILED")
		return err
	}
	fmt.Fprintf(w, "ready in %.1fs (pgid %d, log %s)\n", time.Since(t0).Seconds(), p.Pgid, rel(s.root, spec.LogFile))
	st := state{Name: svc.name, Pgid: p.Pgid, Addr: addr, ReadyPath: svc.readyPath, Log: spec.LogFile, Started: time.Now().UTC(), Project: s.project}
	b, _ := json.Marshal(st)
	if err := os.WriteFile(s.statePath(svc.name), b, 0o644); err != nil {
		_ = stack.StopGroup(p.Pgid, 5*time.Second)
		return err
	}
	if err := s.provision(ctx, svc.name, w); err != nil {
		return fmt.Errorf("provision after %s: %w", svc.name, err)
	}
	return nil
}

func portEnv(name string) string {
	return map[string]string{"firestore": "FIRESTORE_PORT", "pubsub": "PUBSUB_PORT", "nats": "NATS_PORT",
		"cloudtasks": "CLOUD_TASKS_PORT", "functions": "FUNCTIONS_PORT", "bridge": "BRIDGE_PORT", "console": "CONSOLE_PORT"}[name]
}

func rel(root, path string) string {
	if r, err := filepath.Rel(root, path); err == nil {
		return r
	}
	return path
}

func (s *localStack) down(w io.Writer) error {
	var errs []error
	// Reverse order: the console, bridge and functions go before what they use.
	for i := len(s.services) - 1; i >= 0; i-- {
		name := s.services[i].name
		st, ok := s.readState(name)
		if !ok {
			continue
		}
		if stack.GroupAlive(st.Pgid) {
			fmt.Fprintf(w, "  stop  %-10s (pgid %d)\n", name, st.Pgid)
			if err := stack.StopGroup(st.Pgid, 10*time.Second); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				continue
			}
		}
		os.Remove(s.statePath(name))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintln(w, "the local stack is down")
	return nil
}

func (s *localStack) status(ctx context.Context, w io.Writer) bool {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tSTATE\tADDRESS\tPGID\tUP SINCE\tLOG")
	allUp := true
	for _, svc := range s.services {
		st, ok := s.readState(svc.name)
		switch {
		case svc.skip != "":
			fmt.Fprintf(tw, "%s\tnot built\t-\t-\t-\t%s\n", svc.name, svc.skip)
		case !ok:
			allUp = false
			fmt.Fprintf(tw, "%s\tdown\t%s\t-\t-\t-\n", svc.name, s.addr(svc.name))
		case !stack.GroupAlive(st.Pgid):
			allUp = false
			fmt.Fprintf(tw, "%s\texited\t%s\t%d\t-\t%s\n", svc.name, st.Addr, st.Pgid, rel(s.root, st.Log))
		case !stack.Ready(ctx, st.Addr, st.ReadyPath):
			allUp = false
			fmt.Fprintf(tw, "%s\tnot ready\t%s\t%d\t%s\t%s\n", svc.name, st.Addr, st.Pgid, st.Started.Format(time.TimeOnly), rel(s.root, st.Log))
		default:
			fmt.Fprintf(tw, "%s\tup\t%s\t%d\t%s\t%s\n", svc.name, st.Addr, st.Pgid, st.Started.Format(time.TimeOnly), rel(s.root, st.Log))
		}
	}
	tw.Flush()
	return allUp
}

func (s *localStack) logs(w io.Writer, n int, names []string) error {
	if len(names) == 0 {
		for _, svc := range s.services {
			names = append(names, svc.name)
		}
	}
	for _, name := range names {
		f, err := os.Open(s.logFile(name))
		if err != nil {
			continue
		}
		var lines []string
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if len(lines) > n {
				lines = lines[1:]
			}
		}
		f.Close()
		fmt.Fprintf(w, "==> %s <==\n%s\n", rel(s.root, s.logFile(name)), strings.Join(lines, "\n"))
	}
	return nil
}

// with runs one command against emulators on free ports, stopping them
// afterwards whatever happens to the command (they are watched).
func (s *localStack) with(ctx context.Context, argv []string, stdout, stderr io.Writer) (int, error) {
	if err := stack.CheckGcloudEmulators(); err != nil {
		return 0, err
	}
	logDir := filepath.Join(s.logDir, "test")
	env := []string{"JSDLQ_TEST_LOG_DIR=" + logDir}
	for _, mk := range []struct {
		env  string
		spec func(addr, log string) stack.Spec
	}{
		{"FIRESTORE_EMULATOR_HOST", stack.FirestoreEmulator},
		{"PUBSUB_EMULATOR_HOST", stack.PubSubEmulator},
	} {
		addr, err := stack.FreeAddr()
		if err != nil {
			return 0, err
		}
		spec := mk.spec(addr, filepath.Join(logDir, strings.ToLower(mk.env)+".log"))
		spec.Watch = true
		p, err := stack.Start(ctx, spec)
		if err != nil {
			return 0, err
		}
		defer p.Stop()
		fmt.Fprintf(stderr, "stackctl: %s emulator on %s (pgid %d)\n", spec.Name, addr, p.Pgid)
		env = append(env, mk.env+"="+addr)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = stdout, stderr, os.Stdin
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	if err != nil {
		return 0, err
	}
	return 0, nil
}
