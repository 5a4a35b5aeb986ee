package chaos

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
)

// recordCapacity is the record stream's message limit on the chaos stack
// (RECORD_STREAM_MAX_MSGS of its bridge): half a storm, so the scenario
// recordStreamFull sends more records than the stream holds.
func recordCapacity() int {
	n, _ := size()
	return n / 2
}

// recordStreamFull: with the bridge stopped, an agent terminates more tasks
// than the record stream holds. The stream refuses the copies it has no room
// for (discard new), so agentkit NAKs those tasks instead of terminating
// them: they stay in the work stream and come back. Reconcile raises
// capture_stream_filling. Once the bridge returns and forwards what the
// stream holds, reconcile trims it, the redelivered tasks are copied and
// terminated, and every task ends up with its entry: none lost, the alert
// cleared.
func (s *chaosStack) recordStreamFull(t *testing.T, n int) result {
	const subject = "agents.backend.tasks.records_full"
	label := fmt.Sprintf("bridge stopped while %d records arrive for a record stream of %d", n, recordCapacity())
	ctx := context.Background()
	r := result{Scenario: label, In: n}
	s.kill("bridge")

	_, last := s.workStream(ctx)
	b := &batch{label: label, first: last}
	for i := range n {
		m := nats.NewMsg(subject)
		m.Data = fmt.Appendf(nil, `{"records_full":%d}`, i)
		m.Header.Set("X-Tenant-ID", fmt.Sprintf("records-full-%d", i))
		m.Header.Set("X-Idempotency-Key", fmt.Sprintf("records-full-task-%d", i))
		ack, err := s.js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatalf("publish original: %v", err)
		}
		b.seqs = append(b.seqs, ack.Sequence)
	}
	// A worker that gives every task up (a permanent failure: escalated,
	// never replayed). The backoff paces the redeliveries of refused copies;
	// MaxDeliver is far out of reach, so only the record path captures them.
	cons, err := s.js.CreateOrUpdateConsumer(ctx, workStream, jetstream.ConsumerConfig{Durable: "records-full-worker",
		FilterSubject: subject, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 10 * time.Second,
		MaxDeliver: 1000, BackOff: []time.Duration{time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	kit := agentkit.New(s.js, agentkit.WithAgent("backend"))
	var mu sync.Mutex
	terminated, refused := map[uint64]bool{}, 0
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, _ := m.Metadata()
		err := kit.Terminate(ctx, m, agentkit.Failure{Code: "impossible_task", Detail: "chaos: records_full"})
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			refused++
		} else if md != nil {
			terminated[md.Sequence.Stream] = true
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	counts := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return len(terminated), refused
	}

	// The stream fills; the rest is refused and NAKed, not terminated.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(pollEvery) {
		done, no := counts()
		if done == recordCapacity() && no >= n-recordCapacity() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d terminated, %d refused within a minute; want %d and at least %d", label, done, no, recordCapacity(), n-recordCapacity())
		}
	}
	rs, err := s.js.Stream(ctx, event.DefaultRecordStream)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := rs.Info(ctx); err != nil || info.State.Msgs != uint64(recordCapacity()) {
		t.Fatalf("%s: record stream = %+v, %v; want it full at %d", label, info, err, recordCapacity())
	}
	rep, err := s.reconcileHandler().Run(ctx, false)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	raised := hasFinding(rep, audit.AlertCaptureStreamFilling)
	if !raised {
		t.Errorf("%s: reconcile raised no %s with the record stream full", label, audit.AlertCaptureStreamFilling)
	}

	// The bridge returns: reconcile trims what it forwarded, the
	// redeliveries find room, and every task gets its entry.
	s.start("bridge")
	for deadline := time.Now().Add(3 * time.Minute); ; {
		if _, err := s.reconcileHandler().Run(ctx, false); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
		r.Entries = 0
		for _, e := range s.entries(b) {
			if e != nil {
				r.Entries++
			}
		}
		if r.Entries == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	r.Lost = n - r.Entries
	// The next runs trim the last records (the audit checks them first)
	// and find the stream empty: the alert clears.
	cleared := false
	for range 3 {
		rep, err = s.reconcileHandler().Run(ctx, false)
		if err != nil {
			t.Fatalf("reconcile: %v", err)
		}
		if cleared = !hasFinding(rep, audit.AlertCaptureStreamFilling); cleared {
			break
		}
	}
	if !cleared {
		t.Errorf("%s: %s still raised after every record was captured", label, audit.AlertCaptureStreamFilling)
	}
	done, no := counts()
	r.Note = fmt.Sprintf("(%d copies refused and NAKed, %d tasks terminated once copied; alert raised %v, cleared %v)", no, done, raised, cleared)
	if done != n {
		t.Errorf("%s: %d tasks terminated, want all %d", label, done, n)
	}
	return r
}

func hasFinding(rep *audit.Report, name string) bool {
	for _, f := range rep.Findings {
		if f.Name == name {
			return true
		}
	}
	return false
}
