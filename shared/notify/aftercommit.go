package notify

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/clientopt"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/store"
)

// Outbox publishes the notifications outbox: a *Flusher, or what a test
// wraps around one.
type Outbox interface {
	Flush(ctx context.Context) (Result, error)
}

// stagedOutbox publishes what a commit staged, by id (*Flusher).
type stagedOutbox interface {
	FlushStaged(ctx context.Context, staged []*store.Outbox) (Result, error)
}

// AfterCommit publishes the outbox right after the commit of a transition
// that staged a notification (entryID's), so it leaves at once instead of at
// the next reconcile run: what the commit staged (staged, when the store
// names it) by id (FlushStaged), else what is pending (Flush). Best effort
// by design: the transition is committed and must not be retried for its
// notification, so nothing is returned; what is left pending is logged and
// a later flush or reconcile publishes it. ctx's cancellation (the request
// ending) does not cut the publish short; the flusher's budget does
// (WithAfterCommitBudget, DefaultAfterCommitBudget for another Outbox), so
// the caller, who answers once this returns, never waits on a notification
// destination longer than that, and not at all while one is paused
// (WithPause).
func AfterCommit(ctx context.Context, o Outbox, log *slog.Logger, component, entryID string, staged []*store.Outbox) {
	if o == nil {
		return
	}
	budget := DefaultAfterCommitBudget
	if f, ok := o.(*Flusher); ok {
		budget = f.budget
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
	defer cancel()
	flush := o.Flush
	if so, ok := o.(stagedOutbox); ok && len(staged) > 0 {
		flush = func(ctx context.Context) (Result, error) { return so.FlushStaged(ctx, staged) }
	}
	res, err := flush(fctx)
	if res.Paused > 0 {
		log.InfoContext(ctx, component+": notifications left in the outbox while their destination is paused after a failure; a later flush or reconcile publishes them",
			"entry_id", entryID, "paused", res.Paused)
	}
	if err != nil || res.Failed > 0 {
		log.WarnContext(ctx, component+": notifications not all published; a later flush or reconcile publishes them", "entry_id", entryID,
			"published", res.Published, "failed", res.Failed, "errors", res.Errors, "error", fmt.Sprint(err))
	}
}

// AfterCommitBatch bounds the notifications one flush after a commit
// claims: every instance of classify and replay flushes, and reconcile
// takes the rest.
const AfterCommitBatch = 20

// FromConfig builds the Flusher a function runs, from its configuration:
// cfg.Topic in project (the Pub/Sub emulator's when pubSubEmulatorHost is
// set; the client is made on the first notification), triage tasks
// published through js, cfg's console link and webhook fan-out, logging to
// log; opts add to these (WithBatch for a flush after a commit).
func FromConfig(st Store, project, pubSubEmulatorHost string, cfg config.Notifications,
	js func(context.Context) (jetstream.JetStream, error), log *slog.Logger, opts ...Option) *Flusher {
	topic := NewLazyTopic(project, cfg.Topic, clientopt.PubSubOptions(pubSubEmulatorHost)...)
	changes := NewLazyTopic(project, cfg.ChangesTopic, clientopt.PubSubOptions(pubSubEmulatorHost)...)
	base := []Option{WithLogger(log), WithConsoleURL(cfg.ConsoleURL), WithTasks(LazyJetStream(js)), WebhooksFrom(cfg.Webhooks),
		WithChanges(changes)}
	return New(st, topic, append(base, opts...)...)
}
