package store

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestEntryIDRoundTrip(t *testing.T) {
	tests := []struct{ event, want string }{
		{"TASKS.42", "TASKS.42"},
		{"a/b.1", "a%2Fb.1"},
		{"100%.7", "100%25.7"},
		{".", "%2E"},
		{"..", "%2E."},
		{"__x__", "%5F_x__"},
		{"ünï.3", "%C3%BCn%C3%AF.3"},
		{"with space.1", "with%20space.1"},
	}
	for _, tc := range tests {
		got, err := EntryID(tc.event)
		if err != nil || got != tc.want {
			t.Errorf("EntryID(%q) = %q, %v, want %q", tc.event, got, err, tc.want)
			continue
		}
		back, err := EventID(got)
		if err != nil || back != tc.event {
			t.Errorf("EventID(%q) = %q, %v, want %q", got, back, err, tc.event)
		}
	}
	for _, bad := range []string{"", strings.Repeat("/", 600)} {
		if _, err := EntryID(bad); !errors.Is(err, ErrBadID) {
			t.Errorf("EntryID(%d bytes) = %v, want ErrBadID", len(bad), err)
		}
	}
	// Distinct events never share an entry.
	a, _ := EntryID("a/b")
	b, _ := EntryID("a%2Fb")
	if a == b {
		t.Errorf("EntryID collision: %q", a)
	}
}

func newStore(t *testing.T, opts ...Option) (*Store, *testenv.Clock) {
	fs, _ := testenv.Firestore(t)
	c := testenv.NewClock(time.Date(2026, 11, 21, 10, 5, 0, 0, time.UTC))
	return New(fs, append([]Option{WithClock(c.Now)}, opts...)...), c
}

func entry(id string, payload []byte) *Entry {
	return &Entry{
		ID: id, EventID: id, Stream: "TASKS", StreamSeq: 7, Subject: "agents.cto.tasks.code_review",
		Tenant: "acme", Agent: "cto", TaskID: "t-1", TaskType: "code_review", Kind: "terminated",
		Headers: map[string][]string{"X-Task-ID": {"t-1"}}, Payload: payload,
		Category: "transient", ReasonCode: "timeout", Action: "auto_replay", Strategy: "transient",
		PolicyVersion: "abc", Status: Scheduled, TaskName: "x-r1",
	}
}

// recordSettled records, as classify does, the entry id that needs no
// replay task: its status is final or waits for a human, so it stages a
// notification.
func recordSettled(t *testing.T, s *Store, id string, status Status) {
	t.Helper()
	e := entry(id, nil)
	e.Status, e.TaskName = status, ""
	if _, err := s.Record(testenv.Context(t), e, "classify"); err != nil {
		t.Fatalf("Record(%s, %s) = %v", id, status, err)
	}
}

func TestRecordAndLargePayload(t *testing.T) {
	s, _ := newStore(t)
	ctx := testenv.Context(t)
	big := make([]byte, 1<<20)
	rand.Read(big)
	for _, tc := range []struct {
		name    string
		payload []byte
		chunks  int
	}{
		{"empty", nil, 0},
		{"inline limit", bytes.Repeat([]byte("a"), InlinePayload), 0},
		{"1 MiB", big, 2},
		{"one byte over", bytes.Repeat([]byte("b"), InlinePayload+1), 1},
	} {
		id := "TASKS." + strings.ReplaceAll(tc.name, " ", "-")
		before := s.Ops()
		res, err := s.Record(ctx, entry(id, tc.payload), "test")
		if err != nil || !res.Created {
			t.Fatalf("%s: Record() = %+v, %v, want created", tc.name, res, err)
		}
		ops := s.Ops()
		// The breaker read; the entry, its metrics shard, its day rollup
		// shard, its change feed row, the breaker and the chunks written.
		if r, w := ops.Reads-before.Reads, ops.Writes-before.Writes; r != 1 || w != int64(5+tc.chunks) {
			t.Errorf("%s: Record() cost %d reads %d writes, want 1 and %d", tc.name, r, w, 5+tc.chunks)
		}
		got, err := s.Get(ctx, id)
		if err != nil {
			t.Fatalf("%s: Get() = %v", tc.name, err)
		}
		if !bytes.Equal(got.Payload, tc.payload) || got.PayloadSize != int64(len(tc.payload)) || got.PayloadChunkCount != tc.chunks {
			t.Errorf("%s: Get() payload %d bytes in %d chunks, want %d bytes in %d chunks, byte for byte", tc.name, len(got.Payload), got.PayloadChunkCount, len(tc.payload), tc.chunks)
		}
		if got.ExpireAt.Sub(got.CreatedAt) != Retention || got.RootID != id || len(got.History) != 1 {
			t.Errorf("%s: Get() = expire %v root %q history %v", tc.name, got.ExpireAt.Sub(got.CreatedAt), got.RootID, got.History)
		}
	}

	// A chunk altered in storage is detected, not returned.
	id := "TASKS.1-MiB"
	e, _ := s.GetMeta(ctx, id)
	ref := s.fs.Collection(FailureLog).Doc(id).Collection(PayloadChunks).Doc(chunkID(e.PayloadSHA256, 1))
	if _, err := ref.Set(ctx, map[string]any{"data": []byte("tampered")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, id); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Get(tampered) = %v, want ErrCorrupt", err)
	}

	if _, err := s.Record(ctx, entry("TASKS.huge", make([]byte, MaxPayload+1)), "test"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Record(oversized) = %v, want ErrTooLarge", err)
	}
}

