package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/triage"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// env is one test's pipeline: a Firestore project of its own, an in-process
// Cloud Tasks emulator whose replay target counts the tasks it receives, and
// an embedded JetStream.
type env struct {
	t      *testing.T
	fs     *firestore.Client
	st     *store.Store
	sched  *tasks.Scheduler
	ct     *testenv.CloudTasks
	queue  string
	js     jetstream.JetStream
	target *testenv.TaskTarget // counts the replay tasks delivered
}

func newEnv(t *testing.T) *env {
	t.Helper()
	fs, project := testenv.Firestore(t)
	// Seeding records a failure per entry; a threshold nobody reaches keeps
	// breakers closed unless a test opens one (openBreaker).
	e := &env{t: t, fs: fs, st: store.New(fs, store.WithBreaker(store.BreakerConfig{Threshold: 1_000_000, Window: time.Hour, Cooldown: 15 * time.Minute})),
		target: testenv.NewTaskTarget(t)}
	e.ct = testenv.NewCloudTasks(t)
	e.queue = e.ct.Queue(t, project, "dlq-replay")
	e.sched = tasks.New(tasks.Config{Queue: e.queue, ReplayURL: e.target.URL + "/Replay", ServiceAccount: "tasks@test.iam.gserviceaccount.com", EmulatorHost: e.ct.Host})
	t.Cleanup(func() { e.sched.Close() })
	return e
}

// run runs one dlqctl command line with the environment vars.
func (e *env) run(vars map[string]string, args ...string) (code int, stdout, stderr string) {
	return e.runCtx(context.Background(), vars, nil, args...)
}

func (e *env) runCtx(ctx context.Context, vars map[string]string, tweak func(*app), args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	a := &app{stdout: &out, stderr: &errb, stdin: strings.NewReader(""), lookup: config.MapLookup(vars),
		fs: e.fs, st: e.st, sched: e.sched, log: obs.Discard()}
	if e.js != nil {
		a.jetstream = func(context.Context) (jetstream.JetStream, error) { return e.js, nil }
	}
	if tweak != nil {
		tweak(a)
	}
	code := a.run(ctx, args)
	return code, out.String(), errb.String()
}

type seed struct {
	id, tenant, agent, category, reason string
	status                              store.Status
	payload                             []byte
	replayOf, rootID                    string
}

func (e *env) seed(entries ...seed) {
	e.t.Helper()
	ctx := testenv.Context(e.t)
	for _, s := range entries {
		seq := int64(len(s.id))
		en := &store.Entry{ID: s.id, EventID: s.id, Stream: "TASKS", StreamSeq: seq, Subject: "agents." + s.agent + ".tasks.code_review",
			Tenant: s.tenant, Agent: s.agent, TaskID: "task-" + s.id, TaskType: "code_review", IdempotencyKey: "task-" + s.id + "-v1",
			Kind: "terminated", Category: s.category, ReasonCode: s.reason, Action: "escalate", Strategy: "none", Status: s.status,
			Payload: s.payload, ReplayOf: s.replayOf, RootID: s.rootID, Headers: map[string][]string{"X-Tenant-ID": {s.tenant}}}
		if s.payload == nil {
			en.Payload = []byte(`{"task":"` + s.id + `"}`)
		}
		if s.status == store.Scheduled {
			en.Action, en.Strategy, en.TaskName, en.NextRetryAt = "auto_replay", "transient", tasks.Name(s.id, 1), time.Now().Add(time.Hour)
		}
		res, err := e.st.Record(ctx, en, "test")
		if err != nil {
			e.t.Fatalf("Record(%s) = %v", s.id, err)
		}
		// An open breaker holds a scheduled entry: no task, as in classify.
		if res.Entry.Status == store.Scheduled {
			if _, _, err := e.sched.Schedule(ctx, tasks.Request{EntryID: s.id, Attempt: 1, At: en.NextRetryAt}); err != nil {
				e.t.Fatalf("Schedule(%s) = %v", s.id, err)
			}
		}
	}
}

func (e *env) entry(id string) *store.Entry {
	e.t.Helper()
	en, err := e.st.Get(testenv.Context(e.t), id)
	if err != nil {
		e.t.Fatalf("Get(%s) = %v", id, err)
	}
	return en
}

