package coretest

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/emulator/cloudtasks"
	"github.com/jsdlq/jsdlq/functions/replay"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/authority"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// Operators of these tests (the authority rule is shared/authority's).
var (
	alice = authority.Actor{Name: "alice", Role: authority.Approver}
	bob   = authority.Actor{Name: "bob", Role: authority.Operator}
)

// gates is the pipeline as the paths that can publish a replay meet it: the
// replay function behind a Cloud Tasks emulator that dispatches for real,
// the operator package over the same store, a store whose clock the test
// moves (the breaker's cooldown) and an embedded JetStream work stream.
type gates struct {
	st    *store.Store
	clock *skewClock
	sched *tasks.Scheduler
	op    *operator.Operator
	ct    *testenv.CloudTasks
	queue string
	js    jetstream.JetStream
	kit   *agentkit.Kit
	// env points dlqctl at the test's emulators and queue.
	env []string
	dir string // the test's temporary directory
	// opener records one failure with a threshold of 1: the tenant's
	// breaker opens.
	opener *store.Store
}

var breakerConfig = store.BreakerConfig{Threshold: 1_000_000, Window: time.Hour, Cooldown: 15 * time.Minute}

func newGates(t *testing.T) *gates {
	t.Helper()
	ctx := testenv.Context(t)
	fs, project := testenv.Firestore(t)
	log, _ := testenv.Logger()
	c := &skewClock{}
	g := &gates{clock: c, dir: t.TempDir()}
	g.st = store.New(fs, store.WithClock(c.Now), store.WithBreaker(breakerConfig))
	open := breakerConfig
	open.Threshold = 1
	g.opener = store.New(fs, store.WithClock(c.Now), store.WithBreaker(open))

	n := testenv.NewNATS(t)
	_, g.js = n.Connect(t)
	if _, err := g.js.CreateStream(ctx, jetstream.StreamConfig{Name: jevent.DefaultWorkStream, Subjects: []string{"agents.>"},
		Duplicates: time.Hour}); err != nil {
		t.Fatalf("create work stream: %v", err)
	}
	g.kit = agentkit.New(g.js, agentkit.WithFirestore(fs))
	h := replay.New(replay.Config{}, replay.Deps{Logger: log, Store: g.st, Policy: triage.NewLoader(store.New(fs), log), Publisher: g.js})
	target := httptest.NewServer(h)
	t.Cleanup(target.Close)
	g.ct = testenv.NewCloudTasks(t, cloudtasks.WithClock(c))
	g.queue = g.ct.Queue(t, project, "dlq-replay")
	g.sched = tasks.New(tasks.Config{Queue: g.queue, ReplayURL: target.URL, ServiceAccount: "tasks@test.iam.gserviceaccount.com", EmulatorHost: g.ct.Host})
	t.Cleanup(func() { g.sched.Close() })
	g.op = operator.New(g.st, g.sched, operator.WithRunner(g.ct.Client))
	g.env = append(os.Environ(), "GOOGLE_CLOUD_PROJECT="+project, "FIRESTORE_EMULATOR_HOST="+testenv.FirestoreHost(t),
		"CLOUD_TASKS_EMULATOR_HOST="+g.ct.Host, "TASKS_QUEUE="+g.queue, "REPLAY_URL="+target.URL,
		"TASKS_SERVICE_ACCOUNT=tasks@test.iam.gserviceaccount.com", "DLQCTL_ACTOR=alice")
	return g
}

// skewClock is the wall clock moved forward by the cooldowns the test
// skipped. Store and Cloud Tasks emulator share it, so a replay due "now"
// after a skipped cooldown is due now for the emulator too.
type skewClock struct {
	mu   sync.Mutex
	skew time.Duration
}

func (c *skewClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().UTC().Add(c.skew)
}

func (c *skewClock) Add(d time.Duration) { c.mu.Lock(); c.skew += d; c.mu.Unlock() }

func (c *skewClock) NewTimer(d time.Duration) cloudtasks.Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

// policy is what the current policy says of the seeded entry's failure.
type policy string

const (
	allow policy = "network_transient" // transient: auto_replay
	deny  policy = "approval_required" // governance: require_approval
)

// breaker is the tenant's breaker when the path runs.
type breaker int

const (
	closed breaker = iota
	open
	halfOpen         // cooled down: the next replay is the probe
	halfOpenInFlight // another entry is the probe
)

func (b breaker) String() string {
	return [...]string{"closed", "open", "half-open", "half-open, probe in flight"}[b]
}

// cell is one gate state.
type cell struct {
	policy      policy
	breaker     breaker
	completed   bool // the task's idempotency record says done
	otherTenant bool // the actor's scope is another tenant
}

func (c cell) String() string {
	s := fmt.Sprintf("policy %s, breaker %s", map[policy]string{allow: "allows", deny: "denies"}[c.policy], c.breaker)
	if c.completed {
		s += ", already completed"
	}
	if c.otherTenant {
		s += ", other tenant's scope"
	}
	return s
}

