package agentkit

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/event"
)

// This file keeps a task alive while an agent works on it (docs/contracts.md,
// "Keep-alive"): one timer per running task sends the delivery's in-progress
// ack, so the server does not redeliver it mid-work, and renews Once's claim,
// so no duplicate takes it over; a renewal that finds the claim lost cancels
// the work.

// Defaults of the keep-alive.
const (
	// DefaultKeepAlive is the keep-alive interval when neither WithKeepAlive
	// nor the delivery's consumer says otherwise: half of JetStream's
	// default AckWait (30 s).
	DefaultKeepAlive = 15 * time.Second
	// LeaseIntervals is the lease of a claim in keep-alive intervals: a
	// claim outlives two renewals that fail before a duplicate may take it
	// over.
	LeaseIntervals = 3
)

// ErrClaimLost: while fn ran, its claim on the task was found taken over by
// another worker or completed by one, or could not be renewed before its
// lease ended (so another may have taken it over). fn's context was
// cancelled; nothing was recorded. Neither ack nor NAK the message: the
// server redelivers it after its ack deadline, and the redelivery finds the
// other worker's claim (ErrInProgress) or its completion (skipped).
var ErrClaimLost = errors.New("agentkit: the task's claim was lost to another worker")

// WithKeepAlive sets how often a running task is kept alive (in-progress
// ack and claim renewal). By default it is half the ack deadline of the
// delivery: its consumer's AckWait, or the consumer's BackOff entry for
// this delivery when it has a BackOff (the server then waits that long
// instead), read once per consumer; DefaultKeepAlive when the consumer
// cannot be read or Once has no delivery.
func WithKeepAlive(d time.Duration) Option { return func(k *Kit) { k.keepAlive = d } }

// KeepAlive runs fn while keeping msg alive: an in-progress ack every
// keep-alive interval, so a task that outlives its consumer's AckWait is
// not redelivered mid-work. It returns fn's error; settling msg is the
// caller's. Once does this itself (with claim renewal) for a task from
// TaskOf. Bound fn with ctx's deadline: the keep-alive lasts as long as fn
// does, and a task that hangs is never redelivered.
func (k *Kit) KeepAlive(ctx context.Context, msg jetstream.Msg, fn func(context.Context) error) error {
	return k.keepAliveRun(ctx, msg, k.interval(ctx, msg), nil, fn)
}

// interval is the keep-alive interval of msg's delivery (WithKeepAlive).
func (k *Kit) interval(ctx context.Context, msg jetstream.Msg) time.Duration {
	if k.keepAlive > 0 {
		return k.keepAlive
	}
	if msg == nil {
		return DefaultKeepAlive
	}
	md, err := msg.Metadata()
	if err != nil {
		return DefaultKeepAlive
	}
	r, ok := k.consumer(ctx, md)
	if !ok {
		return DefaultKeepAlive
	}
	if d := r.ackDeadline(md.NumDelivered) / 2; d > 0 {
		return d
	}
	return DefaultKeepAlive
}

// leaseFor is the lease of a claim kept alive every interval: WithLease,
// else LeaseIntervals intervals.
func (k *Kit) leaseFor(interval time.Duration) time.Duration {
	if k.lease > 0 {
		return k.lease
	}
	return LeaseIntervals * interval
}

// keepAliveRun runs fn under one timer that, every interval, sends msg's
// in-progress ack (msg may be nil) and then calls renew (may be nil). A
// renew that returns ErrClaimLost cancels fn's context and the timer; its
// other errors are logged and the next tick tries again (renew itself
// decides when a claim it cannot renew counts as lost). The timer has
// stopped, and any renewal in flight finished, when keepAliveRun returns:
// nothing renews a claim after its completion is written. If the claim was
// lost, that is the error, whatever fn returned.
func (k *Kit) keepAliveRun(ctx context.Context, msg jetstream.Msg, interval time.Duration, renew func(context.Context) error,
	fn func(context.Context) error) error {
	work, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-work.Done():
				return
			case <-tick.C:
			}
			if msg != nil {
				if err := msg.InProgress(); err != nil {
					k.log.Warn("in-progress ack failed; the task may be redelivered mid-work", "subject", event.Wire(msg.Subject()), "error", err)
				}
			}
			if renew == nil {
				continue
			}
			if err := renew(ctx); errors.Is(err, ErrClaimLost) {
				cancel(err)
				return
			} else if err != nil {
				k.log.Warn("claim renewal failed; trying again at the next tick", "error", err)
			}
		}
	}()
	err := fn(work)
	close(stop)
	<-stopped
	if cause := context.Cause(work); errors.Is(cause, ErrClaimLost) {
		return cause
	}
	return err
}
