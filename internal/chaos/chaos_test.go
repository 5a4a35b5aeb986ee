package chaos

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// The short form's Firestore is the emulator testenv shares (started here
// when `make test` has not): Main stops it.
func TestMain(m *testing.M) { testenv.Main(m) }

// size is the dead messages per storm scenario: small in the short form
// that `make test` runs, larger with JSDLQ_CHAOS=full (`make chaos`).
func size() (n int, full bool) {
	if os.Getenv("JSDLQ_CHAOS") == "full" {
		return 200, true
	}
	return 12, false
}

// TestChaos runs every scenario on one private stack and checks the
// target: nothing lost, nothing executed twice.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos scenarios start the whole stack")
	}
	n, full := size()
	s := startStack(t, full)
	// An upper bound, waited only while something is still missing: after
	// the functions host dies, the emulator's push subscription backs off
	// and re-opens its delivery rate slowly (minutes for 200 messages).
	settle := 3 * time.Minute
	if full {
		settle = 12 * time.Minute
	}
	var rows []result
	record := func(r result) {
		rows = append(rows, r)
		t.Logf("%s: in %d, entries %d, replayed %d, published %d, duplicates %d, lost %d, %.1f s %s",
			r.Scenario, r.In, r.Entries, r.Replayed, r.Published, r.Duplicates, r.Lost, r.Took.Seconds(), r.Note)
		if r.Lost != 0 || r.Duplicates != 0 || r.Entries != r.In {
			t.Errorf("%s: lost %d, duplicates %d, entries %d of %d; want 0 lost, 0 duplicates", r.Scenario, r.Lost, r.Duplicates, r.Entries, r.In)
		}
	}
	storm := func(label string, fault func()) result {
		b := s.originals(label, n)
		s.offer(b, float64(n)/3, n/3, fault)
		return s.settle(b, settle)
	}
	// scenario runs f when the form includes it and times it from the
	// first message offered to the last replay settled.
	scenario := func(inShort bool, f func() result) {
		if !full && !inShort {
			return
		}
		t0 := time.Now()
		r := f()
		r.Took = time.Since(t0)
		record(r)
	}

	// The short form leaves out the scenarios whose package tests cover
	// the same path deterministically (Firestore and Cloud Tasks outages:
	// classify TestFirestoreUnavailableIsRetried and
	// TestSchedulingRetryIsIdempotent, replay TestFirestoreDownAnswers503)
	// the baseline, and the functions-host SIGKILL (below).
	scenario(false, func() result { return storm("no fault (baseline)", nil) })

	scenario(true, func() result {
		return storm("bridge SIGKILL mid-storm, restarted", func() {
			s.kill("bridge")
			time.Sleep(time.Second)
			s.start("bridge")
		})
	})

	scenario(true, func() result {
		return storm("nats-server SIGKILL mid-storm, restarted", func() {
			s.kill("nats")
			time.Sleep(2 * time.Second)
			s.start("nats")
		})
	})

	// Out of the short form: the push subscription slows down after the
	// failed pushes (80 s to settle 12 messages); the injected scenario
	// below covers both crash points deterministically and fast.
	scenario(false, func() result {
		b := s.originals("functions host SIGKILL mid-storm (classify and replay crash anywhere)", n)
		s.offer(b, float64(n)/3, n/3, func() {
			time.Sleep(500 * time.Millisecond)
			s.kill("functions")
			time.Sleep(time.Second)
			s.start("functions")
		})
		r := s.settle(b, 3*time.Minute)
		if r.Lost == 0 {
			return r
		}
		// Pushes that failed while the host was down (or hit the entry lock
		// a killed transaction left in the emulator) are redelivered by
		// the emulator late or not at all; in production Pub/Sub's retry
		// policy redelivers them. reconcile's capture audit is the safety
		// net either way: it re-drives every advisory without an entry.
		late := r.Lost
		rr := s.reconcileOnce(t)
		r = s.settle(b, settle)
		r.Note = fmt.Sprintf("(%d still without a replay after 3 min; reconcile's capture audit re-drove %d)", late, rr)
		return r
	})

	scenario(true, func() result { return s.injected(t, n) })

	scenario(false, func() result {
		return storm("Firestore emulator paused 10 s (SIGSTOP/SIGCONT) while classify runs", func() {
			s.signal("firestore", syscall.SIGSTOP)
			time.Sleep(10 * time.Second)
			s.signal("firestore", syscall.SIGCONT)
		})
	})

	scenario(false, func() result {
		return storm("Cloud Tasks unreachable 8 s (SIGSTOP) after classify's transaction", func() {
			s.signal("tasks", syscall.SIGSTOP)
			time.Sleep(8 * time.Second)
			s.signal("tasks", syscall.SIGCONT)
		})
	})

	scenario(true, func() result { // Cloud Tasks emulator restart with replays pending.
		s.setQueuePaused(true)
		b := s.originals("Cloud Tasks emulator restarted with replays pending (--data-dir)", n)
		s.offer(b, float64(n)/2, -1, nil)
		s.waitScheduled(b, settle)
		s.kill("tasks")
		s.start("tasks")
		s.setQueuePaused(false)
		return s.settle(b, settle)
	})

	scenario(true, func() result { // Pub/Sub emulator restart: the emulator keeps nothing.
		b := s.originals("Pub/Sub emulator restarted mid-storm; topic and subscriptions recreated", n)
		s.offer(b, float64(n)/3, n/3, func() {
			s.kill("pubsub")
			s.start("pubsub")
			s.provisionPubSub()
		})
		r := s.selfHealed(b, settle)
		before := r.Lost
		// What the emulator dropped was acked in JetStream already (the
		// bridge acks once Pub/Sub confirmed): reconcile's capture audit
		// finds the advisories without entries and re-drives them.
		rr := s.reconcileOnce(t)
		r = s.settle(b, settle)
		r.Note = fmt.Sprintf("(%d without entry before reconcile; its capture audit re-drove %d)", before, rr)
		return r
	})

	scenario(true, func() result { return s.recordStreamFull(t, n) })
	scenario(true, func() result { return s.pubsubTenTimes(t) })
	scenario(true, func() result { return s.taskThreeTimes(t) })
	scenario(true, func() result { return s.twoReconciles(t, n) })

	table := render(rows, n, full)
	t.Log("\n" + table)
	if path := os.Getenv("JSDLQ_CHAOS_REPORT"); path != "" && !t.Failed() {
		if err := writeReport(path, table); err != nil {
			t.Errorf("write report: %v", err)
		}
	}
}

