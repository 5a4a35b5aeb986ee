package operator_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/authority"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Actors of these tests: approvers, who may do everything (the authority
// rule is tested in authority_test.go).
var (
	alice   = authority.Actor{Name: "alice", Role: authority.Approver}
	mallory = authority.Actor{Name: "mallory", Role: authority.Approver}
	someone = authority.Actor{Name: "a", Role: authority.Approver}
)

type env struct {
	ctx   context.Context
	fs    *firestore.Client
	store *store.Store
	sched *tasks.Scheduler
	op    *operator.Operator
	queue string
	ct    *testenv.CloudTasks
	// target only counts the tasks delivered to it (the replay function is
	// tested in functions/replay).
	target *testenv.TaskTarget
}

// setup runs Firestore and Cloud Tasks emulators; tasks go to a target that
// only counts them (the replay function is tested in functions/replay).
func setup(t *testing.T) *env {
	t.Helper()
	e := &env{ctx: testenv.Context(t), target: testenv.NewTaskTarget(t)}
	fs, project := testenv.Firestore(t)
	e.fs, e.store = fs, store.New(fs)
	e.ct = testenv.NewCloudTasks(t)
	e.queue = e.ct.Queue(t, project, "dlq-replay")
	e.sched = tasks.New(tasks.Config{Queue: e.queue, ReplayURL: e.target.URL, ServiceAccount: "tasks@p.iam.gserviceaccount.com", EmulatorHost: e.ct.Host})
	t.Cleanup(func() { e.sched.Close() })
	e.op = operator.New(e.store, e.sched, operator.WithRunner(e.sched))
	return e
}

func (e *env) entry(t *testing.T, id, tenant string, st store.Status) *store.Entry {
	t.Helper()
	en := &store.Entry{ID: id, EventID: id, Stream: "TASKS", StreamSeq: 1, Subject: "agents.backend.tasks.implementation",
		Tenant: tenant, Agent: "backend", Payload: []byte(`{"n":1}`), Kind: "explicit", Status: st,
		Headers: map[string][]string{"X-Idempotency-Key": {id + "-v1"}}}
	if st == store.Scheduled {
		en.TaskName = tasks.Name(id, 1)
		en.NextRetryAt = time.Now().Add(time.Hour)
	}
	res, err := e.store.Record(e.ctx, en, "test")
	if err != nil {
		t.Fatalf("Record(%s) = %v", id, err)
	}
	return res.Entry
}

func (e *env) delivered(name string) int { return e.target.Deliveries()[name] }

