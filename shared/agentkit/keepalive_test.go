package agentkit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
)

// ackLog records every acknowledgement sent for deliveries of the TASKS
// stream ($JS.ACK.TASKS.>): "+ACK", "-NAK", "+WPI" (in progress), "+TERM".
type ackLog struct {
	mu      sync.Mutex
	kinds   []string
	monitor *nats.Conn
}

func newAckLog(t *testing.T, n *testenv.NATS) *ackLog {
	t.Helper()
	nc, _ := n.Connect(t)
	l := &ackLog{monitor: nc}
	if _, err := nc.Subscribe("$JS.ACK.TASKS.>", func(m *nats.Msg) {
		kind, _, _ := strings.Cut(string(m.Data), " ")
		l.mu.Lock()
		l.kinds = append(l.kinds, kind)
		l.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return l
}

// seen returns the kinds of acknowledgement seen once every one agent
// sent before the call has arrived.
func (l *ackLog) seen(t *testing.T, agent *nats.Conn) map[string]int {
	t.Helper()
	if err := agent.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := l.monitor.Flush(); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, k := range l.kinds {
		out[k]++
	}
	return out
}

// workFixture is a NATS with TASKS and one consumer, a Firestore, and an
// ack log.
type workFixture struct {
	nats    *testenv.NATS
	nc      *nats.Conn
	js      jetstream.JetStream
	cons    jetstream.Consumer
	fs      *firestore.Client
	project string
	acks    *ackLog
}

// newWorkFixture makes a workFixture whose consumer "backend" has cfg.
func newWorkFixture(t *testing.T, cfg jetstream.ConsumerConfig) *workFixture {
	t.Helper()
	ctx := testenv.Context(t)
	w := &workFixture{nats: testenv.NewNATS(t)}
	w.nc, w.js = w.nats.Connect(t)
	if _, err := w.js.CreateStream(ctx, jetstream.StreamConfig{Name: "TASKS", Subjects: []string{"agents.>"},
		Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	cfg.Durable, cfg.AckPolicy = "backend", jetstream.AckExplicitPolicy
	var err error
	if w.cons, err = w.js.CreateOrUpdateConsumer(ctx, "TASKS", cfg); err != nil {
		t.Fatal(err)
	}
	w.fs, w.project = testenv.Firestore(t)
	w.acks = newAckLog(t, w.nats)
	return w
}

func publishTask(t *testing.T, js jetstream.JetStream, key string) uint64 {
	t.Helper()
	m := nats.NewMsg("agents.backend.tasks.review")
	m.Header.Set("X-Tenant-ID", "acme")
	m.Header.Set("X-Idempotency-Key", key)
	m.Data = []byte(key)
	ack, err := js.PublishMsg(testenv.Context(t), m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// work is a task's work: it lasts d, or until its context ends.
func work(d time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// A task that runs three times its ack deadline completes once and is
// acked once: the keep-alive's in-progress acks keep the server from
// redelivering it mid-work, and the claim, renewed on the same timer with
// a lease of three intervals, is never taken over. The consumer's ack
// deadline is read from its AckWait, or from its BackOff entry for the
// delivery (which the server waits instead).
func TestOnceOutlivesTheAckDeadline(t *testing.T) {
	tests := []struct {
		name     string
		cfg      jetstream.ConsumerConfig
		deadline time.Duration
	}{
		{"AckWait", jetstream.ConsumerConfig{MaxDeliver: 3, AckWait: time.Second}, time.Second},
		{"BackOff", jetstream.ConsumerConfig{MaxDeliver: 3, AckWait: time.Minute, BackOff: []time.Duration{time.Second, time.Minute}}, time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorkFixture(t, tc.cfg)
			js, cons, fs := w.js, w.cons, w.fs
			ctx := testenv.Context(t)
			seq := publishTask(t, js, "long-1")
			m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
			if err != nil {
				t.Fatal(err)
			}
			kit := agentkit.New(js, agentkit.WithFirestore(fs), agentkit.WithAgent("backend"))
			task := agentkit.TaskOf(m)
			id := task.DocID()
			var claimed agentkit.IdempotencyRecord
			runs := 0
			ran, err := kit.Once(ctx, task, func(ctx context.Context) error {
				runs++
				claimed = readRecord(t, fs, id)
				return work(3 * tc.deadline)(ctx)
			})
			if !ran || err != nil || runs != 1 {
				t.Fatalf("Once(3 × the ack deadline) = %v, %v (runs %d); want true, nil, one run", ran, err, runs)
			}
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatalf("ack after completion: %v", err)
			}
			// The lease is three keep-alive intervals of half the deadline.
			if got, want := claimed.LeaseUntil.Sub(claimed.ClaimedAt), 3*tc.deadline/2; got != want {
				t.Errorf("claim lease = %v, want %v (3 intervals of half the ack deadline)", got, want)
			}
			rec := readRecord(t, fs, id)
			if !rec.Completed() || rec.Owner != claimed.Owner || !rec.LeaseUntil.IsZero() || !rec.RenewedAt.IsZero() {
				t.Errorf("record after completion = %+v; want completed by the claim's owner %s, no lease", rec, claimed.Owner)
			}
			info, err := cons.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.Delivered.Consumer != 1 || info.NumRedelivered != 0 || info.NumAckPending != 0 || info.AckFloor.Stream != seq {
				t.Errorf("consumer after the task: delivered %d, redelivered %d, ack pending %d, ack floor %d; want 1, 0, 0, %d",
					info.Delivered.Consumer, info.NumRedelivered, info.NumAckPending, info.AckFloor.Stream, seq)
			}
			seen := w.acks.seen(t, w.nc)
			if seen["+ACK"] != 1 || seen["+WPI"] < 4 || len(seen) != 2 {
				t.Errorf("acknowledgements = %v; want one +ACK and an in-progress ack every half deadline (at least 4)", seen)
			}
		})
	}
}

// The claim is renewed while fn runs: its lease moves on and renewed_at
// says when it last did; expire_at follows the last renewal.
func TestOnceRenewsTheClaim(t *testing.T) {
	fs, _ := testenv.Firestore(t)
	ctx := testenv.Context(t)
	interval := 100 * time.Millisecond
	kit := agentkit.New(nil, agentkit.WithFirestore(fs), agentkit.WithKeepAlive(interval))
	task := agentkit.Task{Tenant: "acme", Key: "renewed"}
	var renewed agentkit.IdempotencyRecord
	ran, err := kit.Once(ctx, task, func(ctx context.Context) error {
		testenv.WaitFor(t, 30*time.Second, func() error {
			renewed = readRecord(t, fs, task.DocID())
			if renewed.RenewedAt.IsZero() {
				return errors.New("the claim has not been renewed yet")
			}
			return nil
		})
		return nil
	})
	if !ran || err != nil {
		t.Fatalf("Once = %v, %v", ran, err)
	}
	if renewed.Status != agentkit.StatusInProgress || renewed.LeaseUntil.Sub(renewed.RenewedAt) != agentkit.LeaseIntervals*interval ||
		renewed.ExpireAt.Sub(renewed.RenewedAt) != agentkit.DefaultIdempotencyTTL || !renewed.RenewedAt.After(renewed.ClaimedAt) {
		t.Errorf("renewed claim = %+v; want in progress, lease %v and expiry 72 h from the renewal", renewed, agentkit.LeaseIntervals*interval)
	}
}

// A claim another worker took over, or completed, cancels the work at the
// next renewal: Once returns ErrClaimLost, the loser records nothing (the
// winner's record stays as it is) and the kit sends no ack, NAK or TERM —
// only in-progress acks.
func TestOnceLostClaimCancelsTheWork(t *testing.T) {
	tests := []struct {
		name string
		// winner is what the other worker wrote.
		winner func(now time.Time) agentkit.IdempotencyRecord
		// ignoreCancel: fn returns nil after its context ends.
		ignoreCancel bool
	}{
		{"taken over", func(now time.Time) agentkit.IdempotencyRecord {
			return agentkit.IdempotencyRecord{Status: agentkit.StatusInProgress, Owner: "ffffffffffffffff", ClaimedAt: now, LeaseUntil: now.Add(time.Hour)}
		}, false},
		{"completed by another", func(now time.Time) agentkit.IdempotencyRecord {
			return agentkit.IdempotencyRecord{Status: agentkit.StatusCompleted, Owner: "ffffffffffffffff", CompletedAt: now}
		}, false},
		{"taken over, fn ignores the cancellation", func(now time.Time) agentkit.IdempotencyRecord {
			return agentkit.IdempotencyRecord{Status: agentkit.StatusInProgress, Owner: "ffffffffffffffff", ClaimedAt: now, LeaseUntil: now.Add(time.Hour)}
		}, true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorkFixture(t, jetstream.ConsumerConfig{MaxDeliver: 3, AckWait: time.Second})
			js, cons, fs := w.js, w.cons, w.fs
			ctx := testenv.Context(t)
			publishTask(t, js, fmt.Sprintf("lost-%d", i))
			m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
			if err != nil {
				t.Fatal(err)
			}
			kit := agentkit.New(js, agentkit.WithFirestore(fs), agentkit.WithAgent("loser"))
			task := agentkit.TaskOf(m)
			ref := fs.Collection(agentkit.DefaultIdempotencyCollection).Doc(task.DocID())
			var winner agentkit.IdempotencyRecord
			var cause error
			ran, err := kit.Once(ctx, task, func(ctx context.Context) error {
				winner = tc.winner(time.Now().UTC().Truncate(time.Microsecond))
				winner.Key, winner.Tenant, winner.Agent = task.Key, task.Tenant, "winner"
				winner.ExpireAt = winner.ClaimedAt.Add(72 * time.Hour)
				if _, err := ref.Set(ctx, winner); err != nil {
					return err
				}
				<-ctx.Done()
				cause = context.Cause(ctx)
				if tc.ignoreCancel {
					return nil
				}
				return ctx.Err()
			})
			if !ran || !errors.Is(err, agentkit.ErrClaimLost) {
				t.Fatalf("Once after losing its claim = %v, %v; want true, ErrClaimLost", ran, err)
			}
			if !errors.Is(cause, agentkit.ErrClaimLost) {
				t.Errorf("fn's context ended with cause %v, want ErrClaimLost", cause)
			}
			if got := readRecord(t, fs, task.DocID()); got != winner {
				t.Errorf("record after the loser's Once = %+v, want the winner's %+v untouched", got, winner)
			}
			if seen := w.acks.seen(t, w.nc); len(seen) != 1 || seen["+WPI"] < 1 {
				t.Errorf("acknowledgements = %v; want in-progress acks only (nothing settled by the loser)", seen)
			}
		})
	}
}

// A worker that dies mid-task (here: its NATS connection and its Firestore
// client closed under it, so it can neither keep the task alive nor
// release its claim) is taken over once its claim lapses: the server
// redelivers the task after its ack deadline, the redelivery meets the
// live claim (ErrInProgress, NAK) until the lease ends, then runs it, and
// the work runs to one completion.
func TestOnceAbandonedTaskIsTakenOver(t *testing.T) {
	w := newWorkFixture(t, jetstream.ConsumerConfig{MaxDeliver: 20, AckWait: time.Second})
	ctx := testenv.Context(t)
	seq := publishTask(t, w.js, "abandoned")

	// Worker A, with a connection and a Firestore client of its own.
	ncA, jsA := w.nats.Connect(t)
	fsA, err := firestore.NewClient(ctx, w.project)
	if err != nil {
		t.Fatal(err)
	}
	consA, err := jsA.Consumer(ctx, "TASKS", "backend")
	if err != nil {
		t.Fatal(err)
	}
	mA, err := consA.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	kitA := agentkit.New(jsA, agentkit.WithFirestore(fsA), agentkit.WithAgent("worker-a"))
	started, resultA := make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := kitA.Once(ctx, agentkit.TaskOf(mA), func(ctx context.Context) error {
			close(started)
			<-ctx.Done() // A never finishes: it dies first
			return ctx.Err()
		})
		resultA <- err
	}()
	testenv.Await(t, started, 30*time.Second, "worker A to start the task")
	ncA.Close()
	if err := fsA.Close(); err != nil {
		t.Fatal(err)
	}

	// Worker B takes the redeliveries.
	kitB := agentkit.New(w.js, agentkit.WithFirestore(w.fs), agentkit.WithAgent("worker-b"))
	completions, busy := 0, 0
	for done := false; !done; {
		m, err := w.cons.Next(jetstream.FetchMaxWait(30 * time.Second))
		if err != nil {
			t.Fatalf("no redelivery to worker B: %v", err)
		}
		ran, err := kitB.Once(ctx, agentkit.TaskOf(m), func(context.Context) error { completions++; return nil })
		switch {
		case errors.Is(err, agentkit.ErrInProgress):
			busy++ // A's claim has not lapsed yet
			if err := m.NakWithDelay(300 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
		case err != nil || !ran:
			t.Fatalf("worker B's Once = %v, %v; want it to run the task", ran, err)
		default:
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
			done = true
		}
	}
	if completions != 1 {
		t.Errorf("the task completed %d times, want once", completions)
	}
	if err := testenv.Await(t, resultA, 30*time.Second, "worker A's Once to end"); !errors.Is(err, agentkit.ErrClaimLost) {
		t.Errorf("worker A's Once = %v, want ErrClaimLost (it could not renew its claim)", err)
	}
	rec := readRecord(t, w.fs, agentkit.IdempotencyDocID("acme", "abandoned"))
	if !rec.Completed() || rec.Agent != "worker-b" {
		t.Errorf("record = %+v, want completed by worker-b", rec)
	}
	info, err := w.cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.AckFloor.Stream != seq {
		t.Errorf("consumer: ack pending %d, ack floor %d; want 0, %d", info.NumAckPending, info.AckFloor.Stream, seq)
	}
	t.Logf("worker B met worker A's live claim %d times before it lapsed", busy)
}
