// Command agent is an example jsdlq agent, written the way a user writes one:
// against the public kit (shared/agentkit) and the wire contract
// (shared/event) alone. It summarises documents: each task's payload is the
// text, its subject agents.<name>.tasks.summarise.
//
// What the kit does for it:
//
//   - agentkit.Kit.Once runs the work at most once per tenant and
//     idempotency key, and records the completion before the ack, so a
//     replay of a task that already ran does nothing again;
//
//   - a replay's strategy arrives as Jsdlq-* headers (agentkit.ReplayOf):
//     a smaller context budget, a different model, instructions;
//
//   - a failure a retry may fix is recorded with agentkit.Kit.Fail (and the
//     message NAKed with the consumer's backoff); one it cannot fix with
//     agentkit.Kit.Terminate, which copies the task to the DLQ record stream
//     first, so its payload survives a WorkQueue stream;
//
//   - with --triage-url the agent also answers the dlq_triage tasks jsdlq
//     sends it, through the console's triage endpoint
//     (agentkit.NewTriageClient), with a Google ID token of its service
//     account.
//
//     go run ./examples/agent --name writer
//
// The local demo's fleet is the richer tools/agent, which stages failures
// on purpose.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/api/idtoken"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/event"
)

type options struct {
	name, stream, natsURL, project, triageURL string
	contextWindow                             int
}

func parse(args []string, getenv func(string) string) (options, error) {
	o := options{}
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.StringVar(&o.name, "name", "", "agent name, the <agent> of agents.<agent>.tasks.<type> (required)")
	fs.StringVar(&o.stream, "stream", event.DefaultWorkStream, "work stream")
	fs.StringVar(&o.natsURL, "nats-url", cmpOr(getenv("NATS_URL"), nats.DefaultURL), "NATS URL (NATS_URL)")
	fs.StringVar(&o.project, "project", getenv("GOOGLE_CLOUD_PROJECT"), "project of the completion records (GOOGLE_CLOUD_PROJECT)")
	fs.StringVar(&o.triageURL, "triage-url", "", "the console's URL, to answer dlq_triage tasks (empty: none)")
	fs.IntVar(&o.contextWindow, "context-window", 8000, "the model's context window in tokens")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
	if o.name == "" || strings.ContainsAny(o.name, ". *>") {
		errs = append(errs, errors.New("--name is required and must be one subject token"))
	}
	if o.project == "" {
		errs = append(errs, errors.New("--project or GOOGLE_CLOUD_PROJECT is required: completions are recorded in Firestore"))
	}
	if o.contextWindow <= 0 {
		errs = append(errs, fmt.Errorf("--context-window %d is not positive", o.contextWindow))
	}
	return o, errors.Join(errs...)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	o, err := parse(os.Args[1:], os.Getenv)
	if err != nil {
		log.Error("bad flags", "error", err.Error())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, o, log.With("agent", o.name)); err != nil {
		log.Error("agent failed", "error", err.Error())
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, log *slog.Logger) error {
	nc, err := nats.Connect(o.natsURL, nats.Name("example-agent-"+o.name))
	if err != nil {
		return fmt.Errorf("connect %s: %w", o.natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	db, err := firestore.NewClient(ctx, o.project)
	if err != nil {
		return fmt.Errorf("firestore client for project %s: %w", o.project, err)
	}
	defer db.Close()
	kit := agentkit.New(js, agentkit.WithAgent(o.name), agentkit.WithFirestore(db), agentkit.WithLogger(log))
	a := &Agent{Kit: kit, Window: o.contextWindow, Work: summarise}
	if o.triageURL != "" {
		a.Triage = agentkit.NewTriageClient(o.triageURL, googleToken(o.triageURL))
	}
	// The consumer docs/contracts.md recommends: explicit acks, three
	// deliveries with a backoff, one task at a time.
	cons, err := js.CreateOrUpdateConsumer(ctx, o.stream, jetstream.ConsumerConfig{
		Durable: o.name, FilterSubject: event.DefaultConventions.TaskSubject(o.name, ">"),
		AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 3, AckWait: 5 * time.Minute,
		BackOff: []time.Duration{30 * time.Second, 2 * time.Minute}, MaxAckPending: 1,
	})
	if err != nil {
		return fmt.Errorf("consumer %s on %s: %w", o.name, o.stream, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); it.Drain() }()
	log.Info("agent ready", "stream", o.stream)
	for {
		m, err := it.Next()
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return nil
		}
		if err != nil {
			log.Warn("pull failed", "error", err.Error())
			continue
		}
		outcome, err := a.Handle(context.WithoutCancel(ctx), m)
		if err != nil {
			log.Warn("task settled with an error", "subject", m.Subject(), "outcome", outcome, "error", err.Error())
			continue
		}
		log.Info("task settled", "subject", m.Subject(), "outcome", outcome)
	}
}

// googleToken is a Google ID token of the agent's service account for the
// console's triage endpoint (the console checks the audience and the
// account).
func googleToken(audience string) agentkit.TokenFunc {
	return func(ctx context.Context) (string, error) {
		ts, err := idtoken.NewTokenSource(ctx, strings.TrimSuffix(audience, "/")+agentkit.TriagePath)
		if err != nil {
			return "", err
		}
		tok, err := ts.Token()
		if err != nil {
			return "", err
		}
		return tok.AccessToken, nil
	}
}
