package notify_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/store"
)

// switchTopic is the notifications topic, down while down is set; calls
// counts every publish tried.
type switchTopic struct {
	topic notify.Topic
	down  atomic.Bool
	calls atomic.Int64
}

func (s *switchTopic) Publish(ctx context.Context, data []byte, attrs map[string]string) error {
	s.calls.Add(1)
	if s.down.Load() {
		return errors.New("topic unreachable")
	}
	return s.topic.Publish(ctx, data, attrs)
}

// record stores entry TASKS.<seq> in status st, as classify does, and
// returns what the commit staged.
func (e *env) record(t *testing.T, seq int, st store.Status) []*store.Outbox {
	t.Helper()
	id := fmt.Sprint("TASKS.", seq)
	en := &store.Entry{ID: id, EventID: id, Stream: "TASKS", StreamSeq: int64(seq),
		Tenant: "acme", Kind: "explicit", Category: "permanent", ReasonCode: "data_integrity", Status: st}
	res, err := e.store.Record(testenv.Context(t), en, "classify")
	if err != nil || len(res.Staged) != 1 {
		t.Fatalf("Record(%s) staged %d, %v; want 1", id, len(res.Staged), err)
	}
	return res.Staged
}

// A destination that failed is not called again for the pause: a flush
// after a commit then leaves the notification pending without claiming it,
// so the commit's caller does not wait; after the pause one call tries it
// again, and a success ends the pause. Nothing is lost: a flush of what is
// pending (reconcile's) publishes every notification once.
func TestPausedTopic(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	topic := &switchTopic{topic: notify.PubSubTopic(e.pub)}
	topic.down.Store(true)
	tasks := func(context.Context) (notify.Tasks, error) { return e.js, nil }
	f := notify.New(e.store, topic, notify.WithTasks(tasks), notify.WithPause(30*time.Second),
		notify.WithAfterCommitBudget(time.Minute), notify.WithSweepEvery(time.Hour))
	steps := []struct {
		name    string
		advance time.Duration
		up      bool
		calls   int64 // topic publishes tried in all
		state   string
	}{
		{"down: tried once", 0, false, 1, store.OutboxPending},
		{"paused: not tried", 10 * time.Second, false, 1, store.OutboxPending},
		{"paused, though up again", 10 * time.Second, true, 1, store.OutboxPending},
		// The first sweep (skipped while paused) takes the three left.
		{"the pause over: tried, published, the rest swept", 11 * time.Second, true, 5, store.OutboxPublished},
		{"no pause after a success", 0, true, 6, store.OutboxPublished},
	}
	for i, st := range steps {
		e.clock.Add(st.advance)
		topic.down.Store(!st.up)
		staged := e.record(t, i+1, store.Quarantined)
		notify.AfterCommit(ctx, f, obs.Discard(), "classify", staged[0].ID, staged)
		if got := topic.calls.Load(); got != st.calls {
			t.Errorf("%s: topic publishes tried = %d, want %d", st.name, got, st.calls)
		}
		o, err := e.store.GetNotification(ctx, staged[0].ID)
		if err != nil || o.State != st.state {
			t.Fatalf("%s: notification = %+v, %v, want %s", st.name, o, err, st.state)
		}
		if i == 1 && (o.Attempts != 0 || o.LeaseUntil.After(e.clock.Now())) {
			t.Errorf("%s: notification attempts %d lease until %v, want it never claimed", st.name, o.Attempts, o.LeaseUntil)
		}
	}
	if res, err := e.flusher().Flush(ctx); err != nil || res.Published != 0 {
		t.Errorf("reconcile's Flush() = %+v, %v, want nothing left", res, err)
	}
	e.receivedOnceEach(t, len(steps))
}

// Each destination pauses on its own: with the triage agent's stream
// unreachable, notifications that need a triage task wait, the others are
// published.
func TestPausedTriageLeavesTheTopic(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	var tries atomic.Int64
	down := func(context.Context) (notify.Tasks, error) {
		tries.Add(1)
		return nil, errors.New("nats: no servers available")
	}
	f := notify.New(e.store, notify.PubSubTopic(e.pub), notify.WithTasks(down), notify.WithPause(time.Minute),
		notify.WithAfterCommitBudget(time.Minute), notify.WithSweepEvery(time.Hour))
	tests := []struct {
		status    store.Status
		tries     int64
		published int
		paused    int
	}{
		{store.Escalated, 1, 0, 0},        // tried, failed: the triage destination pauses
		{store.AwaitingApproval, 1, 0, 1}, // needs a triage task: left pending, unclaimed
		{store.Quarantined, 1, 1, 0},      // needs none: published
	}
	for i, tt := range tests {
		res, err := f.FlushStaged(ctx, e.record(t, i+1, tt.status))
		if tries.Load() != tt.tries || res.Published != tt.published || res.Paused != tt.paused {
			t.Errorf("%s: FlushStaged() = %+v, %v with %d triage tries, want %d published, %d paused, %d tries",
				tt.status, res, err, tries.Load(), tt.published, tt.paused, tt.tries)
		}
	}
}