// seed records entry id of tenant in status st with c's failure, then puts
// the tenant's breaker in c's state.
func (g *gates) seed(t *testing.T, tenant, agent, id string, st store.Status, c cell) *store.Entry {
	t.Helper()
	ctx := testenv.Context(t)
	key := "key-" + id
	h := map[string][]string{jevent.HeaderTenant: {tenant}, jevent.HeaderTaskID: {id}, jevent.HeaderIdempotencyKey: {key}}
	e := &store.Entry{ID: id, EventID: jevent.DefaultWorkStream + "." + id, Stream: jevent.DefaultWorkStream, StreamSeq: 1,
		Subject: "agents." + agent + ".tasks.work", Tenant: tenant, Agent: agent, TaskID: id, TaskType: "work", IdempotencyKey: key,
		Headers: jevent.EncodeHeaders(h), Payload: []byte(`{"task":"` + id + `"}`), Kind: string(jevent.KindExplicit),
		Failure: &jevent.Failure{Code: string(c.policy), Attempt: 3, Agent: agent}, Status: st, Strategy: "transient"}
	if st == store.Scheduled {
		e.TaskName, e.NextRetryAt = tasks.Name(id, 1), g.clock.Now().Add(time.Hour)
	}
	if _, err := g.st.Record(ctx, e, "classify"); err != nil {
		t.Fatalf("Record(%s) = %v", id, err)
	}
	if c.completed {
		if _, err := g.kit.Once(ctx, e.Task(), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("Once(%s) = %v", key, err)
		}
	}
	if c.breaker != closed {
		filler := &store.Entry{ID: id + "-filler", EventID: "F." + id, Stream: "F", StreamSeq: 1, Subject: "agents.x.tasks.y", Tenant: tenant,
			Kind: "explicit", Status: store.Escalated}
		if _, err := g.opener.Record(ctx, filler, "classify"); err != nil {
			t.Fatal(err)
		}
		if b, _ := g.st.GetBreaker(ctx, tenant); b.State != store.BreakerOpen {
			t.Fatalf("breaker of %s = %s, want open", tenant, b.State)
		}
	}
	if c.breaker == halfOpen || c.breaker == halfOpenInFlight {
		g.clock.Add(breakerConfig.Cooldown)
		if _, err := g.st.BreakerAdvance(ctx, tenant, "test"); err != nil {
			t.Fatal(err)
		}
	}
	if c.breaker == halfOpenInFlight {
		if ok, probe, err := g.st.BreakerAdmit(ctx, tenant, "another-entry", "test"); !ok || !probe || err != nil {
			t.Fatalf("BreakerAdmit(another) = %v, %v, %v", ok, probe, err)
		}
	}
	return e
}

// published waits until the queue has no task left (each ran and was
// answered) and counts the replays of agent's tasks on the work stream.
func (g *gates) published(t *testing.T, agent string) uint64 {
	t.Helper()
	ctx := testenv.Context(t)
	g.ct.WaitDrained(t, g.queue)
	s, err := g.js.Stream(ctx, jevent.DefaultWorkStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("agents."+agent+".tasks.>"))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// path is one way a replay can be asked for. It returns an error when the
// path refuses (nothing may be published then).
type path struct {
	name   string
	status store.Status // the entry's status before the path runs
	run    func(g *gates, scope string, e *store.Entry) error
	// unscoped: the path reports another tenant's entry as nothing to do,
	// not as ErrNotFound (a bulk filter simply matches nothing).
	unscoped bool
}

var paths = []path{
	{name: "scheduled task", status: store.Scheduled, run: func(g *gates, _ string, e *store.Entry) error {
		_, _, err := g.sched.Schedule(context.Background(), tasks.Request{EntryID: e.ID, Attempt: 1, At: g.clock.Now()})
		return err
	}},
	{name: "replay now", status: store.Held, run: func(g *gates, scope string, e *store.Entry) error {
		_, err := g.op.ReplayNow(context.Background(), scope, e.ID, alice)
		return err
	}},
	{name: "approve", status: store.AwaitingApproval, run: func(g *gates, scope string, e *store.Entry) error {
		_, err := g.op.Approve(context.Background(), scope, e.ID, operator.Edits{By: alice})
		return err
	}},
	{name: "reconcile repair", status: store.Held, run: func(g *gates, _ string, _ *store.Entry) error {
		// Reconcile releases held entries whose breaker admits them again.
		h := reconciler.New(reconciler.Config{TimeBudget: time.Minute}, reconciler.Deps{Store: g.st, Tasks: g.sched, Now: g.clock.Now})
		_, err := h.Run(context.Background(), false)
		return err
	}},
	{name: "bulk redrive (dlqctl)", status: store.AwaitingApproval, unscoped: true, run: func(g *gates, scope string, e *store.Entry) error {
		// The opt-in of the entries kept for approvers (dlqctl acts as an
		// approver): the gates, not the filter, are under test. The agent
		// filter leaves out the entry that opened the breaker.
		bin, err := testenv.BuildOnce("./cmd/dlqctl")
		if err != nil {
			return err
		}
		cmd := exec.Command(bin, "redrive", "--filter", "tenant="+e.Tenant+",agent="+e.Agent, "--rate", "50/s", "--yes",
			"--include-approver-rules",
			"--checkpoint", filepath.Join(g.dir, "redrive-"+e.ID+".json"))
		cmd.Env = append(g.env, "DLQCTL_TENANT="+scope)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("dlqctl redrive: %v\n%s", err, out)
		}
		return nil
	}},
	{name: "breaker probe now", status: store.Held, run: func(g *gates, scope string, e *store.Entry) error {
		_, err := g.op.ProbeNow(context.Background(), scope, e.ID, alice, "provider recovered")
		return err
	}},
}

