// Package coretest holds the tests that drive several deployables through
// the domain core together: classify, replay and dlqctl must decide alike,
// and what agentkit says must reach the decision through the real bridge.
package coretest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/emulator/cloudtasks"
	"github.com/jsdlq/jsdlq/functions/classify"
	"github.com/jsdlq/jsdlq/functions/replay"
	"github.com/jsdlq/jsdlq/internal/testenv"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/triage"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// core is classify and replay on one Firestore project, a Cloud Tasks
// emulator whose clock stands still (scheduled replays wait in the queue;
// the test runs replay itself) and an embedded JetStream with the work
// stream.
type core struct {
	project  string
	st       *store.Store
	classify *classify.Handler
	replay   *replay.Handler
	nats     *testenv.NATS
	js       jetstream.JetStream
	ct       *testenv.CloudTasks
	queue    string
	logs     *testenv.LogBuffer // what classify and replay logged
}

func newCore(t *testing.T) *core {
	t.Helper()
	ctx := testenv.Context(t)
	fs, project := testenv.Firestore(t)
	log, logs := testenv.Logger()
	ct := testenv.NewCloudTasks(t, cloudtasks.WithClock(cloudtasks.NewFakeClock(time.Now())))
	queue := ct.Queue(t, project, "dlq-replay")
	sched := tasks.New(tasks.Config{Queue: queue, ReplayURL: "http://127.0.0.1:9/Replay",
		ServiceAccount: "tasks@test.iam.gserviceaccount.com", EmulatorHost: ct.Host})
	t.Cleanup(func() { sched.Close() })
	n := testenv.NewNATS(t)
	_, js := n.Connect(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: jevent.DefaultWorkStream, Subjects: []string{"agents.>"},
		Retention: jetstream.WorkQueuePolicy, Duplicates: time.Hour}); err != nil {
		t.Fatalf("create work stream: %v", err)
	}
	st := store.New(fs)
	pol := triage.NewLoader(store.New(fs), log)
	return &core{
		project:  project,
		st:       st,
		classify: classify.New(classify.Config{}, classify.Deps{Logger: log, Store: st, Policy: pol, Scheduler: sched}),
		replay:   replay.New(replay.Config{}, replay.Deps{Logger: log, Store: st, Policy: pol, Publisher: js}),
		nats:     n,
		js:       js,
		ct:       ct,
		queue:    queue,
		logs:     logs,
	}
}

// deliver hands ev to classify as the Pub/Sub push subscription does and
// returns the entry classify wrote.
func (c *core) deliver(t *testing.T, ev jevent.Event) *store.Entry {
	t.Helper()
	en, err := c.classifyEvent(testenv.Context(t), ev)
	if err != nil {
		t.Fatal(err)
	}
	return en
}

func (c *core) classifyEvent(ctx context.Context, ev jevent.Event) (*store.Entry, error) {
	body, err := jevent.Encode(ev)
	if err != nil {
		return nil, fmt.Errorf("Encode(%s) = %w", ev.ID, err)
	}
	ce, err := testenv.PubSubEvent("msg-"+ev.ID, body, ev.Attributes())
	if err != nil {
		return nil, err
	}
	if err := c.classify.Handle(ctx, ce); err != nil {
		return nil, fmt.Errorf("classify Handle(%s) = %w", ev.ID, err)
	}
	id, _ := store.EntryID(ev.ID)
	en, err := c.st.GetMeta(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("GetMeta(%s) = %w", id, err)
	}
	return en, nil
}

