package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// result is one row of the reliability table.
type result struct {
	Scenario   string
	In         int // dead messages offered (advisories published)
	Entries    int // failure-log entries that exist at the end
	Replayed   int // entries whose replay reached the work stream
	Published  int // replay messages in the work stream (all copies)
	Duplicates int // replay messages beyond one per entry: executions an agent would see twice
	Lost       int // offered and without an entry, or scheduled and never replayed
	Note       string
	Took       time.Duration
}

// batch is the dead messages of one scenario.
type batch struct {
	label string
	seqs  []uint64
	first uint64 // work stream sequence before the batch
}

// workStream returns the work stream and its last sequence.
func (s *chaosStack) workStream(ctx context.Context) (jetstream.Stream, uint64) {
	s.t.Helper()
	st, err := s.js.Stream(ctx, workStream)
	if err != nil {
		s.t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	return st, info.State.LastSeq
}

// originals publishes n tasks, one tenant each (so no tenant breaker opens:
// the scenarios measure loss, not the breaker), and returns the batch.
func (s *chaosStack) originals(label string, n int) *batch {
	s.t.Helper()
	ctx := context.Background()
	_, last := s.workStream(ctx)
	b := &batch{label: label, first: last}
	for i := range n {
		m := nats.NewMsg("agents.backend.tasks.code_review")
		m.Data = fmt.Appendf(nil, `{"scenario":%q,"n":%d}`, label, i)
		m.Header.Set("X-Tenant-ID", fmt.Sprintf("%s-%d", label, i))
		m.Header.Set("X-Task-ID", fmt.Sprintf("%s-task-%d", label, i))
		m.Header.Set("X-Idempotency-Key", fmt.Sprintf("%s-task-%d-v1", label, i))
		ack, err := s.js.PublishMsg(ctx, m)
		if err != nil {
			s.t.Fatalf("publish original: %v", err)
		}
		b.seqs = append(b.seqs, ack.Sequence)
	}
	return b
}

// offer publishes the terminated advisory of each message as nats-server
// does (reason "timeout": transient, replayed after ~1 s), at about rate per
// second; at fault (an index) it calls fault in its own goroutine.
func (s *chaosStack) offer(b *batch, rate float64, faultAt int, fault func()) {
	s.t.Helper()
	done := make(chan struct{})
	start := time.Now()
	for i, seq := range b.seqs {
		if i == faultAt && fault != nil {
			go func() { defer close(done); fault() }()
		}
		if wait := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); wait > 0 {
			time.Sleep(wait)
		}
		adv, _ := json.Marshal(map[string]any{"type": event.AdvisoryTerminated, "id": fmt.Sprint("adv-", seq),
			"timestamp": time.Now().UTC(), "stream": workStream, "consumer": "worker", "consumer_seq": seq, "stream_seq": seq,
			"deliveries": 1, "reason": "timeout"})
		// Through the server (retried while it restarts): the advisory
		// stream captures it as it captures the server's own advisories.
		for attempt := 0; ; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := s.js.Publish(ctx, "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED."+workStream+".worker", adv)
			cancel()
			if err == nil {
				break
			}
			if attempt > 60 {
				s.t.Fatalf("publish advisory %d: %v", seq, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	if faultAt >= 0 && faultAt < len(b.seqs) && fault != nil {
		<-done
	}
}

func entryID(seq uint64) string {
	id, _ := store.EntryID(event.ID(workStream, seq))
	return id
}

// entries reads the batch's entries (nil where absent), retrying while the
// scenario's faults make Firestore fail.
func (s *chaosStack) entries(b *batch) []*store.Entry {
	s.t.Helper()
	st := store.New(s.fs)
	out := make([]*store.Entry, 0, len(b.seqs))
	for chunk := range slices.Chunk(b.seqs, 300) {
		ids := make([]string, len(chunk))
		for j, seq := range chunk {
			ids[j] = entryID(seq)
		}
		var got map[string]*store.Entry
		var err error
		for attempt := 0; attempt < 30; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			got, err = st.EntriesByID(ctx, ids)
			cancel()
			if err == nil {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil {
			s.t.Fatalf("read entries: %v", err)
		}
		for _, id := range ids {
			out = append(out, got[id])
		}
	}
	return out
}

// replays counts the replay messages per entry id in the work stream after
// the batch began.
func (s *chaosStack) replays(b *batch) map[string]int {
	s.t.Helper()
	ctx := context.Background()
	st, last := s.workStream(ctx)
	mine := map[string]bool{}
	for _, seq := range b.seqs {
		mine[entryID(seq)] = true
	}
	out := map[string]int{}
	for seq := b.first + 1; seq <= last; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			s.t.Fatalf("get %d: %v", seq, err)
		}
		if of := m.Header.Get("Jsdlq-Replay-Of"); mine[of] {
			out[of]++
		}
	}
	return out
}

// pollEvery is how often settle and waitScheduled look again: a scenario
// ends within this of its last replay.
const pollEvery = 250 * time.Millisecond

// settle waits until every message of the batch has its entry and every
// entry has been replayed (or within), and returns the measured row.
func (s *chaosStack) settle(b *batch, within time.Duration) result {
	s.t.Helper()
	deadline := time.Now().Add(within)
	var es []*store.Entry
	var reps map[string]int
	for {
		es = s.entries(b)
		reps = s.replays(b)
		done := true
		for _, e := range es {
			if e == nil || reps[e.ID] == 0 || e.Status != store.Replayed {
				done = false
				break
			}
		}
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(pollEvery)
	}
	r := result{Scenario: b.label, In: len(b.seqs)}
	for _, e := range es {
		if e == nil {
			r.Lost++
			continue
		}
		r.Entries++
		n := reps[e.ID]
		r.Published += n
		if n > 0 {
			r.Replayed++
		} else {
			r.Lost++
		}
		if n > 1 {
			r.Duplicates += n - 1
		}
	}
	return r
}