// A caller scoped to tenant B cannot see or change tenant A's entries:
// every action answers ErrNotFound, as for an id that does not exist, and
// the entry is untouched. The same actions scoped to A (or to all tenants)
// work.
func TestTenantIsolation(t *testing.T) {
	e := setup(t)
	awaiting := e.entry(t, "TASKS.1", "tenant-a", store.AwaitingApproval)
	scheduled := e.entry(t, "TASKS.2", "tenant-a", store.Scheduled)
	if _, _, err := e.sched.Schedule(e.ctx, tasks.Request{EntryID: scheduled.ID, Attempt: 1, At: scheduled.NextRetryAt}); err != nil {
		t.Fatal(err)
	}
	discardable := e.entry(t, "TASKS.3", "tenant-a", store.Escalated)

	actions := []struct {
		name string
		id   string
		do   func(tenant, id string) error
	}{
		{"approve", awaiting.ID, func(tenant, id string) error {
			_, err := e.op.Approve(e.ctx, tenant, id, operator.Edits{Payload: []byte(`{"n":2}`), By: mallory})
			return err
		}},
		{"discard", discardable.ID, func(tenant, id string) error {
			_, err := e.op.Discard(e.ctx, tenant, id, "not mine", mallory)
			return err
		}},
		{"replay now", scheduled.ID, func(tenant, id string) error {
			_, err := e.op.ReplayNow(e.ctx, tenant, id, mallory)
			return err
		}},
	}
	for _, a := range actions {
		before, err := e.store.Get(e.ctx, a.id)
		if err != nil {
			t.Fatal(err)
		}
		errOther := a.do("tenant-b", a.id)
		errMissing := a.do("tenant-b", "TASKS.404")
		if !errors.Is(errOther, operator.ErrNotFound) {
			t.Errorf("%s of tenant-a's entry as tenant-b = %v, want ErrNotFound", a.name, errOther)
		}
		// Not even the message may tell the two apart (apart from the id).
		if errOther != nil && errMissing != nil &&
			strings.ReplaceAll(errOther.Error(), a.id, "ID") != strings.ReplaceAll(errMissing.Error(), "TASKS.404", "ID") {
			t.Errorf("%s: error for another tenant's entry %q differs from a missing one %q", a.name, errOther, errMissing)
		}
		after, err := e.store.Get(e.ctx, a.id)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(before, after, cmpopts.IgnoreUnexported(store.Entry{})); diff != "" {
			t.Errorf("%s as tenant-b changed the entry (-before +after):\n%s", a.name, diff)
		}
	}
	if n := e.delivered(tasks.Name(scheduled.ID, 1)); n != 0 {
		t.Errorf("tenant-b's replay now ran the task %d times, want 0", n)
	}

	// Scoped to tenant-a, or to all tenants, they work.
	if err := actions[0].do("tenant-a", awaiting.ID); err != nil {
		t.Errorf("approve as tenant-a = %v", err)
	}
	if err := actions[1].do(store.AllTenants, discardable.ID); err != nil {
		t.Errorf("discard as operator of all tenants = %v", err)
	}
	if err := actions[2].do("tenant-a", scheduled.ID); err != nil {
		t.Errorf("replay now as tenant-a = %v", err)
	}
	testenv.WaitUntil(t, 30*time.Second, "the approved task", func() bool { return e.delivered(tasks.Name(awaiting.ID, 1)) == 1 })
	// Due in an hour, but run now.
	testenv.WaitUntil(t, 30*time.Second, "the task run now", func() bool { return e.delivered(tasks.Name(scheduled.ID, 1)) == 1 })
	got, err := e.store.GetMeta(e.ctx, discardable.ID)
	if err != nil || got.Status != store.Discarded || got.ResolvedAt.IsZero() {
		t.Errorf("discarded entry = %+v, %v, want discarded and resolved", got, err)
	}
}