// reevaluate makes replay judge the entry again, as it does when its task
// arrives: an entry classify did not schedule is put back to scheduled
// first (not as an approval, which would skip the policy).
func (c *core) reevaluate(t *testing.T, en *store.Entry) replay.Result {
	t.Helper()
	ctx := testenv.Context(t)
	task := en.TaskName
	if en.Status != store.Scheduled {
		task = "reevaluate-" + strings.ReplaceAll(en.ID, ".", "_")
		if _, err := c.st.Transition(ctx, en.ID, store.Change{From: []store.Status{en.Status}, To: store.Scheduled,
			By: "coretest", Note: "re-evaluate", Apply: func(e *store.Entry) error { e.TaskName = task; return nil }}); err != nil {
			t.Fatalf("Transition(%s, scheduled) = %v", en.ID, err)
		}
	}
	res, err := c.replay.Replay(ctx, en.ID, en.Replays+1, task)
	if err != nil {
		t.Fatalf("Replay(%s) = %v", en.ID, err)
	}
	if res.Decision == nil {
		t.Fatalf("Replay(%s) = %+v: the policy was not asked", en.ID, res)
	}
	return res
}

// dlqctl builds the operator CLI once per test binary.
func dlqctl(t *testing.T) string {
	t.Helper()
	return testenv.Binary(t, "./cmd/dlqctl")
}

type verdict struct {
	Category string `json:"category"`
	Action   string `json:"action"`
	Strategy string `json:"strategy"`
}

// policyTest runs `dlqctl policy test current --entry ID --json` against
// the test's Firestore project.
func (c *core) policyTest(t *testing.T, id string) verdict {
	t.Helper()
	cmd := exec.Command(dlqctl(t), "policy", "test", "current", "--entry", id, "--json")
	cmd.Env = append(os.Environ(), "GOOGLE_CLOUD_PROJECT="+c.project, "FIRESTORE_EMULATOR_HOST="+testenv.FirestoreHost(t),
		"DLQCTL_TENANT=", "DLQCTL_ACTOR=coretest")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("dlqctl policy test --entry %s: %v\n%s", id, err, stderr)
	}
	var v verdict
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("dlqctl policy test --entry %s output %q: %v", id, out, err)
	}
	return v
}

type failure struct {
	code      string
	retryable *bool
	tool      bool
	steps     []string
}

// dead is one dead message of the agreement table.
type dead struct {
	kind    jevent.Kind
	reason  string   // the advisory's TERM reason
	failure *failure // the agentkit record
}

func (c *core) event(tenant, task string, seq uint64, d dead, replayOf string) jevent.Event {
	subject := "agents.backend.tasks.code_review"
	h := map[string][]string{jevent.HeaderTenant: {tenant}, jevent.HeaderTaskID: {task}, "X-Token-Budget": {"4000"}}
	if replayOf != "" {
		h[jevent.HeaderReplayOf] = []string{replayOf}
	}
	c2 := jevent.DefaultConventions
	ev := jevent.Event{Schema: jevent.Schema, ID: jevent.ID(jevent.DefaultWorkStream, seq), Kind: d.kind,
		Stream: jevent.DefaultWorkStream, StreamSeq: seq, Consumer: "backend", Tenant: c2.Tenant(h), Agent: c2.Agent(subject, h),
		ObservedAt: time.Now().UTC()}
	ev.Message.Subject = subject
	ev.Message.Headers = jevent.EncodeHeaders(h)
	ev.Message.SetPayload([]byte(`{"task":"` + task + `"}`))
	if d.kind != jevent.KindExplicit {
		typ := jevent.AdvisoryTerminated
		if d.kind == jevent.KindMaxDeliver {
			typ = jevent.AdvisoryMaxDeliver
		}
		ev.Advisory = &jevent.Advisory{Type: typ, ID: fmt.Sprint("adv-", seq), Timestamp: time.Now().UTC(),
			Stream: ev.Stream, Consumer: "backend", StreamSeq: seq, Deliveries: 3, Reason: d.reason}
	}
	if f := d.failure; f != nil {
		ev.Failure = &jevent.Failure{Code: f.code, Detail: "detail of " + f.code, Attempt: 3, Agent: "backend",
			CompletedSteps: f.steps, Retryable: f.retryable, ToolFailure: f.tool, RecordedAt: time.Now().UTC()}
	}
	return ev
}

