// Command demo is `make demo`: on a running local stack (make up) it creates
// the TASKS work stream, applies a demo policy with short delays, runs the
// example agent (emulator/agent) as a fleet of seven, publishes a few hundred
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
//	eval "$(go run ./emulator/stackctl env)"; go run ./emulator/demo [--tasks 300] [--dead-rate 0.25]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/emulator/stack"
	"github.com/jsdlq/jsdlq/emulator/tsagent"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/clientopt"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/natsconn"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

const workStream = event.DefaultWorkStream

// typescriptAgent is the agent of the fleet that runs on the TypeScript
// agentkit (clients/typescript/examples/agent.ts) instead of emulator/agent.
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
		return nil, errors.New(`the stack's environment is not set: eval "$(go run ./emulator/stackctl env)" (make demo does)`)
	}
	fs, err := firestore.NewClient(ctx, project)
	if err != nil {
		return nil, fmt.Errorf("firestore: %w", err)
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
	pol, err := d.applyPolicy(ctx, fs, false)
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
			if pol, err = d.applyPolicy(ctx, fs, true); err != nil {
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

// prepareStreams creates the work stream (kept across runs: its sequences,
// hence entry ids and replay task names, never repeat) and notes where this
// run's advisories and records begin.
func (d *demo) prepareStreams(ctx context.Context) error {
	cfg := jetstream.StreamConfig{Name: workStream, Subjects: []string{"agents.*.tasks.>"}, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.FileStorage, Duplicates: time.Hour, AllowDirect: true}
	if _, err := d.js.CreateOrUpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("work stream %s: %w", workStream, err)
	}
	for _, name := range []string{event.DefaultAdvisoryStream, event.DefaultRecordStream} {
		var info *jetstream.StreamInfo
		for i := 0; ; i++ {
			s, err := d.js.Stream(ctx, name)
			if err == nil {
				info, err = s.Info(ctx)
			}
			if err == nil {
				break
			}
			if i == 50 {
				return fmt.Errorf("capture stream %s (the bridge creates it; is it running? make status): %w", name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		d.captureFrom[name] = info.State.LastSeq + 1
		d.cursor[name] = info.State.LastSeq
	}
	d.logf("work stream %s ready (subjects agents.*.tasks.>, WorkQueue, dedup window 1h); capture streams from %v", workStream, d.captureFrom)
	return nil
}

func (d *demo) build(ctx context.Context) error {
	root := filepath.Dir(filepath.Dir(d.binDir))
	// The Go agent and dlqctl, and the fleet's TypeScript agent on the
	// TypeScript agentkit (npm ci when the lockfile changed, and tsc): two
	// toolchains, built side by side.
	built := make(chan error, 1)
	go func() {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", d.binDir+"/", "./emulator/agent", "./cmd/dlqctl")
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			built <- fmt.Errorf("go build the agent and dlqctl: %w", err)
			return
		}
		built <- nil
	}()
	dir, err := tsagent.Prepare(ctx, root, io.Discard) // its error carries npm's output
	if err != nil {
		err = fmt.Errorf("the TypeScript agent: %w", err)
	}
	d.tsDir = dir
	return errors.Join(<-built, err)
}

func (d *demo) agentLog(name string) string {
	return filepath.Join(d.logDir, "demo-agent-"+name+".log")
}

func (d *demo) startAgents(ctx context.Context) error {
	for i, name := range fleet {
		logFile := d.agentLog(name)
		_ = os.Remove(logFile)
		// AckWait is BackOff's first entry, as the server sets it: a first
		// delivery is redelivered after 1 s without an ack (ackDeadline),
		// so the long tasks (longWork) need agentkit's keep-alive.
		args := []string{"--name", name, "--stream", workStream, "--create-stream=false", "--max-deliver", "3", "--backoff", "1s,2s",
			"--ack-wait", ackDeadline.String(), "--work-time", "20ms", "--seed", strconv.FormatUint(d.o.seed+uint64(i)+1, 10)}
		if name == event.DefaultTriageAgent {
			args = append(args, "--triage") // it answers the triage tasks
		}
		path := filepath.Join(d.binDir, "agent")
		if name == typescriptAgent { // same flags, same logs, the TypeScript kit
			path, args = "node", append([]string{filepath.Join(d.tsDir, tsagent.AgentScript)}, args...)
		}
		p, err := stack.Start(ctx, stack.Spec{Name: "agent-" + name, Path: path, LogFile: logFile, Watch: true,
			Args: args})
		if err != nil {
			return err
		}
		d.agents = append(d.agents, p)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, name := range fleet {
		for !logHas(d.agentLog(name), `"message":"agent ready"`) {
			if time.Now().After(deadline) {
				return fmt.Errorf("agent %s not ready after 30s; see %s", name, d.agentLog(name))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	d.logf("fleet of %d agents ready (emulator/agent: MaxDeliver 3, BackOff 1s/2s (AckWait %s), MaxAckPending 1; one task per agent and phase works %s, kept alive by agentkit; %s answers the triage tasks; %s runs on the TypeScript agentkit; logs .local/log/demo-agent-*.log)",
		len(fleet), ackDeadline, longWork, event.DefaultTriageAgent, typescriptAgent)
	return nil
}

func (d *demo) stopAgents() {
	for _, p := range d.agents {
		_ = p.Stop()
	}
	d.agents = nil
}

func logHas(path, s string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains(string(b), s)
}

// entries reads this run's failure-log entries (created since the start).
func (d *demo) entries(ctx context.Context) ([]*store.Entry, error) {
	q := store.Query{CreatedFrom: d.start.Add(-time.Second), Order: store.OldestFirst, View: store.ScanView, Limit: 500}
	var out []*store.Entry
	for {
		p, err := d.st.Entries(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("read entries: %w", err)
		}
		for _, e := range p.Entries {
			if e.Stream == workStream {
				out = append(out, e)
			}
		}
		if p.Next.IsZero() {
			return out, nil
		}
		q.After = p.Next
	}
}

// readCaptured reads the advisories and DLQ records of this run: the dead
// messages the bridge must turn into entries.
func (d *demo) readCaptured(ctx context.Context) error {
	for _, name := range []string{event.DefaultAdvisoryStream, event.DefaultRecordStream} {
		s, err := d.js.Stream(ctx, name)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		for seq := d.cursor[name] + 1; seq <= info.State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				d.cursor[name] = seq
				continue
			}
			if err != nil {
				return fmt.Errorf("read %s #%d: %w", name, seq, err)
			}
			d.cursor[name] = seq
			if strings.HasPrefix(m.Header.Get(nats.MsgIdHdr), reconciler.RedrivePrefix) {
				continue // a copy reconcile re-drove, not another dead message
			}
			if name == event.DefaultRecordStream {
				if id := m.Header.Get(nats.MsgIdHdr); strings.HasPrefix(id, workStream+".") {
					d.captured[id] = true
				}
				continue
			}
			var adv struct {
				Stream    string `json:"stream"`
				StreamSeq uint64 `json:"stream_seq"`
			}
			if json.Unmarshal(m.Data, &adv) == nil && adv.Stream == workStream {
				d.captured[fmt.Sprintf("%s.%d", adv.Stream, adv.StreamSeq)] = true
			}
		}
	}
	return nil
}

// awaitsTriage reports whether e waits for the triage agent's answer. A
// dead triage task is escalated to the humans its notification reaches,
// never to another triage task: it ends its chain.
func awaitsTriage(e *store.Entry) bool {
	return e.Status.AsksTriage() && e.TaskType != event.TriageTaskType
}

// progress is one look at the pipeline.
type progress struct {
	entries, replays, recovered, pending, ended, held, triage int
	completions                                               int64
}

func (d *demo) look(ctx context.Context) (progress, error) {
	var p progress
	entries, err := d.entries(ctx)
	if err != nil {
		return p, err
	}
	if err := d.readCaptured(ctx); err != nil {
		return p, err
	}
	if p.completions, err = d.st.CountCompletions(ctx, d.start.Add(-time.Second), time.Now().Add(time.Minute)); err != nil {
		return p, err
	}
	children := map[string]bool{}
	for _, e := range entries {
		if e.ReplayOf != "" {
			children[e.ReplayOf] = true
		}
	}
	var replayed []*store.Entry
	for _, e := range entries {
		p.entries++
		p.replays += e.Replays
		switch {
		case e.Status == store.Recovered:
			p.recovered++
		case awaitsTriage(e):
			p.triage++
			p.pending++
		case e.Status.NeedsHuman() || e.Status.Settled():
			// Ends its chain without a replay pending: waits for a human
			// (quarantined: no triage task), or a decision taken.
			p.ended++
		case e.Status == store.Replayed && !children[e.ID]:
			replayed = append(replayed, e)
		case e.Status == store.Replayed:
		case e.Status == store.Held:
			p.held++
			p.pending++
		default:
			p.pending++ // scheduled, replaying, held
		}
	}
	if len(replayed) > 0 {
		done, err := d.st.Completions(ctx, replayed)
		if err != nil {
			return p, err
		}
		for _, e := range replayed {
			if !done[e.ID].Done {
				p.pending++ // its replay is still being worked on
			}
		}
	}
	return p, nil
}

// waitSettled prints progress until every task completed or ended its
// chain in a human's hands, and the bridge turned every captured message
// into an entry. It returns how many tasks had not settled at the timeout.
func (d *demo) waitSettled(ctx context.Context, total int) (int, error) {
	deadline := time.Now().Add(d.o.timeout)
	tick := time.NewTicker(3 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
		}
		// Classify and replay publish their notifications (and triage
		// tasks) at once; this flush stands for reconcile's schedule, and
		// counts what it had to catch up on.
		if res, err := d.notify.Flush(ctx); err == nil {
			d.caughtUp += res.Published
		}
		p, err := d.look(ctx)
		if err != nil {
			return 0, err
		}
		settled := int(p.completions) + p.ended
		held := ""
		if p.held > 0 {
			held = fmt.Sprintf("  (held by an open tenant breaker: %d)", p.held)
		}
		d.logf("published %d  completed %d  dead %d  entries %d  replays %d  recovered %d  awaiting triage %d  ended (discarded, quarantined) %d  in flight %d%s",
			total, p.completions, len(d.captured), p.entries, p.replays, p.recovered, p.triage, p.ended, p.pending-p.triage, held)
		if settled >= total && p.pending == 0 && len(d.captured) == p.entries {
			return 0, nil
		}
		if time.Now().After(deadline) {
			d.logf("not settled after %s: %d of %d tasks settled, %d entries in flight", d.o.timeout, settled, total, p.pending)
			return max(total-settled, p.pending, 1), nil
		}
	}
}

// reconcile runs the audit in-process, as dlqctl audit does. The final run
// uses short grace periods: the demo waited for the pipeline to settle, so
// nothing is in flight any more.
func (d *demo) reconcile(ctx context.Context, final bool) (*audit.Report, error) {
	cfg := reconciler.Config{WorkStreams: []string{workStream}, TimeBudget: time.Minute}
	if final {
		cfg.Grace, cfg.CaptureGrace = 3*time.Second, 3*time.Second
	}
	log := obs.NewLogger(io.Discard)
	if f, err := os.OpenFile(filepath.Join(d.logDir, "demo-reconcile.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		defer f.Close()
		log = obs.NewLogger(f, obs.WithComponent("reconcile"))
	}
	h := reconciler.New(cfg, reconciler.Deps{Logger: log, Store: d.st, Tasks: d.sched, Notify: d.notify,
		JetStream: func(context.Context) (jetstream.JetStream, error) { return d.js, nil }})
	rep, err := h.Run(context.WithoutCancel(ctx), false)
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	if final {
		var repaired []string
		for _, f := range rep.Findings {
			if f.Repair != nil && f.Repair.Done > 0 {
				repaired = append(repaired, fmt.Sprintf("%s %d", f.Name, f.Repair.Done))
			}
		}
		d.logf("reconcile %s: alerts %v, repairs %s", rep.RunID, rep.Alerts, orDash(strings.Join(repaired, ", ")))
	}
	return rep, nil
}

// executions counts, per task id, how often an agent ran the task's work
// (emulator/agent logs outcome "done" when agentkit.Once ran it), the
// steps each run skipped because its replay said the failed attempt had
// done them (Jsdlq-Completed-Steps), and the deliveries that did not
// complete the work (a NAK after a failure, a terminate); redelivered are
// the tasks a delivery after the first settled, or that met their own
// claim in progress or lost it.
func (d *demo) executions() (done, skipped, wasted map[string]int, redelivered map[string]bool, err error) {
	done, skipped, wasted, redelivered = map[string]int{}, map[string]int{}, map[string]int{}, map[string]bool{}
	for _, name := range fleet {
		f, err := os.Open(d.agentLog(name))
		if err != nil {
			return nil, nil, nil, nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var l struct {
				Message      string `json:"message"`
				Outcome      string `json:"outcome"`
				TaskID       string `json:"task_id"`
				StepsSkipped int    `json:"steps_skipped"`
				Delivery     int    `json:"delivery"`
			}
			if json.Unmarshal(sc.Bytes(), &l) != nil || l.Message != "task settled" || !strings.HasPrefix(l.TaskID, "demo-"+d.run+"-") {
				continue
			}
			switch l.Outcome {
			case "done":
				done[l.TaskID]++
				skipped[l.TaskID] += l.StepsSkipped
			case "failed_nak", "terminated":
				wasted[l.TaskID]++
			}
			if l.Delivery > 1 || l.Outcome == "in_progress_elsewhere" || l.Outcome == "claim_lost" {
				redelivered[l.TaskID] = true
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	return done, skipped, wasted, redelivered, nil
}

func (d *demo) printExplore() {
	fmt.Fprintf(d.out, `
KEEP=1: the stack stays up. Explore it with dlqctl (built into .local/bin):
  eval "$(go run ./emulator/stackctl env)"
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
