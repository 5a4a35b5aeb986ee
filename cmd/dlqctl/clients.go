package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/term"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/natsconn"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/outcome"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/secretbox"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// app is one dlqctl invocation: its streams, environment, tenant scope and
// the clients it builds on first use.
type app struct {
	stdout, stderr io.Writer
	stdin          io.Reader
	// lookup reads the environment (os.LookupEnv; a map in tests), always
	// through shared/config.
	lookup config.Lookup
	// isTTY reports whether stderr is a terminal (progress bar vs lines);
	// stdinTTY whether stdin is one (redrive may ask for confirmation);
	// stdoutTTY whether stdout is one (show --version escapes what a
	// terminal would act on); nil: ask the file.
	isTTY, stdinTTY, stdoutTTY func() bool
	now                        func() time.Time
	scope                      string // tenant the caller is limited to; "" = every tenant

	// Clients; tests set them, otherwise built lazily from the environment.
	fs        *firestore.Client
	st        *store.Store
	sched     *tasks.Scheduler
	box       *secretbox.Box
	jetstream func(ctx context.Context) (jetstream.JetStream, error)
	log       *slog.Logger

	// Test hooks: called around each redrive action (seen: entries passed
	// before it) — after its write-ahead checkpoint, and after the action
	// before the checkpoint records it; adjusts reconcile's thresholds
	// (grace periods) for audit.
	beforeRedriveAct, afterRedriveItem func(seen int)
	reconcileConfig                    func(*reconciler.Config)

	closers []func() error
	mu      sync.Mutex
}

func (a *app) close() {
	for _, c := range a.closers {
		_ = c()
	}
}

func (a *app) clock() time.Time {
	if a.now != nil {
		return a.now().UTC()
	}
	return time.Now().UTC()
}

// config is dlqctl's configuration; each command checks what it needs.
func (a *app) config() config.Dlqctl { return config.LoadDlqctl(a.lookup) }

// actor is who acts, recorded in entry history: --by, else DLQCTL_ACTOR,
// else dlqctl:<user>, in the approver role. dlqctl holds the store's and
// the queue's own credentials, so whoever runs it can do anything an
// approver can (and more: edit the policy); it acts as one, and says so in
// the history, rather than pretend to a role its credentials do not
// enforce.
func (a *app) actor(flagBy string) authority.Actor {
	return authority.Actor{Name: a.actorName(flagBy), Role: authority.Approver}
}

func (a *app) actorName(flagBy string) string {
	if flagBy != "" {
		return flagBy
	}
	cfg := a.config()
	if cfg.Actor != "" {
		return cfg.Actor
	}
	name := cfg.User
	if u, err := user.Current(); name == "" && err == nil {
		name = u.Username
	}
	if name == "" {
		name = "operator"
	}
	return "dlqctl:" + name
}

func (a *app) logger() *slog.Logger {
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	return a.log
}

// store returns the Firestore store (ADC, or the emulator when
// FIRESTORE_EMULATOR_HOST is set: the client library reads it).
func (a *app) store(ctx context.Context) (*store.Store, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.st != nil {
		return a.st, nil
	}
	until, err := config.LoadLegacyCompletionsUntil(a.lookup)
	if err != nil {
		return nil, err
	}
	if a.fs == nil {
		project := a.config().Project
		if project == "" {
			return nil, errors.New("GOOGLE_CLOUD_PROJECT is not set (eval \"$(make -s env)\" for the local stack)")
		}
		fs, err := firestore.NewClient(ctx, project)
		if err != nil {
			return nil, fmt.Errorf("firestore client for project %s: %w", project, err)
		}
		a.fs = fs
		a.closers = append(a.closers, fs.Close)
	}
	a.st = store.New(a.fs, store.WithLegacyCompletionsUntil(until))
	return a.st, nil
}

// scheduler returns the Cloud Tasks scheduler of TASKS_QUEUE.
func (a *app) scheduler() (*tasks.Scheduler, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sched != nil {
		return a.sched, nil
	}
	cfg := a.config().Tasks
	var missing []string
	for _, env := range []struct{ name, v string }{
		{"REPLAY_URL", cfg.ReplayURL}, {"TASKS_QUEUE", cfg.Queue}, {"TASKS_SERVICE_ACCOUNT", cfg.ServiceAccount},
	} {
		if env.v == "" {
			missing = append(missing, env.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("scheduling replays needs %s", strings.Join(missing, ", "))
	}
	a.sched = tasks.New(cfg)
	a.closers = append(a.closers, a.sched.Close)
	return a.sched, nil
}

// js returns the JetStream context, connecting on first use.
func (a *app) js(ctx context.Context) (jetstream.JetStream, error) {
	a.mu.Lock()
	if a.jetstream == nil {
		cfg := a.config().NATS
		cfg.Name = "jsdlq-dlqctl"
		l := natsconn.NewLazy(cfg)
		a.jetstream = l.JetStream
		a.closers = append(a.closers, l.Close)
	}
	f := a.jetstream
	a.mu.Unlock()
	return f(ctx)
}

// scheduling returns the store and the scheduler, for what writes entries
// and schedules their replays (operator actions, reconcile).
func (a *app) scheduling(ctx context.Context) (*store.Store, *tasks.Scheduler, error) {
	st, err := a.store(ctx)
	if err != nil {
		return nil, nil, err
	}
	sched, err := a.scheduler()
	if err != nil {
		return nil, nil, err
	}
	return st, sched, nil
}

// operator returns the operator actions; withRunner lets ReplayNow run an
// existing task at once.
func (a *app) operator(ctx context.Context, withRunner bool) (*operator.Operator, error) {
	st, sched, err := a.scheduling(ctx)
	if err != nil {
		return nil, err
	}
	var opts []operator.Option
	if withRunner {
		opts = append(opts, operator.WithRunner(sched))
	}
	return operator.New(st, sched, opts...), nil
}

// codeOf maps an error to the documented exit code: a command's own
// choice, a usage error, else the error's outcome (shared/outcome), the
// same the console and the tenant API answer with.
func codeOf(err error) int {
	var ec exitCoder
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ec):
		return ec.ExitCode()
	case errors.As(err, &ue):
		return exitUsage
	}
	return outcome.Of(err).Exit
}

func (a *app) stderrIsTTY() bool {
	if a.isTTY != nil {
		return a.isTTY()
	}
	return isTerminal(a.stderr)
}

func (a *app) stdinIsTTY() bool {
	if a.stdinTTY != nil {
		return a.stdinTTY()
	}
	return isTerminal(a.stdin)
}

func (a *app) stdoutIsTTY() bool {
	if a.stdoutTTY != nil {
		return a.stdoutTTY()
	}
	return isTerminal(a.stdout)
}

// isTerminal reports whether a stream is a terminal. A character device is
// not enough: /dev/null is one, and a script's `</dev/null` must be refused
// for want of --yes, not read as a "no".
func isTerminal(s any) bool {
	f, ok := s.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
