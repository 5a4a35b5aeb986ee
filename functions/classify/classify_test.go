package classify

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/cloudevents/sdk-go/v2/event"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/jsdlq/jsdlq/emulator/cloudtasks"
	"github.com/jsdlq/jsdlq/internal/testenv"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/triage"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type env struct {
	h      *Handler
	store  *store.Store
	fs     *firestore.Client
	emu    *testenv.CloudTasks
	queue  string
	sched  *tasks.Scheduler
	clock  *testenv.Clock
	logs   *testenv.LogBuffer
	policy *triage.Loader
}

// setup wires classify to the Firestore emulator (a project of the test's
// own) and an in-process Cloud Tasks emulator whose clock does not move, so
// scheduled replays stay in the queue to be counted.
func setup(t testing.TB) *env {
	t.Helper()
	fs, _ := testenv.Firestore(t)
	c := testenv.NewClock(time.Now().UTC())
	emu := testenv.NewCloudTasks(t, cloudtasks.WithClock(cloudtasks.NewFakeClock(c.Now())))
	queue := emu.Queue(t, "test-project", "dlq-replay")
	log, logs := testenv.Logger()
	e := &env{fs: fs, emu: emu, queue: queue, clock: c, logs: logs}
	e.store = store.New(fs, store.WithClock(c.Now))
	e.sched = tasks.New(tasks.Config{Queue: queue, ReplayURL: "http://127.0.0.1:9/Replay", ServiceAccount: "tasks@p.iam.gserviceaccount.com", EmulatorHost: emu.Host},
		tasks.WithClock(c.Now))
	t.Cleanup(func() { e.sched.Close() })
	e.policy = triage.NewLoader(store.New(fs), log)
	e.h = New(Config{}, Deps{Logger: log, Store: e.store, Policy: e.policy, Scheduler: e.sched, Now: c.Now})
	return e
}

// pubsubEvent wraps a body the way Eventarc (and the functions framework,
// for push requests) presents a Pub/Sub message.
func pubsubEvent(t testing.TB, msgID string, body []byte) event.Event {
	t.Helper()
	ce, err := testenv.PubSubEvent(msgID, body, map[string]string{"kind": "x"})
	if err != nil {
		t.Fatal(err)
	}
	return ce
}

func cloudEvent(t testing.TB, ev jevent.Event) event.Event {
	t.Helper()
	b, err := jevent.Encode(ev)
	if err != nil {
		t.Fatalf("Encode(%s) = %v", ev.ID, err)
	}
	return pubsubEvent(t, "msg-"+ev.ID, b)
}

type msg struct {
	subject string
	headers map[string][]string
	payload []byte
	// keyless leaves the task without an idempotency key; every other
	// message gets the task id task-<seq> unless its headers name a key.
	keyless bool
}

func baseEvent(seq uint64, m msg) jevent.Event {
	if m.subject == "" {
		m.subject = "agents.backend.tasks.code_review"
	}
	if !m.keyless && jevent.DefaultConventions.IdempotencyKey(m.headers) == "" {
		m.headers = maps.Clone(m.headers)
		if m.headers == nil {
			m.headers = map[string][]string{}
		}
		m.headers[jevent.HeaderTaskID] = []string{fmt.Sprint("task-", seq)}
	}
	ev := jevent.Event{
		Schema: jevent.Schema, ID: jevent.ID("TASKS", seq), Stream: "TASKS", StreamSeq: seq, Consumer: "backend",
		Tenant: jevent.DefaultConventions.Tenant(m.headers), Agent: jevent.DefaultConventions.Agent(m.subject, m.headers),
		ObservedAt: time.Now().UTC(),
	}
	ev.Message.Subject = m.subject
	ev.Message.Headers = jevent.EncodeHeaders(m.headers)
	ev.Message.SetPayload(m.payload)
	return ev
}

func explicit(seq uint64, code, detail string, m msg) jevent.Event {
	ev := baseEvent(seq, m)
	ev.Kind = jevent.KindExplicit
	ev.Failure = &jevent.Failure{Code: code, Detail: detail, Attempt: 3, Agent: ev.Agent, RecordedAt: time.Now().UTC()}
	return ev
}

func advisory(seq uint64, kind jevent.Kind, reason string, m msg) jevent.Event {
	ev := baseEvent(seq, m)
	ev.Kind = kind
	typ := jevent.AdvisoryTerminated
	if kind == jevent.KindMaxDeliver {
		typ = jevent.AdvisoryMaxDeliver
	}
	ev.Advisory = &jevent.Advisory{Type: typ, ID: fmt.Sprint("adv-", seq), Timestamp: time.Now().UTC(), Stream: "TASKS", Consumer: "backend",
		StreamSeq: seq, Deliveries: 3, Reason: reason}
	return ev
}

