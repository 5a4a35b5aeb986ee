// Command agent is an example agent written the way a user writes one: on
// the public kit (shared/agentkit) and the wire contract (shared/event)
// alone, nothing else of jsdlq. The local demo runs it as its fleet (seven
// of them, one per agent name). It consumes
// agents.<name>.tasks.> from the TASKS stream and does fake work steered by
// task headers: X-Demo-Fail selects a failure mode (transient,
// context_window_overflow, hallucination_loop, token_budget_exceeded,
// permanent, poison, governance, partial_write, bare_term, silent),
// X-Demo-Fail-Probability makes it random, X-Demo-Fail-Code overrides the
// reason code, X-Demo-Work-Time sets how long the work takes (agentkit
// keeps a task longer than the consumer's AckWait alive). A replay that carries the strategy's headers
// (Jsdlq-Max-Context-Tokens, Jsdlq-Target-Model, Jsdlq-Instruction,
// Jsdlq-Max-Output-Tokens) succeeds where the original failed, and transient
// failures pass on any replay. A replay skips the steps its failed attempt
// completed (Jsdlq-Completed-Steps). With --triage-url the agent also answers
// the dlq_triage tasks it receives (the demo's "ceo") through the console's
// triage endpoint at --triage-url (agentkit.TriageClient), authenticated by
// a Google ID token of its service account, or by TRIAGE_TOKEN when set (the
// local stack mints one with the Cloud Tasks emulator).
//
//	go run ./examples/agent --name backend
//
// It logs "agent ready" once its consumer exists.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/oauth2"
	"google.golang.org/api/idtoken"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/event"
)

type options struct {
	name, stream, consumer, subject string
	natsURL, natsCreds, project     string
	maxDeliver, maxAckPending       int
	ackWait                         time.Duration
	backoff                         string
	createStream, idempotent        bool
	triageURL                       string
	failMode                        string
	failProb                        float64
	contextWindow                   int
	workTime                        time.Duration
	seed                            uint64
	recordStream, failureBucket     string
}

