package notify

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jsdlq/jsdlq/shared/config"
)

// Destinations a flusher publishes to; each is paused on its own
// (WithPause), so a NATS outage does not stop Pub/Sub notifications and
// the other way round.
const (
	DestinationTopic    = "notifications_topic" // Pub/Sub dlq-notifications
	DestinationTriage   = "triage_tasks"        // the triage agent's subject on the work stream
	DestinationWebhooks = "webhook_queue"       // Cloud Tasks deliveries of tenant webhooks
)

// ErrPaused is the failure of a notification not tried because its
// destination failed a moment ago (WithPause); it stays pending for a later
// flush or reconcile.
var ErrPaused = errors.New("notify: destination paused after a failure")

// DefaultAfterCommitBudget bounds the publish right after a commit (see
// config.Notifications.AfterCommitBudget): the push or the task that made
// the commit waits at most this long for its notifications.
const DefaultAfterCommitBudget = config.DefaultAfterCommitBudget

// WithPause makes a destination that failed (an error, or the budget
// running out while it was called) be skipped for d: notifications that
// need it stay pending without a claim, and a flush after a commit costs
// nothing while the destination is down. After d the next flush tries it
// again, and one more failure pauses it again. 0 (the default) never pauses:
// reconcile, the path of last resort, always tries.
func WithPause(d time.Duration) Option {
	return func(f *Flusher) {
		if d > 0 {
			f.pauses = &pauses{after: d, now: f.store.Now, until: map[string]time.Time{}}
		}
	}
}

// WithAfterCommitBudget bounds what AfterCommit spends on this flusher
// (default DefaultAfterCommitBudget).
func WithAfterCommitBudget(d time.Duration) Option {
	return func(f *Flusher) {
		if d > 0 {
			f.budget = d
		}
	}
}

// AfterCommitOptions are the options of a flusher that publishes after the
// commits of a request (classify, replay): a small batch, the budget and
// the pause cfg sets.
func AfterCommitOptions(cfg config.Notifications) []Option {
	return []Option{WithBatch(AfterCommitBatch), WithAfterCommitBudget(cfg.AfterCommitBudget), WithPause(cfg.PauseAfterFailure)}
}

// pauses is a small circuit breaker per destination: open (paused) for a
// while after a failure, closed by the first success after it.
type pauses struct {
	after time.Duration
	now   func() time.Time

	mu    sync.Mutex
	until map[string]time.Time
}

// paused reports whether dest is paused now; nil pauses never are.
func (p *pauses) paused(dest string) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.now().Before(p.until[dest])
}

// done records the outcome of a call of dest.
func (p *pauses) done(dest string, err error) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		delete(p.until, dest)
		return
	}
	p.until[dest] = p.now().Add(p.after)
}

// skip is the error of a call of dest not made because it is paused, nil
// when it may be called.
func (f *Flusher) skip(dest string) error {
	if f.pauses.paused(dest) {
		return fmt.Errorf("%w: %s", ErrPaused, dest)
	}
	return nil
}

// call calls dest through fn unless it is paused, and records the outcome.
func (f *Flusher) call(ctx context.Context, dest string, fn func(context.Context) error) error {
	if err := f.skip(dest); err != nil {
		return err
	}
	err := fn(ctx)
	f.pauses.done(dest, err)
	return err
}
