// Command demo is `make demo`: on a running local stack (make up) it creates
// the TASKS work stream, applies a demo policy with short delays, runs the
// example agent (examples/agent) as a fleet of seven, publishes a few hundred
// tasks through agentkit's Publish, of which a quarter fail in the field
// figures' proportions (docs/SCALING.md) and two learnable classes fail by
// what they are, waits until every task has settled (the fleet's "ceo" answers
// the triage tasks of the entries that need a human, through agentkit), learns
// the predictions, publishes the same mix again with the predictions on, runs
// the reconcile audit and prints the pipeline's own summary read back from
// Firestore, the two phases side by side. It exits non-zero when a task's work
// ran twice, when a captured dead message has no entry, when the tasks did not
// settle in time, or when the predictions did not halve the learnable classes'
// dead tasks.
//
//	eval "$(go run ./tools/stackctl env)"; go run ./tools/demo [--tasks 300] [--dead-rate 0.25]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/clientopt"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/natsconn"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/tools/stack"
)

const workStream = event.DefaultWorkStream

// typescriptAgent is the agent of the fleet that runs on the TypeScript
// agentkit (clients/typescript/examples/agent.ts) instead of examples/agent.
const typescriptAgent = "frontend"

type options struct {
	tasks    int
	deadRate float64
	seed     uint64
	timeout  time.Duration
	root     string
	keep     bool
}