func TestRecordConcurrentDuplicatesCountOnce(t *testing.T) {
	s, c := newStore(t)
	ctx := testenv.Context(t)
	const n = 5
	var wg sync.WaitGroup
	results := make([]RecordResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = s.Record(ctx, entry("TASKS.99", []byte("payload")), "test")
		}()
	}
	wg.Wait()
	created := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Record #%d = %v", i, errs[i])
		}
		if results[i].Created {
			created++
		}
		if results[i].Entry.Status != Scheduled || results[i].Entry.TaskName != "x-r1" {
			t.Errorf("Record #%d returned %s %s, want the stored scheduled entry", i, results[i].Entry.Status, results[i].Entry.TaskName)
		}
	}
	if created != 1 {
		t.Errorf("%d of %d concurrent Record calls created the entry, want 1", created, n)
	}
	m, err := s.ReadMetrics(ctx, Hour(c.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if m.Total != 1 || m.ByKind["terminated"] != 1 || m.ByTenant["acme"] != 1 || m.ReplaysScheduled != 1 || m.StreamSeqMax["TASKS"] != 7 {
		t.Errorf("ReadMetrics() = %+v, want everything counted once", m)
	}
	b, err := s.GetBreaker(ctx, "acme")
	if err != nil || len(b.Failures) != 1 {
		t.Errorf("GetBreaker() = %+v, %v, want one failure", b, err)
	}
}

func TestRecordMergesAdvisoryAndExplicit(t *testing.T) {
	s, _ := newStore(t)
	ctx := testenv.Context(t)
	adv := entry("TASKS.5", nil)
	adv.Kind, adv.PayloadMissing, adv.Headers, adv.TermReason = "terminated", true, nil, "timeout"
	if res, err := s.Record(ctx, adv, "test"); err != nil || !res.Created {
		t.Fatalf("Record(advisory) = %+v, %v", res, err)
	}
	exp := entry("TASKS.5", []byte(`{"task":"write the post"}`))
	exp.Kind = "explicit"
	exp.Failure = &event.Failure{Code: "timeout", Detail: "llm call timed out", CompletedSteps: []string{"outline"}}
	exp.Category = "permanent" // a different classification must not overwrite the one acted on
	res, err := s.Record(ctx, exp, "test")
	if err != nil || res.Created || !res.Merged {
		t.Fatalf("Record(explicit) = %+v, %v, want merged", res, err)
	}
	got, err := s.Get(ctx, "TASKS.5")
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Payload) != `{"task":"write the post"}` || got.PayloadMissing || got.Failure == nil || got.Failure.Detail != "llm call timed out" ||
		len(got.Kinds) != 2 || got.Category != "transient" || got.Headers["X-Task-ID"][0] != "t-1" {
		t.Errorf("merged entry = %+v", got)
	}
	// Merging the same event again changes nothing.
	if res, err := s.Record(ctx, exp, "test"); err != nil || res.Merged {
		t.Errorf("Record(explicit again) = %+v, %v, want no change", res, err)
	}
	m, _ := s.ReadMetrics(ctx, Hour(got.CreatedAt))
	if m.Total != 1 {
		t.Errorf("metrics total = %d after a merge, want 1", m.Total)
	}
}

