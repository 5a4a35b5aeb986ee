package classify

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jsdlq/jsdlq/internal/testenv"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/store"
)

// downTopic is a notifications topic that refuses every publish.
type downTopic struct{}

func (downTopic) Publish(context.Context, []byte, map[string]string) error {
	return errors.New("topic unreachable")
}

// countingNotifier counts flushes of the outbox it wraps.
type countingNotifier struct {
	mu sync.Mutex
	n  int
	f  notify.Outbox
}

func (c *countingNotifier) Flush(ctx context.Context) (notify.Result, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.f.Flush(ctx)
}

// Classify publishes the outbox right after a commit that staged a
// notification, and only then. A publish that fails is logged, never
// returned: the entry is committed, and a Pub/Sub redelivery would only
// repeat work already done; the notification stays pending for reconcile,
// and the redelivery neither flushes nor stages it again.
func TestFlushAfterCommit(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	cn := &countingNotifier{f: notify.New(e.store, downTopic{})}
	h := New(Config{}, Deps{Logger: obs.NewLogger(e.logs), Store: e.store, Policy: e.policy, Scheduler: e.sched, Now: e.clock.Now, Notify: cn})
	tests := []struct {
		name    string
		ev      jevent.Event
		status  store.Status
		flushes int // after this event, in all
	}{
		{"scheduled: nothing to tell", explicit(1, "timeout", "", msg{payload: []byte("p")}), store.Scheduled, 0},
		{"escalated", explicit(2, "impossible_task", "", msg{payload: []byte("p")}), store.Escalated, 1},
		{"escalated, redelivered", explicit(2, "impossible_task", "", msg{payload: []byte("p")}), store.Escalated, 1},
		{"awaiting approval", explicit(3, "approval_required", "", msg{payload: []byte("p")}), store.AwaitingApproval, 2},
	}
	for _, tt := range tests {
		if err := h.Handle(ctx, cloudEvent(t, tt.ev)); err != nil {
			t.Errorf("%s: Handle() = %v, want nil (the flush is best effort)", tt.name, err)
		}
		if got := e.entry(t, tt.ev.ID); got.Status != tt.status {
			t.Errorf("%s: status = %s, want %s", tt.name, got.Status, tt.status)
		}
		if cn.n != tt.flushes {
			t.Errorf("%s: flushes = %d, want %d", tt.name, cn.n, tt.flushes)
		}
	}
	claimed, err := e.store.ClaimNotifications(ctx, "reconcile", 60e9, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 2 {
		t.Fatalf("pending notifications = %d, want 2 (one per transition, left for reconcile)", len(claimed))
	}
	for _, o := range claimed {
		if o.LastError == "" || o.Attempts < 2 {
			t.Errorf("notification %s = attempts %d, last error %q; want classify's failed attempt noted", o.ID, o.Attempts, o.LastError)
		}
	}
	if n := len(e.logs.Lines("notifications not all published")); n != 2 {
		t.Errorf("warnings logged = %d, want 2", n)
	}
}
