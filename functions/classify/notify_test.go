package classify

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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

// topicLog counts what reaches the notifications topic it publishes to.
type topicLog struct {
	mu    sync.Mutex
	n     int
	topic notify.Topic
}

func (l *topicLog) Publish(ctx context.Context, data []byte, attrs map[string]string) error {
	if err := l.topic.Publish(ctx, data, attrs); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	return nil
}

func (l *topicLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// With the flusher it runs, classify publishes what its own commit staged,
// by id, and what another flush left only at its next sweep, a minute on:
// a flush of everything pending would have published the leftover at once.
func TestFlushPublishesWhatTheCommitStaged(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	// The real Pub/Sub emulator and JetStream take the notifications and
	// the triage tasks.
	ps, project := testenv.PubSub(t)
	topicName := fmt.Sprintf("projects/%s/topics/%s", project, jevent.DefaultNotificationsTopic)
	testenv.TopicWithSubscription(t, ctx, ps, topicName, fmt.Sprintf("projects/%s/subscriptions/%s", project, testenv.Name(t, "sub")))
	pub := ps.Publisher(topicName)
	t.Cleanup(pub.Stop)
	_, js := testenv.NewNATS(t).Connect(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: jevent.DefaultWorkStream, Subjects: []string{"agents.>"}}); err != nil {
		t.Fatal(err)
	}
	topic := &topicLog{topic: notify.PubSubTopic(pub)}
	// A budget no loaded test machine runs out of: the test is about
	// what is published, not when (BenchmarkClassifyNotificationsDown).
	f := notify.New(e.store, topic, notify.WithTasks(func(context.Context) (notify.Tasks, error) { return js, nil }),
		notify.WithAfterCommitBudget(time.Minute))
	h := New(Config{}, Deps{Logger: obs.NewLogger(e.logs), Store: e.store, Policy: e.policy, Scheduler: e.sched, Now: e.clock.Now, Notify: f})
	steps := []struct {
		name     string
		advance  time.Duration
		leftover bool // another instance records an escalation it does not flush
		total    int  // published so far
	}{
		{"the first flush also sweeps", 0, false, 1},
		{"within the minute: what the commit staged", 10 * time.Second, true, 2},
		{"a minute on: the sweep takes the leftover", time.Minute, false, 4},
	}
	seq := uint64(10)
	for _, st := range steps {
		e.clock.Add(st.advance)
		if st.leftover {
			seq++
			left := &store.Entry{ID: fmt.Sprint("TASKS.", seq), EventID: fmt.Sprint("TASKS.", seq), Stream: "TASKS", StreamSeq: int64(seq),
				Tenant: "acme", Kind: "explicit", Category: "permanent", ReasonCode: "data_integrity", Status: store.Escalated}
			if _, err := e.store.Record(ctx, left, "classify"); err != nil {
				t.Fatal(err)
			}
		}
		seq++
		if err := h.Handle(ctx, cloudEvent(t, explicit(seq, "impossible_task", "", msg{payload: []byte("p")}))); err != nil {
			t.Fatalf("%s: Handle() = %v", st.name, err)
		}
		if got := topic.count(); got != st.total {
			t.Errorf("%s: published %d in all, want %d", st.name, got, st.total)
		}
	}
}