func lsIDs(t *testing.T, out string) ([]string, string) {
	t.Helper()
	var doc struct {
		Entries []store.Entry `json:"entries"`
		Next    string        `json:"next_page_token"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("ls --json output %q: %v", out, err)
	}
	var ids []string
	for _, e := range doc.Entries {
		ids = append(ids, e.ID)
	}
	return ids, doc.Next
}

func TestLsFiltersAndPages(t *testing.T) {
	e := newEnv(t)
	for i := 1; i <= 5; i++ {
		e.seed(seed{id: fmt.Sprintf("TASKS.%d", i), tenant: "acme", agent: "backend", category: "permanent", reason: "impossible_task", status: store.Escalated})
	}
	e.seed(seed{id: "TASKS.6", tenant: "globex", agent: "cto", category: "poison", reason: "parse_error", status: store.Quarantined},
		seed{id: "TASKS.7", tenant: "globex", agent: "cto", category: "transient", reason: "timeout", status: store.Scheduled})

	tests := []struct {
		args []string
		want int
	}{
		{[]string{"ls", "--json"}, 7},
		{[]string{"ls", "--json", "--tenant", "acme"}, 5},
		{[]string{"ls", "--json", "--status", "quarantined"}, 1},
		{[]string{"ls", "--json", "--category", "transient"}, 1},
		{[]string{"ls", "--json", "--reason", "impossible_task", "--agent", "backend"}, 5},
		{[]string{"ls", "--json", "--agent", "cto", "--since", "1h"}, 2},
		{[]string{"ls", "--json", "--since", time.Now().Add(time.Hour).Format(time.RFC3339)}, 0},
		{[]string{"ls", "--json", "--until", "1h"}, 0},
	}
	for _, tc := range tests {
		code, out, stderr := e.run(nil, tc.args...)
		if code != 0 {
			t.Fatalf("dlqctl %v = exit %d, stderr %q", tc.args, code, stderr)
		}
		if ids, _ := lsIDs(t, out); len(ids) != tc.want {
			t.Errorf("dlqctl %v = %d entries %v, want %d", tc.args, len(ids), ids, tc.want)
		}
	}

	// Pages of 3 cover every entry exactly once, newest first.
	seen := map[string]int{}
	token := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("ls pagination does not end")
		}
		args := []string{"ls", "--json", "--limit", "3"}
		if token != "" {
			args = append(args, "--page-token", token)
		}
		code, out, stderr := e.run(nil, args...)
		if code != 0 {
			t.Fatalf("dlqctl %v = exit %d, stderr %q", args, code, stderr)
		}
		ids, next := lsIDs(t, out)
		for _, id := range ids {
			seen[id]++
		}
		if next == "" {
			break
		}
		token = next
	}
	if len(seen) != 7 {
		t.Errorf("pages covered %d entries %v, want 7", len(seen), seen)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("entry %s listed %d times across pages, want 1", id, n)
		}
	}

	// The human table prints the token for the next page.
	if code, out, _ := e.run(nil, "ls", "--limit", "2"); code != 0 || !strings.Contains(out, "--page-token ") || !strings.Contains(out, "STATUS") {
		t.Errorf("dlqctl ls --limit 2 = %d, %q; want a table and the next page token", code, out)
	}
	for _, bad := range [][]string{{"ls", "--status", "nope"}, {"ls", "--limit", "0"}, {"ls", "--page-token", "garbage!"}, {"ls", "--since", "yesterday"}, {"frobnicate"}} {
		if code, _, stderr := e.run(nil, bad...); code != exitUsage || stderr == "" {
			t.Errorf("dlqctl %v = exit %d (stderr %q), want %d with a message", bad, code, stderr, exitUsage)
		}
	}
}

// globexEntries are the other tenant's entries of the tenant tests, one
// escalated and one scheduled, which acme may neither see nor change.
var globexEntries = []seed{
	{id: "TASKS.2", tenant: "globex", agent: "backend", category: "permanent", reason: "impossible_task", status: store.Escalated},
	{id: "TASKS.3", tenant: "globex", agent: "backend", category: "transient", reason: "timeout", status: store.Scheduled},
}

// wantGlobexUntouched checks that what acme tried (after) left globex's
// entries as seeded and dispatched no task.
func (e *env) wantGlobexUntouched(after string) {
	e.t.Helper()
	for _, s := range globexEntries {
		if got := e.entry(s.id); got.Status != s.status || len(got.History) != 1 {
			e.t.Errorf("globex entry %s after %s: status %s, %d transitions; want %s, untouched", s.id, after, got.Status, len(got.History), s.status)
		}
	}
	if n := len(e.target.Deliveries()); n != 0 {
		e.t.Errorf("%s dispatched %d tasks, want 0", after, n)
	}
}

func TestTenantIsolation(t *testing.T) {
	e := newEnv(t)
	e.seed(append([]seed{{id: "TASKS.1", tenant: "acme", agent: "backend", category: "permanent", reason: "impossible_task", status: store.Escalated}},
		globexEntries...)...)
	acme := map[string]string{"DLQCTL_TENANT": "acme"}

	// ls filters server-side: only acme's entry, whatever the filters.
	code, out, _ := e.run(acme, "ls", "--json")
	if ids, _ := lsIDs(t, out); code != 0 || len(ids) != 1 || ids[0] != "TASKS.1" {
		t.Errorf("acme: ls = %d %v, want only TASKS.1", code, ids)
	}
	code, out, _ = e.run(nil, "--tenant", "acme", "ls", "--json", "--status", "scheduled")
	if ids, _ := lsIDs(t, out); code != 0 || len(ids) != 0 {
		t.Errorf("--tenant acme: ls --status scheduled = %d %v, want nothing (the scheduled entry is globex's)", code, ids)
	}

	// Another tenant's entry is "not found", with the message of a missing id.
	_, _, missing := e.run(acme, "show", "TASKS.99")
	for _, args := range [][]string{
		{"show", "TASKS.2"},
		{"replay", "TASKS.3", "--now"},
		{"replay", "TASKS.3"},
		{"approve", "TASKS.2"},
		{"discard", "TASKS.2", "--reason", "not mine"},
	} {
		code, _, stderr := e.run(acme, args...)
		if code != exitNotFound {
			t.Errorf("acme: dlqctl %v = exit %d (%q), want %d", args, code, stderr, exitNotFound)
		}
		want := strings.ReplaceAll(missing, "TASKS.99", args[1])
		if args[0] == "show" && stderr != want {
			t.Errorf("acme: dlqctl %v says %q, a missing id says %q: the difference leaks", args, stderr, missing)
		}
	}
	e.wantGlobexUntouched("acme's attempts")

	// A limited caller cannot widen its scope, nor act on every tenant.
	for _, args := range [][]string{
		{"--tenant", "globex", "ls"},
		{"ls", "--tenant", "globex"},
		{"redrive", "--filter", "tenant=globex", "--rate", "5/s"},
		{"audit", "--dry-run"},
		{"policy", "apply", "whatever.yaml"},
	} {
		if code, _, stderr := e.run(acme, args...); code != exitUsage || stderr == "" {
			t.Errorf("acme: dlqctl %v = exit %d (%q), want %d with a message", args, code, stderr, exitUsage)
		}
	}
	// Its own entry works.
	if code, out, stderr := e.run(acme, "show", "TASKS.1"); code != 0 || !strings.Contains(out, "TASKS.1") {
		t.Errorf("acme: show TASKS.1 = %d %q %q", code, out, stderr)
	}
	if code, _, stderr := e.run(acme, "approve", "TASKS.1"); code != 0 {
		t.Errorf("acme: approve TASKS.1 = %d %q", code, stderr)
	}
}

func TestShowPayloadChainHistory(t *testing.T) {
	e := newEnv(t)
	bin := []byte{0x00, 0x01, 0xff, 'j', 's', 0x7f}
	e.seed(seed{id: "TASKS.10", tenant: "acme", agent: "backend", category: "conditionally_recoverable", reason: "context_window_overflow", status: store.Escalated},
		seed{id: "TASKS.11", tenant: "acme", agent: "backend", category: "conditionally_recoverable", reason: "context_window_overflow",
			status: store.Quarantined, payload: bin, replayOf: "TASKS.10", rootID: "TASKS.10"})

	code, out, stderr := e.run(nil, "show", "TASKS.11")
	if code != 0 {
		t.Fatalf("show = %d, %q", code, stderr)
	}
	for _, want := range []string{"(binary)", "00 01 ff 6a 73 7f", "chain (root first)", "TASKS.10", "* TASKS.11", "history", "(new) -> quarantined", "X-Tenant-ID: acme"} {
		if !strings.Contains(out, want) {
			t.Errorf("show TASKS.11 lacks %q:\n%s", want, out)
		}
	}
	if i, j := strings.Index(out, "  TASKS.10"), strings.Index(out, "* TASKS.11"); i < 0 || j < i {
		t.Errorf("chain not root first:\n%s", out)
	}
	code, out, _ = e.run(nil, "show", "TASKS.11", "--json")
	var doc showJSON
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil {
		t.Fatalf("show --json = %d, %v", code, err)
	}
	if !bytes.Equal(doc.Payload, bin) || !doc.PayloadBinary || len(doc.Chain) != 2 || doc.Entry.ReplayOf != "TASKS.10" {
		t.Errorf("show --json = payload %x binary %v chain %v, want the binary payload and a chain of 2", doc.Payload, doc.PayloadBinary, doc.Chain)
	}
	if code, out, _ := e.run(nil, "show", "TASKS.10"); code != 0 || !strings.Contains(out, `  | {"task":"TASKS.10"}`) || !strings.Contains(out, "* TASKS.10") {
		t.Errorf("show TASKS.10 = %d:\n%s\nwant the text payload and the chain", code, out)
	}
	if code, _, _ := e.run(nil, "show"); code != exitUsage {
		t.Errorf("show without id = %d, want %d", code, exitUsage)
	}
}

func TestReplayApproveDiscard(t *testing.T) {
	e := newEnv(t)
	e.seed(seed{id: "TASKS.20", tenant: "acme", agent: "backend", category: "poison", reason: "parse_error", status: store.Quarantined},
		seed{id: "TASKS.21", tenant: "acme", agent: "backend", category: "permanent", reason: "impossible_task", status: store.Escalated},
		seed{id: "TASKS.22", tenant: "acme", agent: "backend", category: "transient", reason: "timeout", status: store.Scheduled})
	fixed := filepath.Join(t.TempDir(), "fixed.json")
	if err := os.WriteFile(fixed, []byte(`{"task":"fixed"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"DLQCTL_ACTOR": "alice"}

	code, out, stderr := e.run(vars, "approve", "TASKS.20", "--edit-payload", fixed, "--set-header", "X-Priority=high", "--set-header", "X-Note=fixed json")
	if code != 0 {
		t.Fatalf("approve = %d, %q", code, stderr)
	}
	got := e.entry("TASKS.20")
	v, _ := got.ReplayVersion()
	edited, err := e.st.VersionPayload(testenv.Context(t), got, v.N)
	if got.Status != store.Scheduled || err != nil || string(edited) != `{"task":"fixed"}` || event.Header(got.HeadersOf(v), "X-Priority") != "high" {
		t.Errorf("after approve: status %s, version %d payload %q (%v), headers %v", got.Status, v.N, edited, err, got.HeadersOf(v))
	}
	if string(got.Payload) != `{"task":"TASKS.20"}` {
		t.Errorf("after approve: original payload %q, want it kept", got.Payload)
	}
	if last := got.History[len(got.History)-1]; last.By != "alice" || !strings.HasPrefix(last.Note, store.ApprovalNote) {
		t.Errorf("approval history = %+v, want by alice, note starting %q", last, store.ApprovalNote)
	}
	if !strings.Contains(out, "approved") {
		t.Errorf("approve printed %q", out)
	}
	// Approving twice is a conflict: the entry is scheduled already.
	if code, _, stderr := e.run(vars, "approve", "TASKS.20"); code != exitConflict {
		t.Errorf("second approve = %d (%q), want %d", code, stderr, exitConflict)
	}
	// A refused edit is bad input (the console's 400), not a conflict.
	if code, _, _ := e.run(vars, "approve", "TASKS.21", "--set-header", "Nats-Msg-Id=x"); code != exitUsage {
		t.Errorf("approve with a Nats-* header = %d, want %d (refused edit)", code, exitUsage)
	}
	if code, _, _ := e.run(vars, "approve", "TASKS.404"); code != exitNotFound {
		t.Errorf("approve of a missing id = %d, want %d", code, exitNotFound)
	}

	if code, _, _ := e.run(vars, "discard", "TASKS.21"); code != exitUsage {
		t.Errorf("discard without --reason = %d, want %d", code, exitUsage)
	}
	if code, _, stderr := e.run(vars, "discard", "TASKS.21", "--reason", "customer withdrew the task"); code != 0 {
		t.Fatalf("discard = %d, %q", code, stderr)
	}
	if got := e.entry("TASKS.21"); got.Status != store.Discarded || !strings.Contains(got.History[len(got.History)-1].Note, "customer withdrew") {
		t.Errorf("after discard: %s %+v", got.Status, got.History)
	}
	if code, _, _ := e.run(vars, "replay", "TASKS.21"); code != exitConflict {
		t.Errorf("replay of a discarded entry = %d, want %d", code, exitConflict)
	}

	// replay --now runs the scheduled task at once (it was due in an hour).
	if code, out, stderr := e.run(vars, "replay", "TASKS.22", "--now"); code != 0 || !strings.Contains(out, "running now") {
		t.Fatalf("replay --now = %d %q %q", code, out, stderr)
	}
	task := tasks.Name("TASKS.22", 1)
	testenv.WaitUntil(t, 20*time.Second, "the replay task to be dispatched", func() bool {
		return e.target.Deliveries()[task] == 1
	})
}

func TestStats(t *testing.T) {
	e := newEnv(t)
	e.seed(seed{id: "TASKS.1", tenant: "acme", agent: "backend", category: "permanent", reason: "impossible_task", status: store.Escalated},
		seed{id: "TASKS.2", tenant: "acme", agent: "backend", category: "transient", reason: "timeout", status: store.Scheduled},
		seed{id: "TASKS.3", tenant: "globex", agent: "cto", category: "transient", reason: "timeout", status: store.Scheduled})
	ctx := testenv.Context(t)
	now := time.Now().UTC()
	// Reconcile's samples of the work stream: 400 published this hour.
	for _, s := range []store.MetricsSample{{Stream: "TASKS", FirstLastSeq: 100, LastSeq: 100}, {Stream: "TASKS", FirstLastSeq: 500, LastSeq: 500}} {
		if err := e.st.RecordSample(ctx, now, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.st.AddMetrics(ctx, now, "TASKS.2", store.Metrics{ReplaysRecovered: 1}); err != nil {
		t.Fatal(err)
	}
	// An operator's discard: the resolution counters of its move.
	if _, err := e.st.Transition(ctx, "TASKS.1", store.Change{From: []store.Status{store.Escalated}, To: store.Discarded, By: "ann", Role: authority.Operator}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := e.run(nil, "stats", "--hours", "2", "--json")
	if code != 0 {
		t.Fatalf("stats --json = %d %q", code, stderr)
	}
	var doc struct {
		Hours      []hourStats
		Resolution store.Resolution
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Hours) != 2 {
		t.Fatalf("stats --json = %q (%v), want 2 hours", out, err)
	}
	if r := doc.Resolution; r.Settled != 1 || r.Categories["permanent"].Settled != 1 || r.ToDecision.N != 1 || r.Recovery != 0 {
		t.Errorf("stats --json resolution = %+v, want the one discard settled, decided, unrecovered", r)
	}
	cur := doc.Hours[1]
	want := hourStats{Hour: store.Hour(now), Processed: 400, Entries: 3, DLQRate: 3.0 / 400, Recovered: 1, Human: 1,
		ByCategory: map[string]int64{"permanent": 1, "transient": 2}}
	if fmt.Sprint(cur) != fmt.Sprint(want) {
		t.Errorf("stats current hour = %+v, want %+v", cur, want)
	}
	code, out, _ = e.run(nil, "stats", "--hours", "3")
	// Two of the three hours have no sample: the total's rate says so.
	for _, s := range []string{"PROCESSED", "0.75%", "transient", "··█ 2", "permanent", "3 dead of 400 processed, over the 1 of 3 hours with a work-stream sample",
		"resolution (the moves of the window)", "0.00% recovered", "time to a human decision: median ≤ ", "replays denied by a gate: 0 of 0 claimed (-)"} {
		if code != 0 || !strings.Contains(out, s) {
			t.Errorf("stats output lacks %q:\n%s", s, out)
		}
	}
	// Every hour sampled: the total row adds up, and no line says otherwise.
	if code, out, _ = e.run(nil, "stats", "--hours", "1"); code != 0 || !strings.Contains(out, "0.75%") || strings.Contains(out, "total DLQ rate:") {
		t.Errorf("stats --hours 1 = %d:\n%s\nwant the rate and no note on unsampled hours", code, out)
	}
	// A tenant-limited caller gets its own numbers only.
	code, out, _ = e.run(map[string]string{"DLQCTL_TENANT": "globex"}, "stats", "--hours", "1", "--json")
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || doc.Hours[0].Entries != 1 || doc.Hours[0].ByCategory["permanent"] != 0 {
		t.Errorf("globex stats = %d %+v, want 1 transient entry", code, doc.Hours)
	}
	if got := sparkline([]int64{0, 1, 4, 8}); got != "·▁▄█" {
		t.Errorf("sparkline(0,1,4,8) = %q, want ·▁▄█", got)
	}
}

func TestAuditAndHealth(t *testing.T) {
	e := newEnv(t)
	nats := testenv.NewNATS(t)
	_, js := nats.Connect(t)
	e.js = js
	ctx := testenv.Context(t)
	if err := bridge.Ensure(ctx, js, bridge.Names{AdvisoryStream: "DLQ_ADVISORIES", RecordStream: "DLQ_RECORDS", FailureBucket: "dlq_failures"}, obs.Discard()); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TASKS", Subjects: []string{"agents.>"}}); err != nil {
		t.Fatal(err)
	}
	e.seed(seed{id: "TASKS.1", tenant: "acme", agent: "backend", category: "permanent", reason: "impossible_task", status: store.Escalated},
		seed{id: "TASKS.2", tenant: "globex", agent: "cto", category: "poison", reason: "parse_error", status: store.Quarantined})
	// A scheduled entry whose task is gone: the audit's missing_task repair.
	en := &store.Entry{ID: "TASKS.3", EventID: "TASKS.3", Stream: "TASKS", StreamSeq: 3, Subject: "agents.cto.tasks.debugging", Tenant: "globex",
		Agent: "cto", Kind: "max_deliver", Category: "transient", ReasonCode: "timeout", Action: "auto_replay", Strategy: "transient",
		Status: store.Scheduled, TaskName: tasks.Name("TASKS.3", 1), NextRetryAt: time.Now().Add(time.Hour), Payload: []byte("{}")}
	if _, err := e.st.Record(ctx, en, "test"); err != nil {
		t.Fatal(err)
	}
	noGrace := func(a *app) { a.reconcileConfig = func(c *reconciler.Config) { c.Grace = time.Nanosecond } }

	code, out, stderr := e.runCtx(ctx, nil, noGrace, "audit", "--dry-run", "--json")
	if code != 0 {
		t.Fatalf("audit --dry-run = %d %q %q", code, out, stderr)
	}
	var r audit.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Schema != audit.Schema || !r.DryRun {
		t.Fatalf("audit --json = %q (%v)", out, err)
	}
	if !strings.Contains(strings.Join(r.Alerts, ","), audit.AlertMissingTask) || r.Repairs.Done != 0 {
		t.Errorf("dry-run alerts %v repairs %+v, want missing_task planned, nothing done", r.Alerts, r.Repairs)
	}
	if n := len(e.ct.Tasks(t, e.queue)); n != 0 {
		t.Errorf("dry run created %d tasks", n)
	}

	code, out, stderr = e.runCtx(ctx, nil, noGrace, "audit")
	if code != 0 || !strings.Contains(out, "missing_task") || !strings.Contains(out, "SECTION") || !strings.Contains(out, "repairs applied") {
		t.Fatalf("audit = %d:\n%s\n%s", code, out, stderr)
	}
	if n := len(e.ct.Tasks(t, e.queue)); n != 1 {
		t.Errorf("audit recreated %d tasks, want 1", n)
	}

	code, out, stderr = e.run(nil, "health", "--json")
	var h healthJSON
	if err := json.Unmarshal([]byte(out), &h); code != 0 || err != nil {
		t.Fatalf("health --json = %d %q %q", code, out, stderr)
	}
	tenants := map[string]*audit.TenantHealth{}
	for _, th := range h.Tenants {
		tenants[th.Tenant] = th
	}
	if tenants["acme"] == nil || tenants["acme"].Escalated != 1 || tenants["globex"] == nil || tenants["globex"].ActivePoison != 1 || h.RunID == "" {
		t.Errorf("health = %+v, want acme with 1 escalated and globex with 1 poison", h)
	}
	if code, out, _ := e.run(nil, "health"); code != 0 || !strings.Contains(out, "TENANT") || !strings.Contains(out, "globex") {
		t.Errorf("health = %d:\n%s", code, out)
	}
	// acme sees its own row and none of the pipeline-wide alerts.
	code, out, _ = e.run(map[string]string{"DLQCTL_TENANT": "acme"}, "health", "--json")
	h = healthJSON{}
	if err := json.Unmarshal([]byte(out), &h); code != 0 || err != nil || len(h.Tenants) != 1 || h.Tenants[0].Tenant != "acme" || len(h.Alerts) != 0 {
		t.Errorf("acme health = %d %+v, want only acme and no foreign alerts", code, h)
	}
}

func TestPolicy(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	code, out, _ := e.run(nil, "policy", "show")
	if code != 0 || !strings.Contains(out, "# source: embedded default") || !strings.Contains(out, "rules:") {
		t.Fatalf("policy show = %d:\n%.300s", code, out)
	}
	def := strings.SplitN(out, "\n", 3)[2]
	bad := write("bad.yaml", strings.Replace(def, "base: 10s", "base: -1s", 1)+"\njiter: 1\n")
	code, _, stderr := e.run(nil, "policy", "validate", bad)
	// A document that is not a valid policy is bad input: exit 2, as the
	// console and the API answer invalid input 400 (shared/outcome).
	if code != exitUsage || !strings.Contains(stderr, "invalid policy") {
		t.Errorf("validate of a bad policy = %d %q, want %d and the reasons", code, stderr, exitUsage)
	}
	if code, _, _ := e.run(nil, "policy", "apply", bad); code != exitUsage {
		t.Errorf("apply of a bad policy = %d, want %d", code, exitUsage)
	}
	if code, out, _ := e.run(nil, "policy", "show", "--json"); code != 0 || !strings.Contains(out, `"source": "embedded default"`) {
		t.Errorf("a refused apply changed the policy: %s", out)
	}
	fast := write("fast.yaml", strings.Replace(def, "delay: {base: 10s}\n    max_replays: 1\n    max_context_tokens: 80000", "delay: {base: 3s}\n    max_replays: 1\n    max_context_tokens: 80000", 1))
	if code, out, stderr := e.run(nil, "policy", "validate", fast); code != 0 || !strings.Contains(out, "valid, version") {
		t.Fatalf("validate = %d %q %q", code, out, stderr)
	}
	ev := event.Event{Schema: event.Schema, ID: "TASKS.7", Kind: event.KindExplicit, Stream: "TASKS", StreamSeq: 7, Tenant: "acme", Agent: "backend",
		Message:    event.Message{Subject: "agents.backend.tasks.code_review", Headers: map[string][]string{"X-Tenant-ID": {"acme"}, "X-Task-ID": {"task-7"}}, Data: []byte("{}"), Size: 2, SHA256: store.PayloadSum([]byte("{}"))},
		Failure:    &event.Failure{Code: "context_window_overflow", Detail: "prompt of 160000 tokens", Agent: "backend"},
		ObservedAt: time.Now().UTC()}
	raw, err := event.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	evFile := write("event.json", string(raw))
	code, out, stderr = e.run(nil, "policy", "test", fast, evFile)
	for _, want := range []string{"context_window_overflow (found by record)", "rule        context-overflow", "auto_replay", "delay       2.4s – 3s",
		"retention   30d", "Jsdlq-Max-Context-Tokens: 80000", "Jsdlq-Target-Model: large-context", "Jsdlq-Instruction: Focus on the core task.",
		"approvers   operator, approver, tenant, triage_agent (no approvers in the rule: the category's default)"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("policy test lacks %q (exit %d, %q):\n%s", want, code, stderr, out)
		}
	}
	// The chain turns a second overflow into quarantine.
	code, out, _ = e.run(nil, "policy", "test", fast, evFile, "--chain", "context_window_overflow:context_window_overflow", "--json")
	var tr testResult
	if err := json.Unmarshal([]byte(out), &tr); code != 0 || err != nil || tr.Rule != "second-context-overflow" || tr.Action != "quarantine" || tr.Retention != "30d" {
		t.Errorf("policy test with a chain = %d %+v, want second-context-overflow / quarantine, kept 30d", code, tr)
	}
	// The same task without a key waits for a human, and says why.
	keyless := ev
	keyless.Message.Headers = map[string][]string{"X-Tenant-ID": {"acme"}}
	rawKeyless, err := event.Encode(keyless)
	if err != nil {
		t.Fatal(err)
	}
	code, out, _ = e.run(nil, "policy", "test", fast, write("keyless.json", string(rawKeyless)))
	if code != 0 || !strings.Contains(out, "action      require_approval") || !strings.Contains(out, triage.NoteKeyless) {
		t.Errorf("policy test of a keyless task = %d, want require_approval with the keyless note:\n%s", code, out)
	}
	// A governance denial: its rule keeps approval for approvers.
	gov := ev
	gov.Failure = &event.Failure{Code: "denied", Detail: "policy said no"}
	rawGov, err := event.Encode(gov)
	if err != nil {
		t.Fatal(err)
	}
	code, out, _ = e.run(nil, "policy", "test", fast, write("gov.json", string(rawGov)), "--json")
	if err := json.Unmarshal([]byte(out), &tr); code != 0 || err != nil || tr.Rule != "governance" || tr.ApproversFrom != "rule" ||
		!slices.Equal(tr.Approvers, []authority.Role{authority.Approver}) {
		t.Errorf("policy test of a governance denial = %d %+v, want rule governance approved by approver only (the rule's)", code, tr)
	}
	if code, _, _ := e.run(nil, "policy", "test", fast, write("junk.json", `{"schema":"nope"}`)); code != exitUsage {
		t.Errorf("policy test of a malformed event = %d, want %d", code, exitUsage)
	}

	// A stored entry, its chain included: a second overflow is quarantined.
	en := &store.Entry{ID: "TASKS.70", EventID: "TASKS.70", Stream: "TASKS", StreamSeq: 70, Subject: "agents.backend.tasks.code_review",
		Tenant: "acme", Agent: "backend", Kind: "explicit", Category: "conditionally_recoverable", ReasonCode: "context_window_overflow",
		Action: "quarantine", Strategy: "none", Status: store.Quarantined, Payload: []byte("{}"), ReplayOf: "TASKS.7", RootID: "TASKS.7",
		ChainCodes: []string{"context_window_overflow"}, ChainStrategies: []string{"context_window_overflow"},
		Failure: &event.Failure{Code: "context_window_overflow", Detail: "still too long"}}
	if _, err := e.st.Record(testenv.Context(t), en, "test"); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = e.run(nil, "policy", "test", fast, "--entry", "TASKS.70")
	if code != 0 || !strings.Contains(out, "rule        second-context-overflow") || !strings.Contains(out, "chain       context_window_overflow") {
		t.Errorf("policy test --entry = %d %q:\n%s", code, stderr, out)
	}
	if code, _, _ := e.run(map[string]string{"DLQCTL_TENANT": "globex"}, "policy", "test", fast, "--entry", "TASKS.70"); code != exitNotFound {
		t.Errorf("globex: policy test --entry of acme's entry = %d, want %d", code, exitNotFound)
	}

	code, out, stderr = e.run(nil, "policy", "apply", fast)
	if code != 0 || !strings.Contains(out, "applied") {
		t.Fatalf("apply = %d %q %q", code, out, stderr)
	}
	if code, out, _ := e.run(nil, "policy", "show"); code != 0 || !strings.Contains(out, "# source: firestore triage-policy/current") || !strings.Contains(out, "base: 3s") {
		t.Errorf("policy show after apply = %d:\n%.200s", code, out)
	}
	if code, out, _ := e.run(nil, "policy", "test", "current", evFile); code != 0 || !strings.Contains(out, "2.4s – 3s") {
		t.Errorf("policy test current = %d:\n%s", code, out)
	}
	// The stored override against the default, and a file before it is
	// applied: a partial override with a rule of its own and a deletion.
	code, out, _ = e.run(nil, "policy", "diff")
	if code != 0 || !strings.Contains(out, "strategies.context_window_overflow.delay.base: 10s → 3s") ||
		!strings.Contains(out, "# override   firestore triage-policy/current") || !strings.Contains(out, "# the effective policy:") {
		t.Errorf("policy diff = %d:\n%s", code, out)
	}
	partial := write("partial.yaml", "rules:\n  - {name: mine, match: {agent: [backend]}, action: escalate, strategy: none}\n  - {name: poison, delete: true}\n")
	code, out, _ = e.run(nil, "policy", "diff", partial, "--json")
	var d struct {
		Source string `json:"source"`
		Rules  []struct {
			Name, Origin string
		} `json:"rules"`
		Deleted []string `json:"deleted_rules"`
	}
	if err := json.Unmarshal([]byte(out), &d); code != 0 || err != nil || len(d.Rules) == 0 || d.Rules[0].Name != "mine" || d.Rules[0].Origin != "override" ||
		!slices.Equal(d.Deleted, []string{"poison"}) || d.Source != partial {
		t.Errorf("policy diff %s --json = %d, %v: %+v", partial, code, err, d)
	}
	if code, _, _ := e.run(nil, "policy", "diff", write("del.yaml", "rules: [{name: nope, delete: true}]\n")); code != exitUsage {
		t.Errorf("policy diff of an override deleting no rule = %d, want %d", code, exitUsage)
	}
}

// export writes the feed's rows of the window's entries, one per
// transition, as NDJSON or into a Parquet file, its progress on stderr; a
// tenant-limited caller exports its own entries only.
func TestExport(t *testing.T) {
	e := newEnv(t)
	e.seed(seed{id: "TASKS.1", tenant: "acme", agent: "backend", category: "permanent", reason: "impossible_task", status: store.Escalated},
		seed{id: "TASKS.2", tenant: "globex", agent: "cto", category: "transient", reason: "timeout", status: store.Scheduled})
	if _, err := e.st.Transition(testenv.Context(t), "TASKS.1", store.Change{From: []store.Status{store.Escalated}, To: store.Discarded, By: "ann", Role: authority.Operator}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := e.run(nil, "export", "--since", "1h", "--format", "ndjson")
	if code != 0 || !strings.Contains(stderr, "2 entries, 3 rows") {
		t.Fatalf("export --format ndjson = %d, stderr %q", code, stderr)
	}
	var transitions []string
	for line := range strings.Lines(out) {
		r, err := event.DecodeChangeRow([]byte(strings.TrimSpace(line)))
		if err != nil {
			t.Fatalf("export line %q: %v", line, err)
		}
		transitions = append(transitions, r.EntryID+" "+r.Transition+" "+r.ActorRole)
	}
	slices.Sort(transitions)
	if want := []string{"TASKS.1 created ", "TASKS.1 discarded operator", "TASKS.2 created "}; !slices.Equal(transitions, want) {
		t.Errorf("export rows = %q, want %q", transitions, want)
	}
	file := filepath.Join(t.TempDir(), "out.parquet")
	if code, _, stderr := e.run(map[string]string{"DLQCTL_TENANT": "globex"}, "export", "--since", "1h", "--out", file); code != 0 || !strings.Contains(stderr, "1 entries, 1 rows") {
		t.Fatalf("globex export --out = %d, stderr %q", code, stderr)
	}
	if b, err := os.ReadFile(file); err != nil || !bytes.HasPrefix(b, []byte("PAR1")) {
		t.Errorf("export --out wrote %d bytes (%v), want a Parquet file", len(b), err)
	}
	for _, args := range [][]string{{"export"}, {"export", "--since", "1h", "--format", "csv"}, {"export", "--since", "1h", "--until", "2h"}, {"export", "--since", "yesterday"}} {
		if code, _, _ := e.run(nil, args...); code != exitUsage {
			t.Errorf("%q = %d, want %d", args, code, exitUsage)
		}
	}
}