func parse(args []string) (options, error) {
	env := func(k, def string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return def
	}
	var o options
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.StringVar(&o.name, "name", "", "agent name, the <agent> token of agents.<agent>.tasks.<type> (required)")
	fs.StringVar(&o.stream, "stream", event.DefaultWorkStream, "work stream")
	fs.StringVar(&o.consumer, "consumer", "", "durable consumer (default: the agent name)")
	fs.StringVar(&o.subject, "subject", "", "filter subject (default agents.<name>.tasks.>)")
	fs.StringVar(&o.natsURL, "nats-url", env("NATS_URL", "nats://127.0.0.1:4222"), "NATS URL (NATS_URL)")
	fs.StringVar(&o.natsCreds, "nats-creds", os.Getenv("NATS_CREDS"), "NATS credentials file (NATS_CREDS)")
	fs.StringVar(&o.project, "project", os.Getenv("GOOGLE_CLOUD_PROJECT"), "project of the Firestore idempotency records (GOOGLE_CLOUD_PROJECT)")
	fs.BoolVar(&o.idempotent, "idempotency", true, "record completions in Firestore task-idempotency (needs --project)")
	fs.StringVar(&o.triageURL, "triage-url", "", "answer dlq_triage tasks through the console's triage endpoint at this URL (empty: do not answer them)")
	fs.IntVar(&o.maxDeliver, "max-deliver", 3, "consumer MaxDeliver")
	fs.IntVar(&o.maxAckPending, "max-ack-pending", 1, "consumer MaxAckPending (1: one task at a time per agent)")
	fs.DurationVar(&o.ackWait, "ack-wait", 5*time.Minute, "consumer AckWait")
	fs.StringVar(&o.backoff, "backoff", "30s,2m,5m", "consumer BackOff, comma-separated (the demo shortens it)")
	fs.BoolVar(&o.createStream, "create-stream", true, "create the work stream if missing (subjects agents.>, 1 h dedup window)")
	fs.StringVar(&o.failMode, "fail", "none", "failure mode for tasks without X-Demo-Fail: "+strings.Join(modes, ", "))
	fs.Float64Var(&o.failProb, "fail-probability", 1, "probability a task fails in its mode when it has no X-Demo-Fail-Probability")
	fs.IntVar(&o.contextWindow, "context-window", 8000, "the model's context window in tokens")
	fs.DurationVar(&o.workTime, "work-time", 50*time.Millisecond, "duration of the fake work of a task without X-Demo-Work-Time")
	fs.Uint64Var(&o.seed, "seed", 0, "random seed (0: time-based)")
	fs.StringVar(&o.recordStream, "record-stream", env("RECORD_STREAM", agentkit.DefaultRecordStream), "DLQ record stream (RECORD_STREAM)")
	fs.StringVar(&o.failureBucket, "failure-bucket", env("FAILURE_BUCKET", agentkit.DefaultFailureBucket), "failure bucket (FAILURE_BUCKET)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
	if o.name == "" || strings.ContainsAny(o.name, ". *>") {
		errs = append(errs, errors.New("--name is required and must be one subject token"))
	}
	if !slices.Contains(modes, o.failMode) {
		errs = append(errs, fmt.Errorf("--fail %q is not one of %s", o.failMode, strings.Join(modes, ", ")))
	}
	if o.triageURL != "" && !strings.HasPrefix(o.triageURL, "http://") && !strings.HasPrefix(o.triageURL, "https://") {
		errs = append(errs, fmt.Errorf("--triage-url %q is not an http or https URL", o.triageURL))
	}
	if o.idempotent && o.project == "" {
		errs = append(errs, errors.New("--idempotency needs --project or GOOGLE_CLOUD_PROJECT (or pass --idempotency=false)"))
	}
	if _, err := parseBackoff(o.backoff); err != nil {
		errs = append(errs, err)
	}
	if o.consumer == "" {
		o.consumer = o.name
	}
	if o.subject == "" {
		o.subject = "agents." + o.name + ".tasks.>"
	}
	return o, errors.Join(errs...)
}

func parseBackoff(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		d, err := time.ParseDuration(part)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("--backoff: %q is not a positive duration", part)
		}
		out = append(out, d)
	}
	return out, nil
}

// newLogger logs JSON lines with Cloud Logging's keys (message, severity),
// as jsdlq's own components do, so one log query reads them all.
func newLogger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) > 0 {
			return a
		}
		switch a.Key {
		case slog.MessageKey:
			a.Key = "message"
		case slog.LevelKey:
			a.Key = "severity"
		case slog.TimeKey:
			a.Key = "timestamp"
		}
		return a
	}})).With("component", "agent")
}

func main() {
	log := newLogger()
	o, err := parse(os.Args[1:])
	if err != nil {
		log.Error("bad flags", "error", err)
		os.Exit(2)
	}
	log = log.With("agent", o.name)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, o, log); err != nil {
		log.Error("agent failed", "error", err)
		os.Exit(1)
	}
}

// consumerConfig is the consumer of one agent that docs/contracts.md ("Work
// stream and consumers") recommends.
func consumerConfig(o options) jetstream.ConsumerConfig {
	bo, _ := parseBackoff(o.backoff)
	if len(bo) >= o.maxDeliver && o.maxDeliver > 0 {
		bo = bo[:o.maxDeliver-1] // the server refuses more BackOff entries than redeliveries
	}
	return jetstream.ConsumerConfig{
		Durable: o.consumer, FilterSubject: o.subject, AckPolicy: jetstream.AckExplicitPolicy,
		MaxDeliver: o.maxDeliver, AckWait: o.ackWait, BackOff: bo, MaxAckPending: o.maxAckPending,
	}
}