// Actions check the status in their transaction and refuse the rest.
func TestStatusChecked(t *testing.T) {
	e := setup(t)
	recovered := e.entry(t, "TASKS.10", "t", store.Scheduled)
	for _, c := range []store.Change{{From: []store.Status{store.Scheduled}, To: store.Replaying, By: "test"}, {From: []store.Status{store.Replaying}, To: store.Recovered, By: "test"}} {
		if _, err := e.store.Transition(e.ctx, recovered.ID, c); err != nil {
			t.Fatal(err)
		}
	}
	awaiting := e.entry(t, "TASKS.11", "t", store.AwaitingApproval)
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"approve recovered", errOf(e.op.Approve(e.ctx, "t", recovered.ID, operator.Edits{By: someone})), operator.ErrWrongStatus},
		{"discard recovered", errOf(e.op.Discard(e.ctx, "t", recovered.ID, "r", someone)), operator.ErrWrongStatus},
		{"replay now awaiting", errOf(e.op.ReplayNow(e.ctx, "t", awaiting.ID, someone)), operator.ErrWrongStatus},
		{"approve anonymous", errOf(e.op.Approve(e.ctx, "t", awaiting.ID, operator.Edits{})), operator.ErrNoActor},
		{"discard without reason", errOf(e.op.Discard(e.ctx, "t", awaiting.ID, " ", someone)), operator.ErrBadEdit},
		{"edit Nats header", errOf(e.op.Approve(e.ctx, "t", awaiting.ID, operator.Edits{By: someone, SetHeaders: map[string]string{"Nats-Msg-Id": "x"}})), operator.ErrBadEdit},
		// The gates checked the stored tenant and key: the replay may not
		// carry others to the agent.
		{"edit the tenant header", errOf(e.op.Approve(e.ctx, "t", awaiting.ID, operator.Edits{By: someone, SetHeaders: map[string]string{"x-tenant-id": "other"}})), operator.ErrBadEdit},
		{"edit the idempotency key", errOf(e.op.Approve(e.ctx, "t", awaiting.ID, operator.Edits{By: someone, SetHeaders: map[string]string{"X-Idempotency-Key": "fresh"}})), operator.ErrBadEdit},
		{"edit the task id", errOf(e.op.Approve(e.ctx, "t", awaiting.ID, operator.Edits{By: someone, SetHeaders: map[string]string{"X-Task-ID": "t2"}})), operator.ErrBadEdit},
		{"edit the task version", errOf(e.op.Approve(e.ctx, "t", awaiting.ID, operator.Edits{By: someone, SetHeaders: map[string]string{"X-Task-Version": "9"}})), operator.ErrBadEdit},
		{"edit Jsdlq header", errOf(e.op.Approve(e.ctx, "t", awaiting.ID, operator.Edits{By: someone, SetHeaders: map[string]string{"jsdlq-strategy": "x"}})), operator.ErrBadEdit},
		{"header with newline", errOf(e.op.Approve(e.ctx, "t", awaiting.ID, operator.Edits{By: someone, SetHeaders: map[string]string{"X-A": "1\r\nX-B: 2"}})), operator.ErrBadEdit},
		{"header name with space", errOf(e.op.Approve(e.ctx, "t", awaiting.ID, operator.Edits{By: someone, SetHeaders: map[string]string{"X A": "1"}})), operator.ErrBadEdit},
		{"oversized payload", errOf(e.op.Approve(e.ctx, "t", awaiting.ID, operator.Edits{By: someone, Payload: make([]byte, store.MaxPayload+1)})), store.ErrTooLarge},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.err, c.want)
		}
	}
	got, err := e.store.GetMeta(e.ctx, awaiting.ID)
	if err != nil || got.Status != store.AwaitingApproval || len(got.History) != 1 {
		t.Errorf("refused edits changed the entry: %+v, %v", got, err)
	}
}

// A large edited payload goes into chunks and reads back whole, as a new
// version beside the original, which is kept byte for byte; the header
// edit is the version's, beside the stored headers (the task's identity
// among them, which no edit may change), which stay as they were; history
// records both.
func TestApproveLargePayloadAndHeaders(t *testing.T) {
	e := setup(t)
	en := e.entry(t, "TASKS.20", "t", store.Quarantined)
	big := []byte(`{"text":"` + strings.Repeat("0123456789abcdef", (store.InlinePayload/16)+100) + `"}`)
	if _, err := e.op.Approve(e.ctx, "t", en.ID, operator.Edits{Payload: big, By: alice,
		SetHeaders: map[string]string{"x-reviewed-by": "alice"}}); err != nil {
		t.Fatalf("Approve() = %v", err)
	}
	got, err := e.store.Get(e.ctx, en.ID)
	if err != nil {
		t.Fatalf("Get() = %v", err)
	}
	if string(got.Payload) != string(en.Payload) || got.PayloadSHA256 != store.PayloadSum(en.Payload) {
		t.Errorf("original payload = %q (sha256 %s), want %q kept", got.Payload, got.PayloadSHA256, en.Payload)
	}
	v, err := got.ReplayVersion()
	if err != nil || v.N != 2 || v.Chunks == 0 || v.By != "alice" {
		t.Fatalf("replay version = %+v, %v, want version 2 by alice in chunks", v, err)
	}
	if b, err := e.store.VersionPayload(e.ctx, got, 2); err != nil || string(b) != string(big) {
		t.Errorf("version 2 = %d bytes, %v, want the %d bytes approved", len(b), err, len(big))
	}
	if diff := cmp.Diff(map[string][]string{"X-Idempotency-Key": {"TASKS.20-v1"}}, got.Headers); diff != "" {
		t.Errorf("stored headers changed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string][]string{"X-Idempotency-Key": {"TASKS.20-v1"}, "x-reviewed-by": {"alice"}}, got.HeadersOf(v)); diff != "" {
		t.Errorf("headers of the replay (-want +got):\n%s", diff)
	}
	note := got.History[len(got.History)-1].Note
	for _, want := range []string{"approved by alice", "payload v2 by alice (approver) from v1", "x-reviewed-by", store.PayloadSum(en.Payload), store.PayloadSum(big)} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q lacks %q", note, want)
		}
	}
	if got.Status != store.Scheduled || got.TaskName != tasks.Name(en.ID, 1) {
		t.Errorf("entry %s task %s, want scheduled with %s", got.Status, got.TaskName, tasks.Name(en.ID, 1))
	}
}