func (e *env) handle(t testing.TB, ce event.Event) {
	t.Helper()
	if err := e.h.Handle(testenv.Context(t), ce); err != nil {
		t.Fatalf("Handle(%s) = %v", ce.ID(), err)
	}
}

func (e *env) entry(t testing.TB, eventID string) *store.Entry {
	t.Helper()
	id, _ := store.EntryID(eventID)
	got, err := e.store.Get(testenv.Context(t), id)
	if err != nil {
		t.Fatalf("Get(%s) = %v", id, err)
	}
	return got
}

func (e *env) entries(t testing.TB) int {
	t.Helper()
	snaps, err := e.fs.Collection(store.FailureLog).Documents(testenv.Context(t)).GetAll()
	if err != nil {
		t.Fatal(err)
	}
	return len(snaps)
}

func TestStatusFollowsTheDecision(t *testing.T) {
	e := setup(t)
	tests := []struct {
		name   string
		ev     jevent.Event
		status store.Status
		action triage.Action
		cat    triage.Category
		task   bool
	}{
		{"transient", explicit(1, "llm_provider_timeout", "", msg{payload: []byte("a")}), store.Scheduled, triage.AutoReplay, triage.Transient, true},
		{"permanent", explicit(2, "impossible_task", "", msg{payload: []byte("b")}), store.Escalated, triage.Escalate, triage.Permanent, false},
		{"poison", explicit(3, "schema_invalid", "", msg{payload: []byte("c")}), store.Quarantined, triage.Quarantine, triage.Poison, false},
		{"governance", explicit(4, "approval_required", "", msg{payload: []byte("d")}), store.AwaitingApproval, triage.RequireApproval, triage.Governance, false},
		{"commit state", explicit(5, "partial_external_write", "", msg{payload: []byte("e")}), store.AwaitingApproval, triage.ManualReview, triage.UnknownCommitState, false},
		{"max deliveries without a record", advisory(6, jevent.KindMaxDeliver, "", msg{payload: []byte("f")}), store.Scheduled, triage.AutoReplay, triage.Unknown, true},
		{"server deleted by limits", advisory(7, jevent.KindTerminated, "Message deleted by stream limits", msg{payload: []byte("g")}), store.Escalated, triage.Escalate, triage.Permanent, false},
		{"server deleted unacked", advisory(8, jevent.KindTerminated, "Unacknowledged message was deleted", msg{payload: []byte("h")}), store.Escalated, triage.Escalate, triage.Permanent, false},
		{"consumer filter rejection", explicit(9, "consumer_filter_rejection", "", msg{payload: []byte("i")}), store.Escalated, triage.Escalate, triage.Permanent, false},
		{"context overflow by text", advisory(10, jevent.KindTerminated, "prompt exceeds the context window", msg{payload: []byte("j")}), store.Scheduled, triage.AutoReplay, triage.ConditionallyRecoverable, true},
		// Nothing could tell whether a keyless task already ran: a
		// human decides (triage.NoteKeyless).
		{"keyless transient", explicit(11, "llm_provider_timeout", "", msg{payload: []byte("k"), keyless: true}), store.AwaitingApproval, triage.RequireApproval, triage.Transient, false},
		{"keyless permanent", explicit(12, "impossible_task", "", msg{payload: []byte("l"), keyless: true}), store.Escalated, triage.Escalate, triage.Permanent, false},
	}
	for i, tc := range tests {
		// One tenant per case: ten failures of one tenant would open its breaker.
		tc.ev.Tenant = fmt.Sprint("tenant-", i)
		e.handle(t, cloudEvent(t, tc.ev))
		got := e.entry(t, tc.ev.ID)
		if got.Status != tc.status || got.Action != string(tc.action) || got.Category != string(tc.cat) {
			t.Errorf("%s: entry = %s/%s/%s, want %s/%s/%s", tc.name, got.Status, got.Action, got.Category, tc.status, tc.action, tc.cat)
		}
		if got.PolicyVersion != triage.Default().Version() || got.ExpireAt.Sub(got.CreatedAt) != store.Retention {
			t.Errorf("%s: policy_version %q expire_at %v", tc.name, got.PolicyVersion, got.ExpireAt)
		}
		exists, err := e.sched.Exists(testenv.Context(t), tasks.Name(got.ID, 1))
		if err != nil || exists != tc.task {
			t.Errorf("%s: replay task exists = %v, %v, want %v", tc.name, exists, err, tc.task)
		}
		if tc.task && (got.TaskName != tasks.Name(got.ID, 1) || got.NextRetryAt.Before(got.CreatedAt)) {
			t.Errorf("%s: task_name %q next_retry_at %v", tc.name, got.TaskName, got.NextRetryAt)
		}
	}
	if got := e.entry(t, jevent.ID("TASKS", 11)); got.Plan.Note != triage.NoteKeyless || got.Plan.Budget != 3 {
		t.Errorf("keyless plan = note %q budget %d, want note %q and the transient budget 3 for the approval", got.Plan.Note, got.Plan.Budget, triage.NoteKeyless)
	}
	overflow := e.entry(t, jevent.ID("TASKS", 10))
	if overflow.Plan.MaxContextTokens != 80000 || overflow.Plan.TargetModel != "large-context" || len(overflow.Plan.Instructions) != 1 {
		t.Errorf("context overflow plan = %+v", overflow.Plan)
	}
}