func TestTransition(t *testing.T) {
	s, c := newStore(t)
	ctx := testenv.Context(t)
	if _, err := s.Record(ctx, entry("TASKS.1", []byte("p")), "classify"); err != nil {
		t.Fatal(err)
	}
	e, err := s.Transition(ctx, "TASKS.1", Change{From: []Status{Scheduled}, To: Replaying, By: "replay", Apply: func(e *Entry) error {
		e.Replays++
		return nil
	}})
	if err != nil || e.Status != Replaying || e.Replays != 1 {
		t.Fatalf("Transition(scheduled->replaying) = %+v, %v", e, err)
	}
	// A second claim (Cloud Tasks delivered twice) is refused.
	if _, err := s.Transition(ctx, "TASKS.1", Change{From: []Status{Scheduled}, To: Replaying, By: "replay"}); !errors.Is(err, ErrWrongStatus) {
		t.Errorf("second claim = %v, want ErrWrongStatus", err)
	}
	if _, err := s.Transition(ctx, "TASKS.nope", Change{From: []Status{Scheduled}, To: Replaying}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Transition(missing) = %v, want ErrNotFound", err)
	}
	// History stays bounded.
	st := []Status{Replaying, Scheduled} // requeued by reconcile, claimed again
	for i := 0; i < MaxHistory+10; i++ {
		c.Add(time.Second)
		if _, err := s.Transition(ctx, "TASKS.1", Change{From: []Status{st[i%2]}, To: st[(i+1)%2], By: "test", Note: fmt.Sprint(i)}); err != nil {
			t.Fatalf("transition %d: %v", i, err)
		}
	}
	got, _ := s.Get(ctx, "TASKS.1")
	if len(got.History) != MaxHistory || got.History[MaxHistory-1].Note != fmt.Sprint(MaxHistory+9) || string(got.Payload) != "p" {
		t.Errorf("history has %d transitions, last %+v; payload %q", len(got.History), got.History[len(got.History)-1], got.Payload)
	}
	p, err := s.Entries(ctx, Query{Status: got.Status, Order: DueFirst, Limit: 10})
	if err != nil || len(p.Entries) != 1 || p.Entries[0].ID != "TASKS.1" {
		t.Errorf("Entries(status %s) = %+v, %v", got.Status, p, err)
	}
}