func errOf(_ *store.Entry, err error) error { return err }

// ReplayNow on a scheduled entry whose task is lost recreates it; when the
// task's name is spent (it ran, and Cloud Tasks reserves the name), the
// entry moves on to the next attempt instead of trusting ALREADY_EXISTS.
func TestReplayNowLostAndSpentTasks(t *testing.T) {
	e := setup(t)
	lost := e.entry(t, "TASKS.30", "t", store.Scheduled) // its task was never created
	if _, err := e.op.ReplayNow(e.ctx, "t", lost.ID, alice); err != nil {
		t.Fatalf("ReplayNow(lost) = %v", err)
	}
	testenv.WaitUntil(t, 30*time.Second, "the recreated task", func() bool { return e.delivered(tasks.Name(lost.ID, 1)) == 1 })

	spent := e.entry(t, "TASKS.31", "t", store.Scheduled)
	first := tasks.Name(spent.ID, 1)
	if _, _, err := e.sched.Schedule(e.ctx, tasks.Request{EntryID: spent.ID, Attempt: 1, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// The target answers 200 without touching the entry: the task is done,
	// its name reserved, the entry still scheduled.
	testenv.WaitUntil(t, 30*time.Second, "the first task", func() bool { return e.delivered(first) == 1 })
	testenv.WaitUntil(t, 30*time.Second, "the first task to be gone", func() bool {
		ok, err := e.sched.Exists(e.ctx, first)
		return err == nil && !ok
	})
	got, err := e.op.ReplayNow(e.ctx, "t", spent.ID, alice)
	if err != nil {
		t.Fatalf("ReplayNow(spent) = %v", err)
	}
	if want := tasks.Name(spent.ID, 2); got.TaskName != want {
		t.Errorf("task after ReplayNow = %s, want %s", got.TaskName, want)
	}
	testenv.WaitUntil(t, 30*time.Second, "the second attempt", func() bool { return e.delivered(tasks.Name(spent.ID, 2)) == 1 })
}

// Discarding the half-open probe reopens the breaker: otherwise it would
// wait forever for a probe that never runs.
func TestDiscardReleasesProbe(t *testing.T) {
	e := setup(t)
	now := e.store.Now()
	if _, err := e.fs.Collection(store.Breakers).Doc("t").Set(e.ctx,
		store.Breaker{Tenant: "t", State: store.BreakerHalfOpen, OpenedAt: now, HalfOpenAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	probe := e.entry(t, "TASKS.40", "t", store.Scheduled)
	if !probe.BreakerProbe {
		t.Fatalf("entry recorded under a half-open breaker is not the probe")
	}
	if _, err := e.op.Discard(e.ctx, "t", probe.ID, "obsolete", alice); err != nil {
		t.Fatalf("Discard() = %v", err)
	}
	b, err := e.store.GetBreaker(e.ctx, "t")
	if err != nil || b.State != store.BreakerOpen || b.ProbeEntry != "" {
		t.Errorf("breaker = %+v, %v, want open without a probe", b, err)
	}
}

// A triage agent's answer applies to the decision its task asked about: an
// answer to an escalation finds the entry quarantined since (a later, other
// decision) and changes nothing, however it reached the operator (a
// redelivered task, a late answer); an answer to the current decision acts.
func TestTriageAnswerBoundToItsDecision(t *testing.T) {
	e := setup(t)
	moved := e.entry(t, "TASKS.30", "t", store.Quarantined)
	current := e.entry(t, "TASKS.31", "t", store.Escalated)
	ans := e.op.TriageAnswerer()
	task := func(id string) jevent.TriageTask {
		return jevent.TriageTask{EntryID: id, Tenant: "t", Status: string(store.Escalated)}
	}
	for _, a := range []agentkit.TriageAnswer{
		{Answer: jevent.AnswerApprove},
		{Answer: jevent.AnswerDiscard, Reason: "no longer needed"},
	} {
		if _, err := ans.AnswerTriage(e.ctx, task(moved.ID), a, "agent:ceo"); !errors.Is(err, agentkit.ErrTriageDecided) {
			t.Errorf("AnswerTriage(%s to an escalation, entry quarantined) = %v, want ErrTriageDecided", a.Answer, err)
		}
	}
	if got, err := e.store.GetMeta(e.ctx, moved.ID); err != nil || got.Status != store.Quarantined || len(got.History) != 1 {
		t.Errorf("answers to an older decision changed the entry: %+v, %v", got, err)
	}
	status, err := ans.AnswerTriage(e.ctx, task(current.ID), agentkit.TriageAnswer{Answer: jevent.AnswerDiscard, Reason: "done by hand"}, "agent:ceo")
	if err != nil || status != string(store.Discarded) {
		t.Errorf("AnswerTriage(discard of the asked decision) = %q, %v, want %q", status, err, store.Discarded)
	}

	// The same status again is another decision: escalated, approved by a
	// human, escalated again (its replay refused); a late answer to the
	// first escalation does not decide the second.
	again := e.entry(t, "TASKS.32", "t", store.Escalated)
	first := task(again.ID)
	first.At = again.History[0].At
	if _, err := e.op.Approve(e.ctx, "t", again.ID, operator.Edits{By: alice}); err != nil {
		t.Fatal(err)
	}
	second := e.refuse(t, again.ID)
	for _, a := range []agentkit.TriageAnswer{
		{Answer: jevent.AnswerReplay},
		{Answer: jevent.AnswerDiscard, Reason: "stale"},
	} {
		if _, err := ans.AnswerTriage(e.ctx, first, a, "agent:ceo"); !errors.Is(err, agentkit.ErrTriageDecided) {
			t.Errorf("AnswerTriage(%s to the first escalation, entry escalated again) = %v, want ErrTriageDecided", a.Answer, err)
		}
	}
	// Recorded, approved, claimed by the replay, refused: four moves.
	if got, err := e.store.GetMeta(e.ctx, again.ID); err != nil || got.Status != store.Escalated || len(got.History) != 4 {
		t.Errorf("answers to the first escalation changed the second: %+v, %v", got, err)
	}
	current2 := task(again.ID)
	current2.At = second.History[len(second.History)-1].At
	if status, err := ans.AnswerTriage(e.ctx, current2, agentkit.TriageAnswer{Answer: jevent.AnswerReplay}, "agent:ceo"); err != nil || status != string(store.Scheduled) {
		t.Errorf("AnswerTriage(replay of the second escalation) = %q, %v, want %q", status, err, store.Scheduled)
	}
}
