// Package testenv gives integration tests the real servers they run against:
// the gcloud Firestore and Pub/Sub emulators, started once per test binary on
// free loopback ports (or reused when FIRESTORE_EMULATOR_HOST /
// PUBSUB_EMULATOR_HOST are already set, as `make test` does), and embedded
// JetStream servers. Tests are kept apart by unique project ids and names, not
// by fresh servers. Everything started here is stopped when the binary exits,
// however it exits: the emulators run under a watchdog that kills their process
// group once the test binary is gone.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"cloud.google.com/go/pubsub/v2"
	"github.com/jsdlq/jsdlq/tools/stack"
)

// Main runs the tests and stops every server started for them.
func Main(m *testing.M) {
	code := m.Run()
	StopAll()
	os.Exit(code)
}

var (
	mu      sync.Mutex
	started []*stack.Process
	shared  = map[string]*sharedEmulator{}
)

type sharedEmulator struct {
	once sync.Once
	host string
	err  error
}

// StopAll stops the servers this binary started and removes the binaries
// it built; Main calls it.
func StopAll() {
	mu.Lock()
	procs := started
	started = nil
	mu.Unlock()
	for _, p := range procs {
		_ = p.Stop()
	}
	removeBuilt()
}

func track(p *stack.Process) {
	mu.Lock()
	started = append(started, p)
	mu.Unlock()
}

func untrack(p *stack.Process) {
	mu.Lock()
	defer mu.Unlock()
	for i, q := range started {
		if q == p {
			started = append(started[:i], started[i+1:]...)
			return
		}
	}
}

// logDir is where emulator logs of test runs go; JSDLQ_TEST_LOG_DIR
// overrides it (make test points it into .local/).
func logDir() string {
	if d := os.Getenv("JSDLQ_TEST_LOG_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "jsdlq-test-logs")
}

func sharedHost(t testing.TB, envVar string, spec func(addr, logFile string) stack.Spec) string {
	t.Helper()
	SkipShort(t, "the gcloud emulators")
	if h := os.Getenv(envVar); h != "" {
		return h
	}
	mu.Lock()
	s := shared[envVar]
	if s == nil {
		s = &sharedEmulator{}
		shared[envVar] = s
	}
	mu.Unlock()
	s.once.Do(func() {
		if err := stack.CheckGcloudEmulators(); err != nil {
			s.err = err
			return
		}
		addr, err := stack.FreeAddr()
		if err != nil {
			s.err = err
			return
		}
		sp := spec(addr, filepath.Join(logDir(), fmt.Sprintf("%s-%d.log", strings.ToLower(envVar), os.Getpid())))
		sp.Watch = true
		p, err := stack.Start(context.Background(), sp)
		if err != nil {
			s.err = err
			return
		}
		track(p)
		s.host = addr
		// Client libraries find the emulators through these variables.
		os.Setenv(envVar, addr)
	})
	if s.err != nil {
		t.Fatalf("testenv: %v", s.err)
	}
	return s.host
}

// FirestoreHost returns the host:port of the shared Firestore emulator.
func FirestoreHost(t testing.TB) string {
	return sharedHost(t, "FIRESTORE_EMULATOR_HOST", stack.FirestoreEmulator)
}

// PubSubHost returns the host:port of the shared Pub/Sub emulator.
func PubSubHost(t testing.TB) string {
	return sharedHost(t, "PUBSUB_EMULATOR_HOST", stack.PubSubEmulator)
}

// Project returns a project id unique to this test. The emulators keep
// projects apart, so a test sees only its own documents, topics and
// subscriptions while using the production collection names.
func Project(t testing.TB) string {
	return "t-" + Name(t, "")
}

// Name returns a name unique to this test, usable as a Firestore collection,
// Pub/Sub topic, NATS stream or project id: lower-case letters, digits and
// hyphens, at most 30 characters, beginning with prefix.
func Name(t testing.TB, prefix string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(t.Name()) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	base := strings.Trim(b.String(), "-")
	if max := 30 - len(prefix) - 7; len(base) > max {
		base = base[:max]
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	name := strings.Trim(prefix+base, "-") + "-" + hex.EncodeToString(suffix)
	return strings.TrimLeft(name, "-")
}

// Context returns a context cancelled when the test ends, with a deadline
// that keeps a hung emulator call from eating the whole test timeout.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Firestore returns a client of the shared Firestore emulator for a project
// of this test's own, and that project id.
func Firestore(t testing.TB) (*firestore.Client, string) {
	t.Helper()
	FirestoreHost(t)
	return projectClient(t, "firestore", func(ctx context.Context, project string) (*firestore.Client, error) {
		return firestore.NewClient(ctx, project)
	})
}

// PubSub returns a client of the shared Pub/Sub emulator for a project of this
// test's own, and that project id.
func PubSub(t testing.TB) (*pubsub.Client, string) {
	t.Helper()
	PubSubHost(t)
	return projectClient(t, "pubsub", func(ctx context.Context, project string) (*pubsub.Client, error) {
		return pubsub.NewClient(ctx, project)
	})
}

// projectClient dials a client for a project of the test's own (the
// emulator host is in the environment by now), closed when the test ends.
func projectClient[C interface{ Close() error }](t testing.TB, what string, dial func(context.Context, string) (C, error)) (C, string) {
	t.Helper()
	project := Project(t)
	c, err := dial(context.Background(), project)
	if err != nil {
		t.Fatalf("testenv: %s client: %v", what, err)
	}
	t.Cleanup(func() { c.Close() })
	return c, project
}

// Emulator is a gcloud emulator of a test's own, for tests that stop and
// restart it; it keeps its address across restarts.
type Emulator struct {
	Host string
	spec stack.Spec
	proc *stack.Process
}

// NewPubSubEmulator starts a Pub/Sub emulator only this test uses, for tests
// of outages. It comes back on the same address after Stop/Start but, like
// the real emulator, without its topics and subscriptions. It is stopped when
// the test ends.
// Clients must be pointed at it explicitly (option.WithEndpoint or by
// setting PUBSUB_EMULATOR_HOST with t.Setenv).
func NewPubSubEmulator(t testing.TB) *Emulator {
	t.Helper()
	SkipShort(t, "a Pub/Sub emulator of its own")
	if err := stack.CheckGcloudEmulators(); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	addr, err := stack.FreeAddr()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	e := &Emulator{Host: addr, spec: stack.PubSubEmulator(addr,
		filepath.Join(logDir(), fmt.Sprintf("pubsub-%s.log", Name(t, ""))))}
	e.spec.Watch = true
	e.Start(t)
	t.Cleanup(e.Stop)
	return e
}

// Start (re)starts the emulator and waits until it is ready.
func (e *Emulator) Start(t testing.TB) {
	t.Helper()
	if e.proc != nil {
		return
	}
	p, err := stack.Start(context.Background(), e.spec)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	track(p)
	e.proc = p
}

// Stop stops the emulator's whole process group.
func (e *Emulator) Stop() {
	if e.proc == nil {
		return
	}
	_ = e.proc.Stop()
	untrack(e.proc)
	e.proc = nil
}