// Every reason code of the failure taxonomy, the chain rules (a fifth failure
// is poison, a second context overflow is quarantined), completed steps with a
// tool failure and the agent's Retryable mark go through classify's decision,
// replay's re-evaluation and `dlqctl policy test --entry`; all three give the
// same category, action and strategy, and that answer is the default policy's
// (docs/policy.md, "The default policy").
func TestClassifyReplayAndPolicyTestAgree(t *testing.T) {
	c := newCore(t)
	yes, no := true, false
	explicit := func(code string) dead { return dead{kind: jevent.KindExplicit, failure: &failure{code: code}} }
	tests := []struct {
		name  string
		chain []dead // earlier failures of the same task, root first
		dead  dead
		want  verdict
	}{
		{name: "llm_provider_timeout", dead: explicit("llm_provider_timeout"), want: verdict{"transient", "auto_replay", "transient"}},
		{name: "llm_provider_rate_limit", dead: explicit("llm_provider_rate_limit"), want: verdict{"transient", "auto_replay", "transient"}},
		{name: "network_transient", dead: explicit("network_transient"), want: verdict{"transient", "auto_replay", "transient"}},
		{name: "github_api_rate_limit", dead: explicit("github_api_rate_limit"), want: verdict{"transient", "auto_replay", "transient"}},
		{name: "gke_node_preemption", dead: explicit("gke_node_preemption"), want: verdict{"transient", "auto_replay", "transient"}},
		{name: "timeout", dead: explicit("timeout"), want: verdict{"transient", "auto_replay", "transient"}},
		{name: "dependency_unavailable", dead: explicit("dependency_unavailable"), want: verdict{"transient", "auto_replay", "transient"}},
		{name: "no_workers", dead: explicit("no_workers"), want: verdict{"transient", "auto_replay", "transient"}},
		{name: "store_lock_busy", dead: explicit("store_lock_busy"), want: verdict{"transient", "auto_replay", "transient"}},
		{name: "max_scheduling_retries", dead: explicit("max_scheduling_retries"), want: verdict{"transient", "auto_replay", "max_scheduling_retries"}},
		{name: "context_window_overflow", dead: explicit("context_window_overflow"), want: verdict{"conditionally_recoverable", "auto_replay", "context_window_overflow"}},
		{name: "hallucination_loop", dead: explicit("hallucination_loop"), want: verdict{"conditionally_recoverable", "auto_replay", "hallucination_loop"}},
		{name: "token_budget_exceeded", dead: explicit("token_budget_exceeded"), want: verdict{"conditionally_recoverable", "auto_replay", "token_budget_exceeded"}},
		{name: "model_confusion", dead: explicit("model_confusion"), want: verdict{"conditionally_recoverable", "auto_replay", "model_confusion"}},
		{name: "authority_exceeded", dead: explicit("authority_exceeded"), want: verdict{"permanent", "escalate", "none"}},
		{name: "impossible_task", dead: explicit("impossible_task"), want: verdict{"permanent", "escalate", "none"}},
		{name: "dependency_removed", dead: explicit("dependency_removed"), want: verdict{"permanent", "escalate", "none"}},
		{name: "data_integrity", dead: explicit("data_integrity"), want: verdict{"permanent", "escalate", "none"}},
		{name: "schema_invalid", dead: explicit("schema_invalid"), want: verdict{"poison", "quarantine", "none"}},
		{name: "parse_error", dead: explicit("parse_error"), want: verdict{"poison", "quarantine", "none"}},
		{name: "payload_unmarshal_failed", dead: explicit("payload_unmarshal_failed"), want: verdict{"poison", "quarantine", "none"}},
		{name: "tool_contract_mismatch", dead: explicit("tool_contract_mismatch"), want: verdict{"poison", "quarantine", "none"}},
		{name: "no_pool_mapping", dead: explicit("no_pool_mapping"), want: verdict{"poison", "quarantine", "none"}},
		{name: "denied", dead: explicit("denied"), want: verdict{"governance", "require_approval", "none"}},
		{name: "safety_denied", dead: explicit("safety_denied"), want: verdict{"governance", "require_approval", "none"}},
		{name: "approval_required", dead: explicit("approval_required"), want: verdict{"governance", "require_approval", "none"}},
		{name: "policy_snapshot_mismatch", dead: explicit("policy_snapshot_mismatch"), want: verdict{"governance", "require_approval", "none"}},
		{name: "partial_external_write", dead: explicit("partial_external_write"), want: verdict{"unknown_commit_state", "manual_review", "none"}},
		{name: "unknown_commit_state", dead: explicit("unknown_commit_state"), want: verdict{"unknown_commit_state", "manual_review", "none"}},
		{name: "stream_limit_deleted (server TERM)", dead: dead{kind: jevent.KindTerminated, reason: "Message deleted by stream limits"},
			want: verdict{"permanent", "escalate", "none"}},
		{name: "unacked_deleted (server TERM)", dead: dead{kind: jevent.KindTerminated, reason: "Unacknowledged message was deleted"},
			want: verdict{"permanent", "escalate", "none"}},
		{name: "consumer_filter_rejection", dead: explicit("consumer_filter_rejection"), want: verdict{"permanent", "escalate", "none"}},
		{name: "unknown (max deliveries, no record)", dead: dead{kind: jevent.KindMaxDeliver}, want: verdict{"unknown", "auto_replay", "default"}},
		{name: "TERM reason as JSON", dead: dead{kind: jevent.KindTerminated, reason: `{"code":"parse_error","detail":"bad json"}`},
			want: verdict{"poison", "quarantine", "none"}},
		{name: "fifth failure of a chain is poison",
			chain: []dead{explicit("timeout"), explicit("timeout"), explicit("timeout"), explicit("network_transient")},
			dead:  explicit("network_transient"), want: verdict{"poison", "escalate", "none"}},
		{name: "second context overflow is quarantined", chain: []dead{explicit("context_window_overflow")},
			dead: explicit("context_window_overflow"), want: verdict{"conditionally_recoverable", "quarantine", "none"}},
		{name: "completed steps and the tool-failure flag",
			dead: dead{kind: jevent.KindExplicit, failure: &failure{code: "network_transient", tool: true, steps: []string{"charge-card"}}},
			want: verdict{"unknown_commit_state", "manual_review", "none"}},
		{name: "completed steps without a tool failure",
			dead: dead{kind: jevent.KindExplicit, failure: &failure{code: "network_transient", steps: []string{"draft"}}},
			want: verdict{"transient", "auto_replay", "transient"}},
		{name: "transient marked not retryable", dead: dead{kind: jevent.KindExplicit, failure: &failure{code: "timeout", retryable: &no}},
			want: verdict{"transient", "escalate", "transient"}},
		{name: "permanent marked retryable", dead: dead{kind: jevent.KindExplicit, failure: &failure{code: "impossible_task", retryable: &yes}},
			want: verdict{"permanent", "auto_replay", "agent_retryable"}},
	}
	seq := uint64(0)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A tenant of its own: the breaker of one case never holds another's replay.
			tenant, task := fmt.Sprintf("tenant-%02d", i), fmt.Sprintf("task-%02d", i)
			parent := ""
			for _, d := range tt.chain {
				seq++
				parent = c.deliver(t, c.event(tenant, task, seq, d, parent)).ID
			}
			seq++
			en := c.deliver(t, c.event(tenant, task, seq, tt.dead, parent))
			classified := verdict{en.Category, en.Action, en.Strategy}
			tested := c.policyTest(t, en.ID)
			d := c.reevaluate(t, en).Decision
			replayed := verdict{d.Category, d.Action, d.Strategy}
			if classified != tt.want {
				t.Errorf("classify = %+v, want %+v (the default policy)", classified, tt.want)
			}
			if tested != classified {
				t.Errorf("dlqctl policy test --entry = %+v, classify = %+v", tested, classified)
			}
			if replayed != classified {
				t.Errorf("replay re-evaluation = %+v, classify = %+v", replayed, classified)
			}
		})
	}
}