// Every path that can publish a replay, against every gate state: the
// replays on the work stream are counted for each cell, and none is
// published where a gate says no. An approval answers the policy and
// nothing else; an open breaker holds whoever asked, and the explicit probe
// is the one way past it.
func TestEveryPathAsksEveryGate(t *testing.T) {
	g := newGates(t)
	cells := []cell{
		{policy: allow},
		{policy: deny},
		{policy: allow, breaker: open},
		{policy: deny, breaker: open},
		{policy: allow, breaker: halfOpen},
		{policy: allow, breaker: halfOpenInFlight},
		{policy: allow, completed: true},
		{policy: allow, otherTenant: true},
	}
	// want[path][cell]: replays published; -1: the path does not apply.
	want := map[string][]int{
		//                     allow deny open deny+open half half+inflight done other
		"scheduled task":        {1, 0, 0, 0, 1, 0, 0, -1},
		"replay now":            {1, 0, 0, 0, 1, 0, 0, 0},
		"approve":               {1, 1, 0, 0, 1, 0, 0, 0},
		"reconcile repair":      {1, 0, 0, 0, 1, 0, 0, -1},
		"bulk redrive (dlqctl)": {1, 1, 0, 0, 1, 0, 0, 0},
		"breaker probe now":     {0, 0, 1, 0, 1, 1, 0, 0},
	}
	n := 0
	for _, p := range paths {
		for i, c := range cells {
			w := want[p.name][i]
			if w < 0 {
				continue
			}
			n++
			tenant, agent, id := fmt.Sprintf("tenant-%d", n), fmt.Sprintf("a%d", n), fmt.Sprintf("gate-%d", n)
			t.Run(p.name+"/"+c.String(), func(t *testing.T) {
				e := g.seed(t, tenant, agent, id, p.status, c)
				scope := tenant
				if c.otherTenant {
					scope = "someone-else"
				}
				err := p.run(g, scope, e)
				got := g.published(t, agent)
				if got != uint64(w) {
					t.Errorf("replays published = %d, want %d (path error: %v)", got, w, err)
				}
				if c.otherTenant && !p.unscoped && !errors.Is(err, store.ErrNotFound) {
					t.Errorf("path error for another tenant's entry = %v, want ErrNotFound", err)
				}
			})
		}
	}
}

// An approval answers the policy for the replay it schedules, however long
// the breaker holds it: held while the tenant's breaker is open, released
// once an operator closes the breaker (with a reason, recorded), the replay
// is published without asking the human again; the breaker's history says
// who closed it and why.
func TestApprovalOutlastsTheBreaker(t *testing.T) {
	g := newGates(t)
	ctx := testenv.Context(t)
	e := g.seed(t, "tenant-a", "approver", "approved-1", store.AwaitingApproval, cell{policy: deny, breaker: open})
	if _, err := g.op.Approve(ctx, "tenant-a", e.ID, operator.Edits{By: alice}); err != nil {
		t.Fatalf("Approve() = %v", err)
	}
	if n := g.published(t, "approver"); n != 0 {
		t.Fatalf("replays published with the breaker open = %d, want 0", n)
	}
	if got, _ := g.st.GetMeta(ctx, e.ID); got.Status != store.Held {
		t.Fatalf("approved entry with the breaker open = %s, want held", got.Status)
	}
	if _, err := g.op.Approve(ctx, "tenant-a", e.ID, operator.Edits{By: alice}); !errors.Is(err, store.ErrWrongStatus) {
		t.Errorf("Approve(held) = %v, want ErrWrongStatus: a held entry waits for its breaker", err)
	}
	b, err := g.op.CloseBreaker(ctx, "tenant-a", bob, "provider incident over")
	if err != nil {
		t.Fatalf("CloseBreaker() = %v", err)
	}
	if last := b.History[len(b.History)-1]; last.By != "bob" || last.To != store.BreakerClosed {
		t.Errorf("breaker history = %+v, want closed by bob", last)
	}
	if _, err := g.op.ReplayNow(ctx, "tenant-a", e.ID, bob); err != nil {
		t.Fatalf("ReplayNow() = %v", err)
	}
	if n := g.published(t, "approver"); n != 1 {
		t.Errorf("replays published after the breaker closed = %d, want 1 (the approval still answers the policy)", n)
	}
}