// selfHealed waits until the pipeline has done what it does for the batch
// on its own, and returns the row: the bridge acknowledged every advisory
// (Pub/Sub confirmed each event, after the bridge's own retries), then the
// push subscription's longest backoff passed twice, so a push that failed
// was tried again. What is missing after that was dropped after Pub/Sub
// confirmed it: only reconcile brings it back.
func (s *chaosStack) selfHealed(b *batch, within time.Duration) result {
	s.t.Helper()
	consumer := event.DefaultAdvisoryStream + "/" + event.DefaultBridgeConsumer
	for deadline := time.Now().Add(within); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := s.js.Consumer(ctx, event.DefaultAdvisoryStream, event.DefaultBridgeConsumer)
		var ci *jetstream.ConsumerInfo
		if err == nil {
			ci, err = info.Info(ctx)
		}
		cancel()
		if err == nil && ci.NumPending == 0 && ci.NumAckPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: the bridge has not acknowledged every advisory within %s (%s: %+v, %v)", b.label, within, consumer, ci, err)
		}
		time.Sleep(pollEvery)
	}
	return s.settle(b, 2*pushMaxBackoff)
}

// waitScheduled waits until every message of the batch has a scheduled entry.
func (s *chaosStack) waitScheduled(b *batch, within time.Duration) {
	s.t.Helper()
	for deadline := time.Now().Add(within); ; {
		ok := true
		for _, e := range s.entries(b) {
			if e == nil || e.Status != store.Scheduled {
				ok = false
				break
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: entries not all scheduled within %s", b.label, within)
		}
		time.Sleep(pollEvery)
	}
}

func (s *chaosStack) reconcileHandler() *reconciler.Handler {
	sched := tasks.New(tasks.Config{Queue: s.queue, ReplayURL: "http://" + s.addr["functions"] + "/Replay",
		ServiceAccount: s.tasksSA(), EmulatorHost: s.addr["tasks"]})
	s.t.Cleanup(func() { sched.Close() })
	return reconciler.New(reconciler.Config{CaptureGrace: time.Millisecond, Grace: time.Millisecond, TimeBudget: time.Minute},
		reconciler.Deps{Logger: obs.Discard(), Store: store.New(s.fs), Tasks: sched,
			JetStream: func(context.Context) (jetstream.JetStream, error) { return s.js, nil }})
}

// reconcileOnce runs reconcile (in process, against the stack) and returns
// how many captured messages it re-drove.
func (s *chaosStack) reconcileOnce(t *testing.T) int {
	rep, err := s.reconcileHandler().Run(context.Background(), false)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	for _, f := range rep.Findings {
		if f.Name == "advisory_entry_mismatch" && f.Repair != nil {
			return f.Repair.Done
		}
	}
	return 0
}

// terminatedEvent is the bridge's event for work-stream message seq after
// the worker terminated it once; advisoryID tells one advisory from another.
func terminatedEvent(orig *jetstream.RawStreamMsg, seq uint64, advisoryID string, now time.Time) event.Event {
	ev := event.Event{Schema: event.Schema, ID: event.ID(workStream, seq), Kind: event.KindTerminated, Stream: workStream,
		StreamSeq: seq, Consumer: "worker", Tenant: orig.Header.Get("X-Tenant-ID"), Agent: "backend",
		Advisory: &event.Advisory{Type: event.AdvisoryTerminated, ID: advisoryID, Timestamp: now, Stream: workStream, Consumer: "worker",
			StreamSeq: seq, Deliveries: 1, Reason: "timeout"},
		ObservedAt: now}
	ev.Message.Subject = orig.Subject
	ev.Message.Headers = event.EncodeHeaders(orig.Header)
	ev.Message.SetPayload(orig.Data)
	return ev
}

// pubsubTenTimes delivers one Pub/Sub message (the same message id and
// body) ten times at once to /Classify, as a push subscription may.
func (s *chaosStack) pubsubTenTimes(t *testing.T) result {
	b := s.originals("one Pub/Sub message delivered 10 times at once", 1)
	seq := b.seqs[0]
	ctx := context.Background()
	st, err := s.js.Stream(ctx, workStream)
	if err != nil {
		t.Fatal(err)
	}
	orig, err := st.GetMsg(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	ev := terminatedEvent(orig, seq, "dup", now)
	body, err := event.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	push := map[string]any{"message": map[string]any{"data": base64.StdEncoding.EncodeToString(body), "attributes": ev.Attributes(),
		"messageId": "chaos-dup-1", "publishTime": now.Format(time.RFC3339Nano)},
		"subscription": "projects/" + s.project + "/subscriptions/classify-push"}
	var wg sync.WaitGroup
	codes := make([]int, 10)
	for i := range codes {
		wg.Add(1)
		go func() { defer wg.Done(); codes[i], _ = s.post("/Classify", "", nil, push) }()
	}
	wg.Wait()
	r := s.settle(b, 3*time.Minute)
	r.In = 1
	r.Note = fmt.Sprintf("(answers %v; the entry is created by one transaction, the task name is fixed)", codes)
	return r
}

// taskThreeTimes dispatches one replay task three times at once, with a
// genuine token, as Cloud Tasks' rare duplicate executions do.
func (s *chaosStack) taskThreeTimes(t *testing.T) result {
	s.setQueuePaused(true)
	b := s.originals("one Cloud Task dispatched 3 times at once", 1)
	s.offer(b, 10, -1, nil)
	s.waitScheduled(b, 3*time.Minute)
	authz := s.token()
	id := entryID(b.seqs[0])
	var wg sync.WaitGroup
	codes := make([]int, 3)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _ = s.post("/Replay", authz, map[string]string{"X-CloudTasks-TaskName": tasks.Name(id, 1)},
				tasks.Body{EntryID: id, Attempt: 1})
		}()
	}
	wg.Wait()
	s.setQueuePaused(false) // the real task follows: a fourth delivery
	r := s.settle(b, 3*time.Minute)
	r.Note = fmt.Sprintf("(answers %v, then the queued task itself)", codes)
	return r
}