func run(ctx context.Context, o options, log *slog.Logger) error {
	nopts := []nats.Option{nats.Name("jsdlq-agent-" + o.name), nats.MaxReconnects(-1)}
	if o.natsCreds != "" {
		nopts = append(nopts, nats.UserCredentials(o.natsCreds))
	}
	nc, err := nats.Connect(o.natsURL, nopts...)
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", o.natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if o.createStream {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: o.stream, Subjects: []string{"agents.>"},
			Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: time.Hour, AllowDirect: true})
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("create stream %s: %w", o.stream, err)
		}
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, o.stream, consumerConfig(o))
	if err != nil {
		return fmt.Errorf("consumer %s on %s: %w", o.consumer, o.stream, err)
	}
	kitOpts := []agentkit.Option{agentkit.WithAgent(o.name), agentkit.WithLogger(log),
		agentkit.WithRecordStream(o.recordStream), agentkit.WithFailureBucket(o.failureBucket)}
	if o.idempotent {
		fs, err := agentkit.OpenFirestore(ctx, o.project)
		if err != nil {
			return err
		}
		defer fs.Close()
		kitOpts = append(kitOpts, agentkit.WithFirestore(fs))
	}
	var answerer agentkit.Answerer
	if o.triageURL != "" {
		answerer = agentkit.NewTriageClient(o.triageURL, triageToken(o.triageURL, os.Getenv("TRIAGE_TOKEN")))
	}
	seed := o.seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	a := &Agent{Name: o.name, Kit: agentkit.New(js, kitOpts...), Log: log, DefaultMode: o.failMode,
		DefaultProb: o.failProb, ContextWindow: o.contextWindow, WorkTime: o.workTime, Idempotent: o.idempotent,
		Rand: rand.New(rand.NewPCG(seed, seed>>1)), Triage: answerer}
	it, err := cons.Messages(jetstream.PullMaxMessages(max(o.maxAckPending, 1)))
	if err != nil {
		return err
	}
	log.Info("agent ready", "stream", o.stream, "consumer", o.consumer, "subject", o.subject, "fail", o.failMode)
	go func() { <-ctx.Done(); it.Drain() }()
	for {
		m, err := it.Next()
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			log.Info("agent stopped")
			return nil
		}
		if err != nil {
			log.Warn("pull failed", "error", err)
			continue
		}
		if a.Triage != nil && IsTriage(m) {
			out, err := a.HandleTriage(context.WithoutCancel(ctx), m)
			attrs := []any{"subject", m.Subject(), "outcome", string(out), "entry_id", header(m, event.HeaderTriageEntry)}
			if err != nil && out != agentkit.TriageAnswered && out != agentkit.TriageDecided {
				log.Warn("triage task settled with an error", append(attrs, "error", err)...)
			} else {
				log.Info("triage task answered", attrs...)
			}
			continue
		}
		outcome, err := a.Handle(context.WithoutCancel(ctx), m)
		md, _ := m.Metadata()
		attrs := []any{"subject", m.Subject(), "outcome", string(outcome), "task_id", header(m, event.HeaderTaskID)}
		if outcome == Done {
			attrs = append(attrs, "steps_skipped", len(SkippedSteps(m)))
		}
		if md != nil {
			attrs = append(attrs, "stream_seq", md.Sequence.Stream, "delivery", md.NumDelivered)
		}
		if err != nil {
			log.Warn("task settled with an error", append(attrs, "error", err)...)
		} else {
			log.Info("task settled", attrs...)
		}
	}
}

// triageToken proves the agent's identity to the console's triage endpoint
// at consoleURL: the token given (TRIAGE_TOKEN, on the local stack), else a
// Google ID token of the agent's service account for the console's URL
// (its audience), fetched and refreshed by the idtoken package.
func triageToken(consoleURL, given string) agentkit.TokenFunc {
	if given != "" {
		return func(context.Context) (string, error) { return strings.TrimPrefix(given, "Bearer "), nil }
	}
	// One source, built on first use: it caches the token until it expires.
	source := sync.OnceValues(func() (oauth2.TokenSource, error) {
		return idtoken.NewTokenSource(context.Background(), consoleURL)
	})
	return func(context.Context) (string, error) {
		src, err := source()
		if err != nil {
			return "", fmt.Errorf("ID token for %s: %w", consoleURL, err)
		}
		tok, err := src.Token()
		if err != nil {
			return "", fmt.Errorf("ID token for %s: %w", consoleURL, err)
		}
		return tok.AccessToken, nil
	}
}