func TestDuplicatesAndMerge(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	// The same event delivered five times at once.
	ev := explicit(42, "network_transient", "connection reset", msg{payload: []byte(`{"task":1}`), headers: map[string][]string{"X-Tenant-ID": {"acme"}}})
	ce := cloudEvent(t, ev)
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = e.h.Handle(ctx, ce) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("delivery %d: Handle() = %v", i, err)
		}
	}
	// The advisory and the explicit record of one terminated message: the
	// advisory has no payload (TERM removed it from the WorkQueue stream).
	// Older than the record wait, so it is recorded without waiting for
	// the record (TestTerminatedAdvisoryWaitsForRecord covers a fresh one).
	adv := advisory(43, jevent.KindTerminated, "timeout", msg{headers: map[string][]string{"X-Tenant-ID": {"acme"}}})
	adv.Message.SetMissing(jevent.MissingNotFound)
	adv.Advisory.Timestamp = e.clock.Now().Add(-2 * DefaultRecordWait)
	rec := explicit(43, "timeout", "llm call timed out", msg{payload: []byte(`{"task":2}`), headers: map[string][]string{"X-Tenant-ID": {"acme"}}})
	e.handle(t, cloudEvent(t, adv))
	e.handle(t, cloudEvent(t, rec))

	if n := e.entries(t); n != 2 {
		t.Errorf("failure-log has %d entries, want 2", n)
	}
	merged := e.entry(t, rec.ID)
	if string(merged.Payload) != `{"task":2}` || merged.Failure == nil || merged.Failure.Detail != "llm call timed out" || len(merged.Kinds) != 2 || merged.TermReason != "timeout" {
		t.Errorf("merged entry = payload %q failure %+v kinds %v term %q", merged.Payload, merged.Failure, merged.Kinds, merged.TermReason)
	}
	m, err := e.store.ReadMetrics(ctx, store.Hour(e.clock.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if m.Total != 2 || m.ByTenant["acme"] != 2 || m.ReplaysScheduled != 2 {
		t.Errorf("metrics = total %d by tenant %v scheduled %d, want 2, acme 2, 2", m.Total, m.ByTenant, m.ReplaysScheduled)
	}
	if got := e.emu.Tasks(t, e.queue); len(got) != 2 {
		t.Errorf("queue has tasks %v, want one per entry", got)
	}
	// Terraform's entries-per-category metric counts entry_created lines:
	// exactly one per entry, whatever the redeliveries and merges.
	created := e.logs.Lines(`"event":"entry_created"`)
	if len(created) != 2 {
		t.Errorf("%d entry_created log lines, want 2:\n%s", len(created), strings.Join(created, "\n"))
	}
	for _, l := range created {
		for _, key := range []string{`"category":"transient"`, `"reason_code":`, `"action":"auto_replay"`} {
			if !strings.Contains(l, key) {
				t.Errorf("entry_created line lacks %s: %s", key, l)
			}
		}
	}
}

// A merge never crosses tenants. An entry made from an advisory whose
// message was gone (no headers, no subject: it could only be given the
// default tenant) takes the tenant its explicit record names, with its
// counters: after any backlog the advisory may well come first. An event
// that names another tenant than an entry whose tenant was known (forged,
// or an id reused) adds nothing to it: one tenant's payload and headers
// never land in another's entry.
func TestMergeNeverCrossesTenants(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	// The default tenant has an entry of its own in the hour, a second
	// older: it keeps it, and the recount agrees all the same.
	e.handle(t, cloudEvent(t, explicit(69, "timeout", "", msg{payload: []byte(`{}`)})))
	e.clock.Add(time.Second)
	adv := advisory(70, jevent.KindTerminated, "timeout", msg{})
	adv.Message.SetMissing(jevent.MissingNotFound)
	adv.Message.Subject, adv.Message.Headers = "", nil
	adv.Tenant, adv.Agent = jevent.DefaultTenant, ""
	adv.Advisory.Timestamp = e.clock.Now().Add(-2 * DefaultRecordWait)
	e.handle(t, cloudEvent(t, adv))
	if got := e.entry(t, adv.ID); got.Tenant != jevent.DefaultTenant {
		t.Fatalf("advisory without its message: tenant %q, want %q", got.Tenant, jevent.DefaultTenant)
	}
	rec := explicit(70, "timeout", "llm call timed out", msg{payload: []byte(`{"secret":"acme-only"}`), headers: map[string][]string{"X-Tenant-ID": {"acme"}}})
	e.handle(t, cloudEvent(t, rec))
	got := e.entry(t, rec.ID)
	if got.Tenant != "acme" || got.Agent != rec.Agent || string(got.Payload) != `{"secret":"acme-only"}` {
		t.Errorf("entry after its explicit record = tenant %q agent %q payload %q, want acme's, with its payload", got.Tenant, got.Agent, got.Payload)
	}
	for tenant, want := range map[string]int{jevent.DefaultTenant: 1, "acme": 1} {
		p, err := e.store.Entries(ctx, store.Query{Tenant: tenant, Limit: 10})
		if err != nil || len(p.Entries) != want {
			t.Errorf("entries of tenant %q = %d, %v, want %d", tenant, len(p.Entries), err, want)
		}
	}

	// Known tenant, another tenant's event with the same id.
	own := explicit(71, "timeout", "", msg{payload: []byte(`{"globex":1}`), headers: map[string][]string{"X-Tenant-ID": {"globex"}}})
	e.handle(t, cloudEvent(t, own))
	forged := advisory(71, jevent.KindMaxDeliver, "", msg{payload: []byte(`{"acme":"secret"}`), headers: map[string][]string{"X-Tenant-ID": {"acme"}, "X-Extra": {"1"}}})
	e.handle(t, cloudEvent(t, forged))
	kept := e.entry(t, own.ID)
	if kept.Tenant != "globex" || string(kept.Payload) != `{"globex":1}` || len(kept.Kinds) != 1 || kept.Headers["X-Extra"] != nil {
		t.Errorf("globex's entry after acme's event = tenant %q payload %q kinds %v headers %v, want it unchanged", kept.Tenant, kept.Payload, kept.Kinds, kept.Headers)
	}
	if n := len(e.logs.Lines(`another tenant not merged`)); n != 1 {
		t.Errorf("%d warnings for the refused merge, want 1", n)
	}

	// The hour's counters are what the entries say (the recount agrees).
	rc, err := e.store.RecountHour(ctx, e.clock.Now(), 100, true)
	if err != nil || !rc.Agreed {
		t.Errorf("RecountHour = %+v, %v, want the stored counters to agree with the entries", rc, err)
	}
}

// TestTerminatedAdvisoryWaitsForRecord: the advisory of a WorkQueue TERM has
// no message (no headers: no tenant, no replay chain). When it arrives
// before agentkit's explicit record it is refused as retryable, so the
// record creates the entry with the right tenant and chain and the
// redelivered advisory merges into it. Refusing is safe to repeat: nothing
// is written until the record exists or the wait is over.
func TestTerminatedAdvisoryWaitsForRecord(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	parent := explicit(50, "context_window_overflow", "too long", msg{payload: []byte(`{"task":5}`), headers: map[string][]string{"X-Tenant-ID": {"acme"}, "X-Task-ID": {"task-7"}}})
	e.handle(t, cloudEvent(t, parent))

	// The replay dies again: its advisory comes first, without the message.
	adv := advisory(51, jevent.KindTerminated, "context_window_overflow: still too long", msg{})
	adv.Message.SetMissing(jevent.MissingNotFound)
	adv.Message.Subject, adv.Message.Headers = "", nil
	err := e.h.Handle(ctx, cloudEvent(t, adv))
	if !errors.Is(err, ErrAwaitingRecord) {
		t.Fatalf("Handle(fresh terminated advisory without message) = %v, want ErrAwaitingRecord", err)
	}
	if n := e.entries(t); n != 1 {
		t.Fatalf("failure-log has %d entries after the refused advisory, want 1 (the parent)", n)
	}
	rec := chainEvent(51, parent.ID, "context_window_overflow", msg{payload: []byte(`{"task":5}`), headers: map[string][]string{"X-Tenant-ID": {"acme"}, "X-Task-ID": {"task-7"}}})
	e.handle(t, cloudEvent(t, rec))
	e.handle(t, cloudEvent(t, adv)) // Pub/Sub's redelivery
	got := e.entry(t, adv.ID)
	if got.Tenant != "acme" || got.ReplayOf != parent.ID || got.Rule != "second-context-overflow" || got.Status != store.Quarantined ||
		len(got.Kinds) != 2 || got.TermReason == "" {
		t.Errorf("entry = tenant %q replay_of %q rule %q status %s kinds %v term %q; want acme, the parent, second-context-overflow, quarantined, both kinds",
			got.Tenant, got.ReplayOf, got.Rule, got.Status, got.Kinds, got.TermReason)
	}

	// A TERM without agentkit has no record: once the wait is over it is
	// recorded as it is. The server's own TERMs never wait.
	old := advisory(60, jevent.KindTerminated, "impossible_task: gone", msg{})
	old.Message.SetMissing(jevent.MissingNotFound)
	old.Advisory.Timestamp = e.clock.Now().Add(-DefaultRecordWait - time.Second)
	e.handle(t, cloudEvent(t, old))
	server := advisory(61, jevent.KindTerminated, "Unacknowledged message was deleted", msg{})
	server.Message.SetMissing(jevent.MissingNotFound)
	e.handle(t, cloudEvent(t, server))
	if got := e.entry(t, old.ID); got.Tenant != jevent.DefaultTenant || !got.PayloadMissing {
		t.Errorf("old bare TERM entry = tenant %q payload missing %v", got.Tenant, got.PayloadMissing)
	}
	if got := e.entry(t, server.ID); got.ReasonCode != "unacked_deleted" {
		t.Errorf("server TERM entry reason %q, want unacked_deleted", got.ReasonCode)
	}
}

// chainEvent is a replay's death: a new message (new sequence) carrying the
// replay headers of the entry it replayed.
func chainEvent(seq uint64, parentEventID, code string, m msg) jevent.Event {
	if m.headers == nil {
		m.headers = map[string][]string{}
	}
	m.headers["X-Task-ID"] = []string{"task-7"}
	if parentEventID != "" {
		id, _ := store.EntryID(parentEventID)
		m.headers[jevent.HeaderReplayOf] = []string{id}
	}
	if m.payload == nil {
		m.payload = []byte("same task")
	}
	return explicit(seq, code, "", m)
}

func TestChains(t *testing.T) {
	e := setup(t)
	t.Run("fifth failure is poison", func(t *testing.T) {
		codes := []string{"timeout", "model_confusion", "timeout", "hallucination_loop", "timeout"}
		parent := ""
		for i, code := range codes {
			ev := chainEvent(uint64(100+i), parent, code, msg{})
			e.handle(t, cloudEvent(t, ev))
			got := e.entry(t, ev.ID)
			want := store.Scheduled
			if i == 4 {
				want = store.Escalated
			}
			if got.Status != want || got.RootID != "TASKS.100" {
				t.Errorf("failure %d (%s): status %s root %s, want %s root TASKS.100", i+1, code, got.Status, got.RootID, want)
			}
			if i == 4 && (got.Category != string(triage.Poison) || got.Rule != "poison-chain") {
				t.Errorf("fifth failure: category %s rule %s, want poison by poison-chain", got.Category, got.Rule)
			}
			parent = ev.ID
		}
	})
	t.Run("second context overflow is quarantined", func(t *testing.T) {
		first := chainEvent(200, "", "context_window_overflow", msg{})
		second := chainEvent(201, first.ID, "context_window_overflow", msg{})
		e.handle(t, cloudEvent(t, first))
		e.handle(t, cloudEvent(t, second))
		if got := e.entry(t, first.ID); got.Status != store.Scheduled {
			t.Errorf("first overflow = %s, want scheduled", got.Status)
		}
		if got := e.entry(t, second.ID); got.Status != store.Quarantined || got.ReplayOf != "TASKS.200" {
			t.Errorf("second overflow = %s (replay_of %q), want quarantined", got.Status, got.ReplayOf)
		}
	})
	t.Run("completed steps and a tool failure need manual review", func(t *testing.T) {
		ev := explicit(300, "network_transient", "tool github.create_pr failed after push", msg{payload: []byte("x")})
		ev.Failure.CompletedSteps = []string{"write-post", "push-branch"}
		e.handle(t, cloudEvent(t, ev))
		got := e.entry(t, ev.ID)
		if got.Status != store.AwaitingApproval || got.Action != string(triage.ManualReview) || got.Category != string(triage.UnknownCommitState) {
			t.Errorf("entry = %s/%s/%s, want awaiting_approval/manual_review/unknown_commit_state", got.Status, got.Action, got.Category)
		}
		if ok, _ := e.sched.Exists(testenv.Context(t), tasks.Name(got.ID, 1)); ok {
			t.Errorf("a replay was scheduled for an entry with uncertain side effects")
		}
	})
	t.Run("forged replay-of starts a new chain", func(t *testing.T) {
		ev := chainEvent(400, "TASKS.104", "timeout", msg{headers: map[string][]string{"X-Idempotency-Key": {"other-task-1"}}})
		e.handle(t, cloudEvent(t, ev))
		got := e.entry(t, ev.ID)
		if got.ReplayOf != "" || got.RootID != got.ID || got.Status != store.Scheduled {
			t.Errorf("entry = replay_of %q root %q status %s, want a new chain", got.ReplayOf, got.RootID, got.Status)
		}
	})
	// A header that is no entry id, and no document id Firestore accepts,
	// names no entry: the event is recorded, not retried until Pub/Sub
	// dead-letters it (Firestore refused the read for good).
	for i, ref := range []string{"a/b", "__x__", "x//y", strings.Repeat("z%", 800)} {
		t.Run(fmt.Sprintf("replay-of %.12q names no document", ref), func(t *testing.T) {
			ev := chainEvent(uint64(500+i), "", "timeout", msg{headers: map[string][]string{jevent.HeaderReplayOf: {ref}}})
			if err := e.h.Handle(testenv.Context(t), cloudEvent(t, ev)); err != nil {
				t.Fatalf("Handle(Jsdlq-Replay-Of %.20q) = %v, want the event recorded", ref, err)
			}
			if got := e.entry(t, ev.ID); got.ReplayOf != "" || got.RootID != got.ID {
				t.Errorf("entry = replay_of %q root %q, want a new chain", got.ReplayOf, got.RootID)
			}
		})
	}
}

func TestTenantBreaker(t *testing.T) {
	e := setup(t)
	tenant := map[string][]string{"X-Tenant-ID": {"globex"}}
	for i := 1; i <= 11; i++ {
		ev := explicit(uint64(i), "timeout", "", msg{payload: []byte("p"), headers: tenant})
		e.handle(t, cloudEvent(t, ev))
		got := e.entry(t, ev.ID)
		want := store.Scheduled
		if i >= 10 {
			want = store.Held
		}
		if got.Status != want {
			t.Errorf("failure %d: status %s, want %s", i, got.Status, want)
		}
		e.clock.Add(time.Second)
	}
	if got := len(e.emu.Tasks(t, e.queue)); got != 9 {
		t.Errorf("queue has %d tasks, want 9 (held entries get none)", got)
	}
	e.clock.Add(15 * time.Minute)
	probe := explicit(12, "timeout", "", msg{payload: []byte("p"), headers: tenant})
	e.handle(t, cloudEvent(t, probe))
	if got := e.entry(t, probe.ID); got.Status != store.Scheduled || !got.BreakerProbe {
		t.Errorf("after 15 minutes: status %s probe %v, want the scheduled half-open probe", got.Status, got.BreakerProbe)
	}
	next := explicit(13, "timeout", "", msg{payload: []byte("p"), headers: tenant})
	e.handle(t, cloudEvent(t, next))
	if got := e.entry(t, next.ID); got.Status != store.Held {
		t.Errorf("while the probe runs: status %s, want held", got.Status)
	}
	b, err := e.store.GetBreaker(testenv.Context(t), "globex")
	if err != nil || b.State != store.BreakerHalfOpen || b.ProbeEntry != "TASKS.12" {
		t.Errorf("breaker = %+v, %v, want half_open with probe TASKS.12", b, err)
	}
}

func TestLargePayloadRoundTrip(t *testing.T) {
	e := setup(t)
	payload := make([]byte, 1<<20)
	rand.Read(payload)
	ev := explicit(1, "timeout", "", msg{payload: payload})
	e.handle(t, cloudEvent(t, ev))
	got := e.entry(t, ev.ID)
	if !bytes.Equal(got.Payload, payload) || got.PayloadChunkCount != 2 || got.PayloadSHA256 != ev.Message.SHA256 {
		t.Errorf("payload: %d bytes in %d chunks, sha %s; want the 1 MiB byte for byte (sha %s)", len(got.Payload), got.PayloadChunkCount, got.PayloadSHA256, ev.Message.SHA256)
	}
	// A truncated event (too big for Pub/Sub) keeps size and digest.
	tr := explicit(2, "timeout", "", msg{payload: payload})
	tr.Message.Truncate()
	e.handle(t, cloudEvent(t, tr))
	got = e.entry(t, tr.ID)
	if !got.PayloadMissing || !got.PayloadTruncated || got.PayloadSize != 1<<20 || got.PayloadSHA256 != ev.Message.SHA256 {
		t.Errorf("truncated entry = missing %v truncated %v size %d sha %s", got.PayloadMissing, got.PayloadTruncated, got.PayloadSize, got.PayloadSHA256)
	}
}

func TestMalformedEventsAreAcknowledged(t *testing.T) {
	e := setup(t)
	good := explicit(1, "timeout", "", msg{payload: []byte("p")})
	body, _ := jevent.Encode(good)
	mutate := func(f func(m map[string]any)) []byte {
		var m map[string]any
		json.Unmarshal(body, &m)
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	noData := event.New()
	noData.SetID("no-data")
	noData.SetSource("s")
	noData.SetType("google.cloud.pubsub.topic.v1.messagePublished")
	notEnvelope := event.New()
	notEnvelope.SetID("not-envelope")
	notEnvelope.SetSource("s")
	notEnvelope.SetType("t")
	notEnvelope.SetData("application/json", []any{1, 2})
	noMessage := event.New()
	noMessage.SetID("no-message")
	noMessage.SetSource("s")
	noMessage.SetType("t")
	noMessage.SetData("application/json", map[string]any{"subscription": "x"})
	tests := []struct {
		name string
		ce   event.Event
	}{
		{"cloudevent without data", noData},
		{"data not an envelope", notEnvelope},
		{"envelope without message", noMessage},
		{"message without data", pubsubEvent(t, "m-empty", nil)},
		{"not JSON", pubsubEvent(t, "m-text", []byte("hello"))},
		{"unknown schema", pubsubEvent(t, "m-schema", mutate(func(m map[string]any) { m["schema"] = "jsdlq.event.v9" }))},
		{"id does not match stream", pubsubEvent(t, "m-id", mutate(func(m map[string]any) { m["id"] = "OTHER.1" }))},
		{"explicit without failure", pubsubEvent(t, "m-failure", mutate(func(m map[string]any) { delete(m, "failure") }))},
		{"payload digest forged", pubsubEvent(t, "m-sha", mutate(func(m map[string]any) {
			m["message"].(map[string]any)["sha256"] = strings.Repeat("0", 64)
		}))},
		{"unknown field", pubsubEvent(t, "m-field", mutate(func(m map[string]any) { m["extra"] = true }))},
	}
	for _, tc := range tests {
		before := len(e.logs.Lines("malformed"))
		if err := e.h.Handle(testenv.Context(t), tc.ce); err != nil {
			t.Errorf("%s: Handle() = %v, want nil (acknowledged)", tc.name, err)
		}
		lines := e.logs.Lines("malformed")
		if len(lines) != before+1 {
			t.Errorf("%s: %d malformed log lines, want exactly one", tc.name, len(lines)-before)
			continue
		}
		line := lines[len(lines)-1]
		if !strings.Contains(line, `"cloudevent_id":"`+tc.ce.ID()+`"`) || !strings.Contains(line, `"reason":`) || !strings.Contains(line, `"severity":"WARNING"`) {
			t.Errorf("%s: log line %s lacks id, reason or severity", tc.name, line)
		}
	}
	if n := e.entries(t); n != 0 {
		t.Errorf("malformed events left %d entries, want 0", n)
	}
}

// TestSchedulingRetryIsIdempotent: the transaction commits, then Cloud Tasks
// is unreachable. Classify returns an error so Pub/Sub redelivers. The
// redelivery finds the entry already created (nothing is counted twice),
// sees it still scheduled and creates the task under the name computed
// before the commit; a third delivery gets ALREADY_EXISTS, which is success.
// So however often the event arrives, there is one entry and one task.
func TestSchedulingRetryIsIdempotent(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	down := tasks.New(tasks.Config{Queue: e.queue, ReplayURL: "http://127.0.0.1:9/Replay", ServiceAccount: "sa@p", EmulatorHost: "127.0.0.1:1"})
	broken := New(Config{}, Deps{Logger: obs.NewLogger(e.logs), Store: e.store, Policy: e.policy, Scheduler: down, Now: e.clock.Now})
	ev := explicit(1, "timeout", "", msg{payload: []byte("p")})
	ce := cloudEvent(t, ev)
	short, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := broken.Handle(short, ce); err == nil {
		t.Fatalf("Handle() with Cloud Tasks down = nil, want an error so Pub/Sub retries")
	}
	got := e.entry(t, ev.ID)
	if got.Status != store.Scheduled || got.TaskName != tasks.Name(got.ID, 1) {
		t.Fatalf("entry after the failed schedule = %s %q", got.Status, got.TaskName)
	}
	if n := len(e.emu.Tasks(t, e.queue)); n != 0 {
		t.Fatalf("queue has %d tasks before the redelivery", n)
	}
	for i := 0; i < 2; i++ {
		e.handle(t, ce)
	}
	if names := e.emu.Tasks(t, e.queue); len(names) != 1 || !strings.HasSuffix(names[0], "/"+got.TaskName) {
		t.Errorf("queue tasks = %v, want exactly the precomputed %s", names, got.TaskName)
	}
	m, _ := e.store.ReadMetrics(ctx, store.Hour(e.clock.Now()))
	if m.Total != 1 {
		t.Errorf("metrics total = %d after redeliveries, want 1", m.Total)
	}
}

func TestFirestoreUnavailableIsRetried(t *testing.T) {
	e := setup(t)
	// The client prefers the emulator variable over any endpoint option.
	t.Setenv("FIRESTORE_EMULATOR_HOST", "127.0.0.1:1")
	fs, err := firestore.NewClient(context.Background(), "p",
		option.WithEndpoint("127.0.0.1:1"), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	h := New(Config{}, Deps{Logger: obs.Discard(), Store: store.New(fs), Policy: triage.NewLoader(nil, obs.Discard()), Scheduler: e.sched})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.Handle(ctx, cloudEvent(t, explicit(1, "timeout", "", msg{payload: []byte("p")}))); err == nil {
		t.Errorf("Handle() with Firestore down = nil, want an error so Pub/Sub retries")
	}
}

func mustEncode(t testing.TB, ev jevent.Event) []byte {
	t.Helper()
	b, err := jevent.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// firestoreFor is a client of the shared emulator for a given project.
func firestoreFor(t testing.TB, project string) *firestore.Client {
	t.Helper()
	c, err := firestore.NewClient(context.Background(), project)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A policy that lets a rule's keyless tasks replay (require_idempotency_key:
// false) schedules them like any other; the rest still wait.
func TestKeylessOverride(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	doc := testenv.WithRules(t, triage.DefaultYAML(), testenv.KeylessOKMarketing)
	if _, err := e.store.SavePolicyOverride(ctx, doc); err != nil {
		t.Fatalf("SaveOverride() = %v", err)
	}
	tests := []struct {
		name    string
		subject string
		status  store.Status
		rule    string
	}{
		{"rule lets keyless replay", "agents.marketing.tasks.content_creation", store.Scheduled, "keyless-ok-marketing"},
		{"other agent waits", "agents.backend.tasks.code_review", store.AwaitingApproval, "transient"},
	}
	for i, tt := range tests {
		ev := explicit(uint64(700+i), "llm_provider_timeout", "", msg{subject: tt.subject, payload: []byte("x"), keyless: true})
		ev.Tenant = fmt.Sprint("tenant-", i)
		e.handle(t, cloudEvent(t, ev))
		got := e.entry(t, ev.ID)
		if got.Status != tt.status || got.Rule != tt.rule || got.IdempotencyKey != "" {
			t.Errorf("%s: entry = %s by %s (key %q), want %s by %s without a key", tt.name, got.Status, got.Rule, got.IdempotencyKey, tt.status, tt.rule)
		}
		exists, err := e.sched.Exists(ctx, tasks.Name(got.ID, 1))
		if err != nil || exists != (tt.status == store.Scheduled) {
			t.Errorf("%s: replay task exists = %v, %v, want %v", tt.name, exists, err, tt.status == store.Scheduled)
		}
	}
}