// A transition's count is written in its own transaction: made once with
// the transition, never by a repeat the status check refuses, so a crash
// between "published" and "counted" cannot exist.
func TestTransitionCountsWithItsTransaction(t *testing.T) {
	s, c := newStore(t)
	ctx := testenv.Context(t)
	e := entry("TASKS.count", nil)
	if _, err := s.Record(ctx, e, "classify"); err != nil {
		t.Fatal(err)
	}
	hour := Hour(c.Now())
	before, err := s.ReadMetrics(ctx, hour)
	if err != nil {
		t.Fatal(err)
	}
	claim(t, s, e.ID)
	replayed := Change{From: []Status{Replaying}, To: Replayed, By: "replay", Count: &Metrics{ReplaysPublished: 1}}
	if _, err := s.Transition(ctx, e.ID, replayed); err != nil {
		t.Fatalf("Transition(replayed) = %v", err)
	}
	// A retried request repeats the transition: refused, not counted.
	if _, err := s.Transition(ctx, e.ID, replayed); !errors.Is(err, ErrWrongStatus) {
		t.Fatalf("Transition(replayed) again = %v, want ErrWrongStatus", err)
	}
	for range 2 {
		if _, err := s.MarkRecovered(ctx, e.ID, []Status{Replayed}, "reconcile", "completed"); err != nil {
			t.Fatalf("MarkRecovered() = %v", err)
		}
	}
	after, err := s.ReadMetrics(ctx, hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.ReplaysPublished - before.ReplaysPublished; got != 1 {
		t.Errorf("replays_published grew by %d, want 1", got)
	}
	if got := after.ReplaysRecovered - before.ReplaysRecovered; got != 1 {
		t.Errorf("replays_recovered grew by %d, want 1", got)
	}
}

func TestBreaker(t *testing.T) {
	s, c := newStore(t)
	ctx := testenv.Context(t)
	record := func(i int, replayOf string) *Entry {
		t.Helper()
		e := entry(fmt.Sprintf("TASKS.%d", i), nil)
		e.ReplayOf = replayOf
		res, err := s.Record(ctx, e, "classify")
		if err != nil {
			t.Fatalf("Record(%d) = %v", i, err)
		}
		c.Add(time.Second)
		return res.Entry
	}
	for i := 1; i <= 9; i++ {
		if e := record(i, ""); e.Status != Scheduled {
			t.Fatalf("entry %d = %s with the breaker closed, want scheduled", i, e.Status)
		}
	}
	// The tenth failure opens the breaker; its own replay is held.
	if e := record(10, ""); e.Status != Held {
		t.Errorf("entry 10 = %s, want held (breaker opened)", e.Status)
	}
	b, _ := s.GetBreaker(ctx, "acme")
	if b.State != BreakerOpen {
		t.Fatalf("breaker = %s after 10 failures, want open", b.State)
	}
	if e := record(11, ""); e.Status != Held {
		t.Errorf("entry 11 = %s, want held", e.Status)
	}
	// Another tenant is unaffected.
	other := entry("TASKS.other", nil)
	other.Tenant = "globex"
	if res, err := s.Record(ctx, other, "classify"); err != nil || res.Entry.Status != Scheduled {
		t.Errorf("other tenant = %+v, %v, want scheduled", res.Entry, err)
	}

	c.Add(14 * time.Minute)
	if e := record(12, ""); e.Status != Held {
		t.Errorf("entry 12 before the cooldown = %s, want held", e.Status)
	}
	c.Add(time.Minute)
	// Half-open: exactly one probe.
	probe := record(13, "")
	if probe.Status != Scheduled || !probe.BreakerProbe {
		t.Errorf("entry 13 after 15 min = %s probe=%v, want the scheduled probe", probe.Status, probe.BreakerProbe)
	}
	if e := record(14, ""); e.Status != Held {
		t.Errorf("entry 14 while the probe runs = %s, want held", e.Status)
	}
	ok, isProbe, err := s.BreakerAdmit(ctx, "acme", "TASKS.13", "replay")
	if err != nil || !ok || !isProbe {
		t.Errorf("BreakerAdmit(probe) = %v %v %v, want the probe admitted again", ok, isProbe, err)
	}
	if ok, _, _ := s.BreakerAdmit(ctx, "acme", "TASKS.11", "replay"); ok {
		t.Errorf("BreakerAdmit(other) admitted while half-open")
	}
	// The probe's replay dies: a new entry that is a replay of the probe.
	record(15, "TASKS.13")
	if b, _ := s.GetBreaker(ctx, "acme"); b.State != BreakerOpen {
		t.Errorf("breaker = %s after the probe died, want open", b.State)
	}
	c.Add(15 * time.Minute)
	if b, err := s.BreakerAdvance(ctx, "acme", "reconcile"); err != nil || b.State != BreakerHalfOpen {
		t.Fatalf("BreakerAdvance() = %+v, %v, want half_open", b, err)
	}
	ok, isProbe, _ = s.BreakerAdmit(ctx, "acme", "TASKS.12", "replay")
	if !ok || !isProbe {
		t.Fatalf("BreakerAdmit(12) = %v %v, want the new probe", ok, isProbe)
	}
	if b, _ := s.BreakerProbeResult(ctx, "acme", "TASKS.11", true, "replay"); b.State != BreakerHalfOpen {
		t.Errorf("a non-probe result changed the breaker to %s", b.State)
	}
	b, err = s.BreakerProbeResult(ctx, "acme", "TASKS.12", true, "replay")
	if err != nil || b.State != BreakerClosed || len(b.Failures) != 0 {
		t.Errorf("BreakerProbeResult(recovered) = %+v, %v, want closed", b, err)
	}
	var states []string
	for _, h := range b.History {
		states = append(states, h.To)
	}
	if got := strings.Join(states, ","); got != "open,half_open,open,half_open,closed" {
		t.Errorf("breaker history = %s", got)
	}
	if e := record(16, ""); e.Status != Scheduled {
		t.Errorf("entry 16 after closing = %s, want scheduled", e.Status)
	}
}