func main() {
	var o options
	flag.IntVar(&o.tasks, "tasks", 300, "tasks to publish in each of the two phases")
	flag.Float64Var(&o.deadRate, "dead-rate", 0.25, "share of tasks that fail (the field reports' mix within them)")
	flag.Uint64Var(&o.seed, "seed", uint64(time.Now().UnixNano()), "random seed of the plan and the agents")
	flag.DurationVar(&o.timeout, "timeout", 140*time.Second, "how long to wait for every task to settle")
	flag.StringVar(&o.root, "root", ".", "repository root (binaries go to .local/bin, logs to .local/log)")
	flag.Parse()
	o.keep = os.Getenv("KEEP") == "1"
	if o.tasks < 10 || o.deadRate <= 0 || o.deadRate >= 1 {
		fmt.Fprintln(os.Stderr, "demo: --tasks must be at least 10 and --dead-rate in (0, 1)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, o, os.Stdout)
	stop()
	os.Exit(code)
}

// demo holds the clients of one run.
type demo struct {
	o      options
	out    io.Writer
	run    string
	start  time.Time
	st     *store.Store
	js     jetstream.JetStream
	sched  *tasks.Scheduler
	notify *notify.Flusher
	// kit publishes the tasks (agentkit's Publish and its pre-flight).
	kit *agentkit.Kit
	// caughtUp counts the notifications the demo's scheduled flushes (as
	// reconcile's) published: those classify and replay did not publish at
	// once.
	caughtUp int
	agents   []*stack.Process
	logDir   string
	binDir   string
	tsDir    string // clients/typescript, prepared by build

	captureFrom map[string]uint64 // stream -> first sequence of this run
	captured    map[string]bool
	cursor      map[string]uint64
}

func (d *demo) logf(format string, args ...any) {
	fmt.Fprintf(d.out, "[%5.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, o options, out io.Writer) int {
	d := &demo{o: o, out: out, start: time.Now(), captured: map[string]bool{}, cursor: map[string]uint64{}, captureFrom: map[string]uint64{}}
	d.run = strconv.FormatInt(time.Now().Unix()%1_000_000, 10)
	root, _ := filepath.Abs(o.root)
	d.logDir, d.binDir = filepath.Join(root, ".local", "log"), filepath.Join(root, ".local", "bin")
	s, err := d.execute(ctx)
	d.stopAgents()
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		if s != nil {
			s.print(out)
		}
		return 1
	}
	s.print(out)
	fmt.Fprintf(out, "\ndemo finished in %s: ", time.Since(d.start).Round(100*time.Millisecond))
	if !s.ok() {
		fmt.Fprintln(out, "FAILED (duplicates executed, lost or unsettled tasks, or predictions that fell short, above)")
		return 1
	}
	fmt.Fprintf(out, "0 duplicates executed, 0 lost; the learnable classes' dead tasks %d → %d with predictions on\n",
		s.Predictions.Learning[classAll].Dead, s.Predictions.Predicting[classAll].Dead)
	if o.keep {
		d.printExplore()
		if url := os.Getenv("CONSOLE_URL"); url != "" {
			fmt.Fprintf(out, "The operator console serves this run's entries at %s\n", url)
		}
	}
	return 0
}

func (d *demo) execute(ctx context.Context) (*summary, error) {
	project := os.Getenv("GOOGLE_CLOUD_PROJECT")
	if project == "" || os.Getenv("FIRESTORE_EMULATOR_HOST") == "" {
		return nil, errors.New(`the stack's environment is not set: eval "$(go run ./tools/stackctl env)" (make demo does)`)
	}
	fs, err := store.Open(ctx, project)
	if err != nil {
		return nil, err
	}
	defer fs.Close()
	d.st = store.New(fs)
	// The counters of the run's first hour before it began: the product's
	// figures of the run are what the hours hold at its end less these.
	outcomesBefore, err := d.outcomesSince(ctx, d.start)
	if err != nil {
		return nil, err
	}
	nc, err := natsconn.Connect(ctx, natsconn.Config{URL: os.Getenv("NATS_URL"), Name: "jsdlq-demo"})
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	defer nc.Close()
	if d.js, err = jetstream.New(nc); err != nil {
		return nil, err
	}
	d.sched = tasks.New(tasks.Config{Queue: os.Getenv("TASKS_QUEUE"), ReplayURL: os.Getenv("REPLAY_URL"),
		ServiceAccount: os.Getenv("TASKS_SERVICE_ACCOUNT"), EmulatorHost: os.Getenv("CLOUD_TASKS_EMULATOR_HOST")})
	defer d.sched.Close()
	topic := notify.NewLazyTopic(project, event.DefaultNotificationsTopic, clientopt.PubSubOptions(os.Getenv("PUBSUB_EMULATOR_HOST"))...)
	defer topic.Close()
	d.notify = notify.New(d.st, topic, notify.WithTasks(notify.LazyJetStream(func(context.Context) (jetstream.JetStream, error) { return d.js, nil })))

	if err := d.prepareStreams(ctx); err != nil {
		return nil, err
	}
	pol, err := d.applyPolicy(ctx, false)
	if err != nil {
		return nil, err
	}
	d.logf("demo policy %s applied (triage-policy/current): the default with delays of seconds, predictions off for the learning phase", pol.Version())
	// The learning phase publishes untreated tasks: a model left by an
	// earlier run is rewritten under the policy with the predictions off.
	if _, err := d.learn(ctx, pol, false); err != nil {
		return nil, err
	}
	d.kit = agentkit.New(d.js, agentkit.WithFirestore(fs), agentkit.WithPredictions(time.Hour), agentkit.WithWorkStream(workStream))
	defer d.kit.Close(context.WithoutCancel(ctx))
	if url := os.Getenv("CONSOLE_URL"); url != "" {
		d.logf("operator console: %s (entries appear as the run goes; KEEP=1 leaves it serving)", url)
	}
	// The agents' builds and a first audit, which samples the work stream
	// so the final one can tell how many messages the run appended, need
	// nothing of each other: at once.
	audited := make(chan error, 1)
	go func() { _, err := d.reconcile(ctx, false); audited <- err }()
	if err := errors.Join(d.build(ctx), <-audited); err != nil {
		return nil, err
	}
	if err := d.startAgents(ctx); err != nil {
		return nil, err
	}
	learning, m := plan(d.run+"-1", d.o.tasks, d.o.deadRate, d.o.seed)
	predicting, _ := plan(d.run+"-2", d.o.tasks, d.o.deadRate, d.o.seed)
	phases := [2]*phase{{Name: "learning", Tasks: learning}, {Name: "predictions on", Tasks: predicting}}
	d.logf("plan, per phase: %d tasks, %d to fail (transient %d + %d that retries do not fix; conditionally recoverable %d: context overflow %d+%d, hallucination %d, token budget %d; permanent %d: impossible %d, filter rejection %d), and two learnable classes: %d context overflows of %s/%s with a large context, %d hallucination loops of %s/%s",
		m.Total, m.Dead, m.Transient, m.Persistent, m.Conditional, m.ContextOK, m.ContextHuge, m.Hallucination, m.TokenBudget,
		m.Permanent, m.Impossible, m.FilterRejection, m.Overflowing, overflowAgent, overflowType, m.Looping, loopAgent, loopType)
	total, unsettled := 0, 0
	var learnt predictionFigures // the model learnt between the phases
	for i, p := range phases {
		if i == 1 {
			if pol, err = d.applyPolicy(ctx, true); err != nil {
				return nil, err
			}
			res, err := d.learn(ctx, pol, true)
			if err != nil {
				return nil, err
			}
			model, err := d.st.PredictionModel(ctx)
			if err != nil {
				return nil, err
			}
			learnt.noteModel(model)
			d.logf("learnt under policy %s (predictions on): %d tasks and %d deaths folded, model version %d with %d rows; acted on: %s",
				pol.Version(), res.Tasks, res.Deaths, model.Version, len(model.Predictions), describeModel(model))
			if err := d.kit.RefreshPredictions(ctx); err != nil {
				return nil, err
			}
		}
		if err := d.publish(ctx, p); err != nil {
			return nil, err
		}
		total += len(p.Tasks)
		d.logf("phase %d (%s): published %d tasks to %s through agentkit's Publish", i+1, p.Name, len(p.Tasks), workStream)
		n, err := d.waitSettled(ctx, total)
		if err != nil {
			return nil, err
		}
		unsettled += n
	}
	d.stopAgents()
	rep, err := d.reconcile(ctx, true)
	if err != nil {
		return nil, err
	}
	entries, err := d.entries(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	if err := d.readCaptured(context.WithoutCancel(ctx)); err != nil {
		return nil, err
	}
	s := summarize(entries, d.captured)
	outcomesAfter, err := d.outcomesSince(context.WithoutCancel(ctx), d.start)
	if err != nil {
		return nil, err
	}
	res := countResolution(entries, minus(outcomesAfter, outcomesBefore))
	s.Resolution = &res
	s.Run, s.Tasks, s.Unsettled, s.NotificationsCaughtUp = d.run, total, unsettled, d.caughtUp
	if s.Completions, err = d.st.CountCompletions(context.WithoutCancel(ctx), d.start, time.Now().Add(time.Minute)); err != nil {
		return nil, err
	}
	done, skipped, wasted, redelivered, err := d.executions()
	if err != nil {
		return nil, err
	}
	s.countExecutions(done)
	s.countSkipped(skipped)
	s.countLong(append(slices.Clone(phases[0].Tasks), phases[1].Tasks...), redelivered)
	pf := comparePhases(phases[0], phases[1], entries, wasted)
	pf.ModelVersion, pf.ModelRows, pf.ActedRow = learnt.ModelVersion, learnt.ModelRows, learnt.ActedRow
	s.Predictions = &pf
	if rep.Traffic != nil {
		s.PipelineDuplicates, s.Published = rep.Traffic.Duplicates, rep.Traffic.Published
	}
	return &s, nil
}

func (d *demo) printExplore() {
	fmt.Fprintf(d.out, `
KEEP=1: the stack stays up. Explore it with dlqctl (built into .local/bin):
  eval "$(go run ./tools/stackctl env)"
  .local/bin/dlqctl ls --category conditionally_recoverable
  .local/bin/dlqctl ls --status escalated --limit 5
  .local/bin/dlqctl show <ID>              # an id from ls: payload, chain, history
  .local/bin/dlqctl stats --hours 1
  .local/bin/dlqctl health
  .local/bin/dlqctl policy show | head
  .local/bin/dlqctl redrive --filter status=escalated,category=transient --rate 5/s --dry-run
Stop it with: make down
`)
}