// twoReconciles has two reconcile runs repair the same damage at once: n
// scheduled entries whose tasks were deleted from the queue.
func (s *chaosStack) twoReconciles(t *testing.T, n int) result {
	s.setQueuePaused(true)
	b := s.originals("two reconcile runs at once repairing deleted tasks", n)
	s.offer(b, float64(n)/2, -1, nil)
	s.waitScheduled(b, 3*time.Minute)
	for _, e := range s.entries(b) {
		if err := s.ct.DeleteTask(context.Background(), deleteReq(s.queue+"/tasks/"+e.TaskName)); err != nil {
			t.Fatalf("delete task %s: %v", e.TaskName, err)
		}
	}
	time.Sleep(5 * time.Millisecond) // past the 1 ms grace
	h1, h2 := s.reconcileHandler(), s.reconcileHandler()
	var wg sync.WaitGroup
	reps := make([]*audit.Report, 2)
	errs := make([]error, 2)
	for i, h := range []*reconciler.Handler{h1, h2} {
		wg.Add(1)
		go func() { defer wg.Done(); reps[i], errs[i] = h.Run(context.Background(), false) }()
	}
	wg.Wait()
	done, held := 0, 0
	for i := range reps {
		switch {
		case errors.Is(errs[i], reconciler.ErrLeaseHeld):
			held++
		case errs[i] != nil:
			t.Fatalf("reconcile run %d: %v", i, errs[i])
		default:
			// Only the recreated tasks: the same run may also release a held
			// entry or publish a notification, repairs of other kinds.
			for _, f := range reps[i].Findings {
				if f.Name == audit.AlertMissingTask && f.Repair != nil {
					done += f.Repair.Done
				}
			}
		}
	}
	s.setQueuePaused(false)
	r := s.settle(b, 3*time.Minute)
	r.Note = fmt.Sprintf("(%d tasks recreated in total, %d run(s) refused by the lease)", done, held)
	if done != n {
		t.Errorf("two reconcile runs recreated %d tasks, want %d", done, n)
	}
	return r
}

func render(rows []result, n int, full bool) string {
	var b strings.Builder
	form := "short form (`make test`)"
	if full {
		form = "full form (`make chaos`)"
	}
	fmt.Fprintf(&b, "Measured %s, %s, %d dead messages per storm scenario; 2 shared cores. "+
		"\"settled in\" runs from the first dead message offered to the last replay confirmed (it includes the 1 s replay delay and the retry backoffs).\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), form, n)
	b.WriteString("| scenario | events in | entries out | replayed | replay messages | duplicates executed | lost | settled in |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		name := r.Scenario
		if r.Note != "" {
			name += " " + r.Note
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %.0f s |\n", name, r.In, r.Entries, r.Replayed, r.Published, r.Duplicates, r.Lost, r.Took.Seconds())
	}
	return b.String()
}

const beginMark, endMark = "<!-- chaos:begin -->", "<!-- chaos:end -->"

func writeReport(path, table string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(doc)
	i, j := strings.Index(s, beginMark), strings.Index(s, endMark)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s … %s block", path, beginMark, endMark)
	}
	return os.WriteFile(path, []byte(s[:i+len(beginMark)]+"\n"+table+s[j:]), 0o644)
}
