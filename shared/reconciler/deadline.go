package reconciler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jsdlq/jsdlq/shared/tasks"
)

// DefaultIOTimeout bounds one I/O call of a run (Config.IOTimeout). Without
// it an unreachable dependency held a call until the run's whole deadline
// (budget + FinishPage): the client libraries retry UNAVAILABLE until the context
// ends, so acquiring the lease with Firestore down took 5 minutes to fail.
const DefaultIOTimeout = 30 * time.Second

// ioCtx bounds one call; the run's own deadline still applies when sooner.
func (h *Handler) ioCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, h.cfg.IOTimeout)
}

// askJetStream makes each JetStream call under IOTimeout of its own; a call
// that lists (a stream's info and its consumer pages, a filtered stream
// info) is bounded as a whole, not per request. The server drops a request
// the NATS user may not make and the client gets only an asynchronous
// permissions violation, so such a call would otherwise wait for the run's
// deadline and leave no time for the streams whose turn comes after; a call
// that ran out of its own timeout (not the run's) says what that usually
// means, which a bare "context deadline exceeded" leaves the operator to
// guess.
func askJetStream[T any](ctx context.Context, h *Handler, req func(context.Context) (T, error)) (T, error) {
	rctx, cancel := h.ioCtx(ctx)
	defer cancel()
	v, err := req(rctx)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("%w (no answer within %v: check the NATS user's permissions for this stream's JetStream API, and the stream's health)", err, h.cfg.IOTimeout)
	}
	return v, err
}

// errStalled ends a task listing that made no progress for IOTimeout.
var errStalled = errors.New("reconcile: no progress")

// boundedTasks gives every Cloud Tasks call its own deadline. A listing may
// take long for a big queue, so it is bounded by progress instead: it ends
// when no task arrived for the timeout (one page request).
type boundedTasks struct {
	t Tasks
	d time.Duration
}

func (b boundedTasks) Schedule(ctx context.Context, r tasks.Request) (string, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.t.Schedule(ctx, r)
}

func (b boundedTasks) Delete(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.t.Delete(ctx, name)
}

func (b boundedTasks) Exists(ctx context.Context, name string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.t.Exists(ctx, name)
}

func (b boundedTasks) Each(ctx context.Context, fn func(name string, scheduled time.Time) bool) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watchdog := time.AfterFunc(b.d, func() { cancel(errStalled) })
	defer watchdog.Stop()
	err := b.t.Each(ctx, func(name string, scheduled time.Time) bool {
		watchdog.Reset(b.d)
		return fn(name, scheduled)
	})
	if err != nil && errors.Is(context.Cause(ctx), errStalled) {
		return fmt.Errorf("list tasks: no answer within %s: %w", b.d, err)
	}
	return err
}
