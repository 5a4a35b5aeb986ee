package replay_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/firestore"
	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jsdlq/jsdlq/functions/replay"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// alice approves in these tests (the authority rule is shared/authority's).
var alice = authority.Actor{Name: "alice", Role: authority.Approver}

// A task Cloud Tasks delivers twice publishes once. The target answers 500
// to the first delivery although the function ran it completely, so Cloud
// Tasks delivers the same task again. That redelivery is a no-op because the
// claim is a transaction that only takes a scheduled entry (or one replaying
// under this very task): the entry is replayed by then.
// The replay of a transient failure keeps subject, model and idempotency key.
func TestDeliveredTwicePublishesOnce(t *testing.T) {
	e := setup(t)
	en := e.newEntry(t, spec{id: "TASKS.101"})
	first := true
	e.override = func(d delivery) int {
		if first && d.status == http.StatusOK {
			first = false
			return http.StatusInternalServerError
		}
		return d.status
	}
	task := e.schedule(t, en.ID)
	e.waitTaskGone(t, task)

	ds := e.deliveriesOf(task)
	if len(ds) != 2 {
		t.Fatalf("deliveries of %s = %d, want 2 (one answered 500, its retry)", task, len(ds))
	}
	if got := []string{ds[0].result.Outcome, ds[1].result.Outcome}; !slices.Equal(got, []string{replay.OutcomeReplayed, replay.OutcomeSkipped}) {
		t.Errorf("outcomes = %v, want [replayed skipped]", got)
	}
	// Terraform's replay-outcome metric counts one line per handled task.
	lines := e.logs.Lines(`"event":"replay_outcome"`)
	if len(lines) != 2 || !strings.Contains(lines[0], `"outcome":"`+replay.OutcomeReplayed+`"`) || !strings.Contains(lines[1], `"outcome":"`+replay.OutcomeSkipped+`"`) {
		t.Errorf("replay_outcome log lines = %q, want one replayed then one skipped", lines)
	}
	got := e.waitStatus(t, en.ID, store.Replayed)
	msgs := e.msgs(t)
	if len(msgs) != 1 {
		t.Fatalf("messages in %s = %d, want 1", workStream, len(msgs))
	}
	m := msgs[0]
	if got.PublishedSeq != int64(m.Sequence) || got.Replays != 1 {
		t.Errorf("entry published_seq, replays = %d, %d, want %d, 1", got.PublishedSeq, got.Replays, m.Sequence)
	}
	if m.Subject != en.Subject {
		t.Errorf("subject = %s, want %s (transient: same agent)", m.Subject, en.Subject)
	}
	if !bytes.Equal(m.Data, en.Payload) {
		t.Errorf("payload = %q, want %q", m.Data, en.Payload)
	}
	want := map[string]string{
		"X-Idempotency-Key":    en.IdempotencyKey,
		"X-Task-ID":            en.TaskID,
		"X-Agent":              en.Agent,
		"Jsdlq-Replay-Of":      en.ID,
		"Jsdlq-Replay-Attempt": "1",
		"Jsdlq-Strategy":       "transient",
		"Nats-Msg-Id":          replay.MsgID(en.ID, 1), // not the original's
		"Jsdlq-Target-Model":   "",                     // same model
		"Jsdlq-Instruction":    "",
	}
	for k, v := range want {
		if g := m.Header.Get(k); g != v {
			t.Errorf("header %s = %q, want %q", k, g, v)
		}
	}
}

// A crash between the JetStream publish and the status update (injected as
// the ack never reaching replay: the message is in the stream, nothing after
// the publish runs, the request fails): Cloud Tasks retries the task, the
// claim is re-entered by the same task, the publish is repeated with the same
// Nats-Msg-Id and dropped by the stream's duplicate window (PubAck.Duplicate,
// the original sequence), and the entry ends replayed with exactly one
// message in the stream.
func TestCrashAfterPublishConverges(t *testing.T) {
	crashes := 0
	e := setup(t, func(p replay.Publisher) replay.Publisher {
		return testenv.CrashAfterPublish(p, func(*nats.Msg) error {
			if crashes == 0 {
				crashes++
				return errors.New("injected crash")
			}
			return nil
		})
	})
	en := e.newEntry(t, spec{id: "TASKS.102"})
	task := e.schedule(t, en.ID)
	e.waitTaskGone(t, task)

	ds := e.deliveriesOf(task)
	if len(ds) != 2 || ds[0].status != http.StatusServiceUnavailable || ds[1].status != http.StatusOK {
		t.Fatalf("deliveries = %+v, want a 503 then a 200", ds)
	}
	if !ds[1].result.Duplicate {
		t.Errorf("retry result = %+v, want a duplicate publish", ds[1].result)
	}
	got := e.waitStatus(t, en.ID, store.Replayed)
	msgs := e.msgs(t)
	if len(msgs) != 1 {
		t.Fatalf("messages = %d, want 1", len(msgs))
	}
	if got.PublishedSeq != int64(msgs[0].Sequence) {
		t.Errorf("published_seq = %d, want %d", got.PublishedSeq, msgs[0].Sequence)
	}
	last := got.History[len(got.History)-1]
	if !strings.Contains(last.Note, "duplicate") {
		t.Errorf("last history note = %q, want it to mention the duplicate", last.Note)
	}
}

// The half-open probe's replay dies again: classify records the new entry
// with Jsdlq-Replay-Of = the probe, and the breaker reopens.
func TestProbeDeathReopensBreaker(t *testing.T) {
	e := setup(t)
	en := e.newEntry(t, spec{id: "TASKS.650"})
	now := time.Now().UTC()
	e.breaker(t, store.Breaker{Tenant: tenant, State: store.BreakerHalfOpen, OpenedAt: now, HalfOpenAt: now, UpdatedAt: now})
	probe := e.settled(t, e.schedule(t, en.ID), en.ID, store.Replayed)
	if !probe.BreakerProbe {
		t.Fatalf("entry %s is not the probe", en.ID)
	}
	died := &store.Entry{ID: "TASKS.651", EventID: "TASKS.651", Stream: workStream, StreamSeq: 9, Subject: en.Subject,
		Tenant: tenant, Agent: en.Agent, IdempotencyKey: en.IdempotencyKey, Payload: en.Payload, Kind: "explicit",
		ReplayOf: en.ID, RootID: en.ID, Status: store.Escalated}
	if _, err := e.store.Record(e.ctx, died, "classify"); err != nil {
		t.Fatal(err)
	}
	br, err := e.store.GetBreaker(e.ctx, tenant)
	if err != nil || br.State != store.BreakerOpen {
		t.Errorf("breaker after the probe died = %+v, %v, want open", br, err)
	}
}

// Firestore unreachable: 503, so Cloud Tasks retries; nothing published.
func TestFirestoreDownAnswers503(t *testing.T) {
	e := setup(t)
	// The client takes its endpoint from the variable when it is built; the
	// shared emulator is unaffected (its clients exist already).
	t.Setenv("FIRESTORE_EMULATOR_HOST", "127.0.0.1:1")
	dead, err := firestore.NewClient(context.Background(), "dead")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dead.Close() })
	h := replay.New(replay.Config{}, replay.Deps{Store: store.New(dead), Policy: e.policy, Publisher: e.js})
	ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/Replay", strings.NewReader(`{"entry_id":"TASKS.1","attempt":1}`))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("status = %d, want 503 (%s)", w.Code, w.Body.String())
	}
	e.wantMsgs(t, 0)
}

// NATS down: the function answers 503 and Cloud Tasks retries; once NATS is
// back the replay goes out once. A publish the client buffered during the
// outage and flushed after it has the same Nats-Msg-Id as the retry's, so
// the stream keeps one of them.
func TestNATSDownRetries(t *testing.T) {
	e := setupWith(t, replay.Config{PublishTimeout: 300 * time.Millisecond})
	en := e.newEntry(t, spec{id: "TASKS.150"})
	e.nats.Shutdown()
	task := e.schedule(t, en.ID)
	wait(t, "a 503 while NATS is down", func() (bool, error) {
		ds := e.deliveriesOf(task)
		return len(ds) > 0 && ds[0].status == http.StatusServiceUnavailable, nil
	})
	if got, err := e.store.GetMeta(e.ctx, en.ID); err != nil || got.Status != store.Replaying {
		t.Errorf("entry during the outage = %v, %v, want replaying (claimed by its task)", got.Status, err)
	}
	e.nats.Restart(t)
	e.settled(t, task, en.ID, store.Replayed)
	e.wantMsgs(t, 1)
}

// No token: 401; a genuine emulator token for another audience, or for an
// account not allowed: 403. Nothing is published and the entries stay
// scheduled.
func TestAuthentication(t *testing.T) {
	e := setup(t)
	noToken := e.newEntry(t, spec{id: "TASKS.201"})
	otherAud := e.newEntry(t, spec{id: "TASKS.202"})
	otherSA := e.newEntry(t, spec{id: "TASKS.203"})

	body := `{"entry_id":"` + noToken.ID + `","attempt":1}`
	resp, err := http.Post(e.url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST without token = %d, want 401", resp.StatusCode)
	}

	forged := []struct {
		entry    *store.Entry
		audience string
		account  string
		want     int
	}{
		{otherAud, "https://reconcile.example/Reconcile", tasksSA, http.StatusForbidden},
		{otherSA, e.url, "intruder@test-project.iam.gserviceaccount.com", http.StatusForbidden},
	}
	for _, f := range forged {
		name := e.sched.FullName(tasks.Name(f.entry.ID, 1))
		_, err := e.ct.Client.CreateTask(e.ctx, &cloudtaskspb.CreateTaskRequest{Parent: e.queue, Task: &cloudtaskspb.Task{
			Name: name, ScheduleTime: timestamppb.Now(),
			MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
				Url: e.url, HttpMethod: cloudtaskspb.HttpMethod_POST,
				Body: []byte(`{"entry_id":"` + f.entry.ID + `","attempt":1}`),
				AuthorizationHeader: &cloudtaskspb.HttpRequest_OidcToken{OidcToken: &cloudtaskspb.OidcToken{
					ServiceAccountEmail: f.account, Audience: f.audience,
				}},
			}},
		}})
		if err != nil {
			t.Fatalf("CreateTask() = %v", err)
		}
		wait(t, "a delivery of "+name, func() (bool, error) { return len(e.deliveriesOf(name)) > 0, nil })
		if err := e.sched.Delete(e.ctx, name); err != nil {
			t.Fatal(err)
		}
		if got := e.deliveriesOf(name)[0].status; got != f.want {
			t.Errorf("token for %s as %s: status %d, want %d", f.audience, f.account, got, f.want)
		}
	}
	e.wantMsgs(t, 0)
	for _, en := range []*store.Entry{noToken, otherAud, otherSA} {
		got, err := e.store.GetMeta(e.ctx, en.ID)
		if err != nil || got.Status != store.Scheduled {
			t.Errorf("entry %s = %v, %v, want scheduled", en.ID, got.Status, err)
		}
	}
}

// The task completed meanwhile (agentkit.Once recorded it): recovered, no
// publish.
func TestCompletedTaskRecovers(t *testing.T) {
	e := setup(t)
	en := e.newEntry(t, spec{id: "TASKS.301"})
	kit := agentkit.New(e.js, agentkit.WithFirestore(e.fs), agentkit.WithAgent("backend"))
	if ran, err := kit.Once(e.ctx, en.Task(), func(context.Context) error { return nil }); err != nil || !ran {
		t.Fatalf("Once() = %v, %v", ran, err)
	}
	task := e.schedule(t, en.ID)
	e.settled(t, task, en.ID, store.Recovered)
	e.wantMsgs(t, 0)
}

// Replay's "already done?" asks for the entry's task: its tenant and key.
// Another tenant's completion of the same key does not stop the replay. A
// record an older kit wrote under the key alone (no tenant) does while the
// migration window lasts, when it was completed at or after the dead task
// was published; then the tenant gets a record of its own. One completed
// before the publish is another task's, and after the window no older
// record is read.
func TestCompletionIsTheTenants(t *testing.T) {
	e := setup(t)
	published := time.Now().UTC().Add(-time.Hour).Truncate(time.Microsecond)
	kit := agentkit.New(e.js, agentkit.WithFirestore(e.fs), agentkit.WithAgent("backend"))
	older := func(at time.Time) func(*store.Entry) {
		return func(en *store.Entry) {
			rec := agentkit.IdempotencyRecord{Key: en.IdempotencyKey, Status: agentkit.StatusCompleted, Agent: "backend", CompletedAt: at, ExpireAt: at.Add(72 * time.Hour)}
			if _, err := e.fs.Collection(store.TaskIdempotency).Doc(agentkit.LegacyIdempotencyDocID(en.IdempotencyKey)).Set(e.ctx, rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	completedBy := func(tenant string) func(*store.Entry) {
		return func(en *store.Entry) {
			task := en.Task()
			task.Tenant = tenant
			if ran, err := kit.Once(e.ctx, task, func(context.Context) error { return nil }); err != nil || !ran {
				t.Fatalf("Once(%+v) = %v, %v", task, ran, err)
			}
		}
	}
	windowOver := store.New(e.fs, store.WithLegacyCompletionsUntil(time.Now().Add(-time.Minute)))
	tests := []struct {
		name     string
		complete func(*store.Entry)
		store    *store.Store // default e.store: no end to the window set
		want     string
		legacy   bool // recovered through an older kit's record
	}{
		{"its tenant's completion", completedBy(tenant), nil, replay.OutcomeRecovered, false},
		{"another tenant's completion of the key", completedBy("globex"), nil, replay.OutcomeReplayed, false},
		{"older kit's, completed after the publish", older(published.Add(time.Minute)), nil, replay.OutcomeRecovered, true},
		{"older kit's, completed at the publish", older(published), nil, replay.OutcomeRecovered, true},
		{"older kit's, completed before the publish", older(published.Add(-time.Microsecond)), nil, replay.OutcomeReplayed, false},
		{"older kit's, after the window", older(published.Add(time.Minute)), windowOver, replay.OutcomeReplayed, false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			en := e.newEntry(t, spec{id: fmt.Sprintf("TASKS.%d", 330+i), published: published})
			tc.complete(en)
			st := e.store
			if tc.store != nil {
				st = tc.store
			}
			h := replay.New(replay.Config{}, replay.Deps{Store: st, Policy: e.policy, Publisher: e.js})
			res, err := h.Replay(e.ctx, en.ID, 1, en.TaskName)
			if err != nil || res.Outcome != tc.want {
				t.Fatalf("Replay(%s) = %+v, %v; want %s", en.ID, res, err, tc.want)
			}
			got, err := e.store.GetMeta(e.ctx, en.ID)
			if err != nil {
				t.Fatal(err)
			}
			note := got.History[len(got.History)-1].Note
			if tc.legacy != strings.Contains(note, "older agentkit") {
				t.Errorf("history note = %q, want it to name an older kit's record: %v", note, tc.legacy)
			}
			if tc.want != replay.OutcomeRecovered {
				return
			}
			// Recovered: the tenant's own record says so for as long as
			// the entry lasts, whatever the window.
			if c, err := windowOver.Completion(e.ctx, got); err != nil || !c.Done || c.Legacy || c.ExpireAt.Before(got.ExpireAt) {
				t.Errorf("the tenant's record after the recovery = %+v, %v; want done until %s", c, err, got.ExpireAt)
			}
		})
	}
}

// The policy changed (a Firestore override makes transient failures need
// approval): awaiting_approval, nothing published. An approval with an
// edited payload then publishes the edited payload, and history shows the
// edit.
func TestPolicyDenyThenApproveWithEdit(t *testing.T) {
	e := setup(t)
	en := e.newEntry(t, spec{id: "TASKS.401"})
	e.overrideTransient(t, "    action: require_approval\n    strategy: none")
	task := e.schedule(t, en.ID)
	held := e.settled(t, task, en.ID, store.AwaitingApproval)
	if held.Action != string(triage.RequireApproval) || held.Rule != "transient" {
		t.Errorf("entry action, rule = %s, %s, want require_approval, transient", held.Action, held.Rule)
	}
	if n := len(e.msgs(t)); n != 0 {
		t.Fatalf("messages = %d, want 0", n)
	}

	edited := []byte(`{"task":"TASKS.401","fixed":true}`)
	approved, err := e.op.Approve(e.ctx, tenant, en.ID, operator.Edits{Payload: edited, SetHeaders: map[string]string{"X-Reviewed-By": "alice"}, By: alice})
	if err != nil {
		t.Fatalf("Approve() = %v", err)
	}
	if want := tasks.Name(en.ID, 2); approved.TaskName != want {
		t.Errorf("task after approval = %s, want %s (a new attempt)", approved.TaskName, want)
	}
	got := e.waitStatus(t, en.ID, store.Replayed)
	msgs := e.msgs(t)
	if len(msgs) != 1 {
		t.Fatalf("messages = %d, want 1", len(msgs))
	}
	if !bytes.Equal(msgs[0].Data, edited) {
		t.Errorf("published payload = %q, want the edited %q", msgs[0].Data, edited)
	}
	if g := msgs[0].Header.Get("X-Reviewed-By"); g != "alice" {
		t.Errorf("X-Reviewed-By = %q, want alice", g)
	}
	if g := msgs[0].Header.Get("Nats-Msg-Id"); g != replay.MsgID(en.ID, 2) {
		t.Errorf("Nats-Msg-Id = %q, want %q", g, replay.MsgID(en.ID, 2))
	}
	var note string
	for _, h := range got.History {
		if strings.HasPrefix(h.Note, store.ApprovalNote) {
			note = h.Note
		}
	}
	for _, want := range []string{"alice", "X-Reviewed-By", store.PayloadSum(en.Payload), store.PayloadSum(edited),
		"payload edited"} {
		if !strings.Contains(note, want) {
			t.Errorf("approval note %q does not mention %q", note, want)
		}
	}
}

// Strategies change the replay: hallucination_loop goes to another agent
// able to do the task type, with instructions and a different model;
// context overflow and token budget add their limits.
func TestStrategies(t *testing.T) {
	e := setup(t)
	cases := []struct {
		name    string
		spec    spec
		subject string
		headers map[string][]string
	}{
		{
			name: "hallucination_loop",
			spec: spec{id: "TASKS.501", agent: "cto", taskType: "code_review", code: "hallucination_loop", detail: "the same diff three times"},
			// backend and cto can review code; backend is the other one.
			subject: "agents.backend.tasks.code_review",
			headers: map[string][]string{
				"Jsdlq-Strategy":     {"hallucination_loop"},
				"Jsdlq-Target-Model": {"alternate"},
				"Jsdlq-Instruction": {"Previous attempts produced incorrect output: the same diff three times",
					"Validate your output against the schema before submitting."},
				"X-Agent":           {"backend"},
				"X-Idempotency-Key": {"task-TASKS.501-v1"},
			},
		},
		{
			name:    "context_window_overflow",
			spec:    spec{id: "TASKS.502", code: "context_window_overflow"},
			subject: "agents.backend.tasks.implementation",
			headers: map[string][]string{
				"Jsdlq-Strategy":           {"context_window_overflow"},
				"Jsdlq-Max-Context-Tokens": {"80000"},
				"Jsdlq-Target-Model":       {"large-context"},
				"Jsdlq-Instruction":        {"Focus on the core task. Skip background context."},
				"X-Agent":                  {"backend"},
			},
		},
		{
			name:    "token_budget_exceeded",
			spec:    spec{id: "TASKS.503", code: "token_budget_exceeded", headers: map[string][]string{"X-Token-Budget": {"1000"}}},
			subject: "agents.backend.tasks.implementation",
			headers: map[string][]string{
				"Jsdlq-Strategy":          {"token_budget_exceeded"},
				"Jsdlq-Max-Output-Tokens": {"600"},
				"Jsdlq-Instruction":       {"Produce a concise response. Prioritize accuracy over completeness."},
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			en := e.newEntry(t, c.spec)
			got := e.settled(t, e.schedule(t, en.ID), en.ID, store.Replayed)
			s, err := e.js.Stream(e.ctx, workStream)
			if err != nil {
				t.Fatal(err)
			}
			m, err := s.GetMsg(e.ctx, uint64(got.PublishedSeq))
			if err != nil {
				t.Fatalf("GetMsg(%d) = %v", got.PublishedSeq, err)
			}
			if m.Subject != c.subject {
				t.Errorf("subject = %s, want %s", m.Subject, c.subject)
			}
			for k, want := range c.headers {
				if diff := cmp.Diff(want, m.Header.Values(k)); diff != "" {
					t.Errorf("header %s (-want +got):\n%s", k, diff)
				}
			}
		})
	}
}

// An open tenant breaker holds the replay; a half-open one lets exactly one
// probe through; the probe's recovery closes the breaker, after which the
// held entries can be replayed again.
func TestBreaker(t *testing.T) {
	e := setup(t)
	a := e.newEntry(t, spec{id: "TASKS.601"})
	b := e.newEntry(t, spec{id: "TASKS.602"})
	c := e.newEntry(t, spec{id: "TASKS.603"})

	now := time.Now().UTC()
	e.breaker(t, store.Breaker{Tenant: tenant, State: store.BreakerOpen, OpenedAt: now, UpdatedAt: now})
	e.settled(t, e.schedule(t, a.ID), a.ID, store.Held)
	if n := len(e.msgs(t)); n != 0 {
		t.Fatalf("open breaker: messages = %d, want 0", n)
	}

	e.breaker(t, store.Breaker{Tenant: tenant, State: store.BreakerHalfOpen, OpenedAt: now, HalfOpenAt: now, UpdatedAt: now})
	tb, tc := e.schedule(t, b.ID), e.schedule(t, c.ID)
	e.waitTaskGone(t, tb)
	e.waitTaskGone(t, tc)
	msgs := e.msgs(t)
	if len(msgs) != 1 {
		t.Fatalf("half-open breaker: messages = %d, want exactly 1 probe", len(msgs))
	}
	probe := msgs[0].Header.Get(event.HeaderReplayOf)
	other := b.ID
	if probe == b.ID {
		other = c.ID
	}
	pe := e.waitStatus(t, probe, store.Replayed)
	if !pe.BreakerProbe {
		t.Errorf("probe entry %s breaker_probe = false, want true", probe)
	}
	e.waitStatus(t, other, store.Held)
	br, err := e.store.GetBreaker(e.ctx, tenant)
	if err != nil || br.State != store.BreakerHalfOpen || br.ProbeEntry != probe {
		t.Fatalf("breaker = %+v, %v, want half-open with probe %s", br, err, probe)
	}

	// The probe's task completes; reconcile's recovery step closes the breaker.
	kit := agentkit.New(e.js, agentkit.WithFirestore(e.fs))
	if _, err := kit.Once(e.ctx, pe.Task(), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if c, err := e.store.Completion(e.ctx, pe); err != nil || !c.Done {
		t.Fatalf("Completion(%s) = %+v, %v, want completed", pe.IdempotencyKey, c, err)
	}
	if _, err := e.store.MarkRecovered(e.ctx, probe, []store.Status{store.Replayed}, "reconcile", "completed"); err != nil {
		t.Fatalf("MarkRecovered(%s) = %v", probe, err)
	}
	br, err = e.store.GetBreaker(e.ctx, tenant)
	if err != nil || br.State != store.BreakerClosed {
		t.Fatalf("breaker after the probe recovered = %+v, %v, want closed", br, err)
	}

	// A held entry released by an operator now replays.
	if _, err := e.op.ReplayNow(e.ctx, tenant, a.ID, alice); err != nil {
		t.Fatalf("ReplayNow(%s) = %v", a.ID, err)
	}
	e.waitStatus(t, a.ID, store.Replayed)
	if n := len(e.msgs(t)); n != 2 {
		t.Errorf("messages after the release = %d, want 2", n)
	}
}

// An entry whose payload was never captured cannot be replayed: escalated
// with payload_missing. An approval must supply the payload, and then it
// replays.
func TestPayloadMissing(t *testing.T) {
	e := setup(t)
	en := e.newEntry(t, spec{id: "TASKS.701", missing: true})
	got := e.settled(t, e.schedule(t, en.ID), en.ID, store.Escalated)
	if last := got.History[len(got.History)-1]; !strings.HasPrefix(last.Note, replay.ReasonPayloadMissing) {
		t.Errorf("history note = %q, want %s", last.Note, replay.ReasonPayloadMissing)
	}
	if n := len(e.msgs(t)); n != 0 {
		t.Fatalf("messages = %d, want 0", n)
	}
	if _, err := e.op.Approve(e.ctx, tenant, en.ID, operator.Edits{By: alice}); !errors.Is(err, operator.ErrPayloadMissing) {
		t.Errorf("Approve without payload = %v, want ErrPayloadMissing", err)
	}
	if _, err := e.op.Approve(e.ctx, tenant, en.ID, operator.Edits{Payload: []byte(`{"recovered":1}`), By: alice}); err != nil {
		t.Fatalf("Approve with payload = %v", err)
	}
	e.waitStatus(t, en.ID, store.Replayed)
	if msgs := e.msgs(t); len(msgs) != 1 || string(msgs[0].Data) != `{"recovered":1}` {
		t.Errorf("messages = %v, want the supplied payload once", msgs)
	}
}

// A replay publishes only into the stream its entry came from: an entry of
// stream OTHER whose subject the work stream TASKS captures (a forged or
// edited stream name, a subject remapped since) is escalated with
// stream_mismatch, and neither stream receives the message (the publish
// expects OTHER, so JetStream refuses it before storing).
func TestReplayStaysInItsStream(t *testing.T) {
	e := setup(t)
	if _, err := e.js.CreateStream(e.ctx, jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"other.>"}}); err != nil {
		t.Fatal(err)
	}
	en := e.newEntry(t, spec{id: "OTHER.702", stream: "OTHER"})
	got := e.settled(t, e.schedule(t, en.ID), en.ID, store.Escalated)
	if last := got.History[len(got.History)-1]; !strings.HasPrefix(last.Note, replay.ReasonStreamMismatch) {
		t.Errorf("history note = %q, want it to begin with %s", last.Note, replay.ReasonStreamMismatch)
	}
	if n := len(e.msgs(t)); n != 0 {
		t.Errorf("work stream %s holds %d messages, want 0", workStream, n)
	}
	other, err := e.js.Stream(e.ctx, "OTHER")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := other.Info(e.ctx); err != nil || info.State.Msgs != 0 {
		t.Errorf("stream OTHER = %+v, %v; want no message", info.State, err)
	}
}

// Direct calls with malformed tasks get a clear 400; an unknown entry or one
// in another state is a 200 no-op.
func TestMalformedAndStaleTasks(t *testing.T) {
	e := setup(t)
	en := e.newEntry(t, spec{id: "TASKS.801"})
	h := replay.New(replay.Config{}, replay.Deps{Store: e.store, Policy: e.policy, Publisher: e.js})
	cases := []struct {
		name, method, body, task string
		want                     int
		outcome                  string
	}{
		{"get", http.MethodGet, "", "", http.StatusMethodNotAllowed, ""},
		{"not json", http.MethodPost, "entry", "", http.StatusBadRequest, ""},
		{"unknown field", http.MethodPost, `{"entry_id":"x","attempt":1,"evil":true}`, "", http.StatusBadRequest, ""},
		{"no attempt", http.MethodPost, `{"entry_id":"x"}`, "", http.StatusBadRequest, ""},
		{"trailing data", http.MethodPost, `{"entry_id":"x","attempt":1}{}`, "", http.StatusBadRequest, ""},
		{"oversized", http.MethodPost, `{"entry_id":"` + strings.Repeat("x", 70<<10) + `","attempt":1}`, "", http.StatusBadRequest, ""},
		{"task of another entry", http.MethodPost, `{"entry_id":"` + en.ID + `","attempt":1}`, tasks.Name("TASKS.999", 1), http.StatusBadRequest, ""},
		{"unknown entry", http.MethodPost, `{"entry_id":"TASKS.999","attempt":1}`, "", http.StatusOK, replay.OutcomeSkipped},
		{"stale attempt", http.MethodPost, `{"entry_id":"` + en.ID + `","attempt":2}`, "", http.StatusOK, replay.OutcomeSkipped},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(c.method, "/Replay", strings.NewReader(c.body))
			if c.task != "" {
				r.Header.Set(tasks.HeaderTaskName, c.task)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != c.want {
				t.Errorf("%s: status %d, want %d (%s)", c.name, w.Code, c.want, w.Body.String())
			}
			if c.outcome != "" && !strings.Contains(w.Body.String(), `"outcome":"`+c.outcome+`"`) {
				t.Errorf("%s: body %s, want outcome %s", c.name, w.Body.String(), c.outcome)
			}
		})
	}
	got, err := e.store.GetMeta(e.ctx, en.ID)
	if err != nil || got.Status != store.Scheduled {
		t.Errorf("entry = %v, %v, want still scheduled", got.Status, err)
	}
	e.wantMsgs(t, 0)
}

func TestMessage(t *testing.T) {
	en := &store.Entry{ID: "TASKS.9", Subject: "agents.cto.tasks.code_review", Payload: []byte("p")}
	headers := map[string][]string{
		"X-Idempotency-Key":    {"k-1"},
		"x-agent":              {"cto"},
		"Nats-Msg-Id":          {"orig"},
		"nats-expected-stream": {"OLD"},
		"Jsdlq-Replay-Of":      {"TASKS.1"},
		"Jsdlq-Instruction":    {"stale"},
	}
	plan := store.Plan{Modifications: triage.Modifications{Instructions: []string{"line one\nline two", "second"},
		AlternateAgent: "backend", AlternateSubject: "agents.backend.tasks.code_review", TargetModel: "m"}}
	m := replay.Message(en, en.Payload, headers, plan, "hallucination_loop", 3)
	want := nats.Header{
		"X-Idempotency-Key":    {"k-1"},
		"x-agent":              {"backend"},
		"Jsdlq-Replay-Of":      {"TASKS.9"},
		"Jsdlq-Replay-Attempt": {"3"},
		"Jsdlq-Strategy":       {"hallucination_loop"},
		"Jsdlq-Instruction":    {"line one line two", "second"},
		"Jsdlq-Target-Model":   {"m"},
	}
	if diff := cmp.Diff(want, m.Header); diff != "" {
		t.Errorf("Message() headers (-want +got):\n%s", diff)
	}
	if m.Subject != plan.AlternateSubject || string(m.Data) != "p" {
		t.Errorf("Message() = %s %q, want %s %q", m.Subject, m.Data, plan.AlternateSubject, "p")
	}
}

// BenchmarkReplay measures one replay end to end on the emulators (claim,
// idempotency lookup, policy, breaker, payload, publish, record), without
// Cloud Tasks' dispatch; it reports the Firestore operations per replay.
func BenchmarkReplay(b *testing.B) {
	e := setup(b)
	h := replay.New(replay.Config{}, replay.Deps{Store: e.store, Policy: e.policy, Publisher: e.js})
	ids := make([]string, b.N)
	for i := range ids {
		// One tenant per entry: ten failures of one tenant would open its breaker.
		ids[i] = e.newEntry(b, spec{id: "TASKS." + strconv.Itoa(1000+i), tenant: "bench-" + strconv.Itoa(i)}).ID
	}
	before := e.store.Ops()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := h.Replay(e.ctx, ids[i], 1, tasks.Name(ids[i], 1))
		if err != nil || res.Outcome != replay.OutcomeReplayed {
			b.Fatalf("Replay(%s) = %+v, %v", ids[i], res, err)
		}
	}
	b.StopTimer()
	ops := e.store.Ops()
	b.ReportMetric(float64(ops.Reads-before.Reads)/float64(b.N), "reads/op")
	b.ReportMetric(float64(ops.Writes-before.Writes)/float64(b.N), "writes/op")
}

// A replay that recovered its entry but failed after the move (here: before
// its breaker probe's report) answers with an error, so Cloud Tasks
// delivers the task again. That redelivery finishes the recovery: the probe
// is reported, which closes the breaker, and the entry is not counted
// twice. It is safe to repeat because MarkRecovered only counts the move it
// makes, and repeats the steps after it. Another task's redelivery changes
// nothing.
func TestRedeliveryFinishesTheRecovery(t *testing.T) {
	tests := []struct {
		name    string
		attempt int
		outcome string
		breaker string
	}{
		{"the recovering task", 1, replay.OutcomeSkipped, store.BreakerClosed},
		{"another task", 2, replay.OutcomeSkipped, store.BreakerHalfOpen},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			id := "TASKS." + strconv.Itoa(310+i)
			en := e.newEntry(t, spec{id: id})
			now := time.Now().UTC()
			e.breaker(t, store.Breaker{Tenant: tenant, State: store.BreakerHalfOpen, OpenedAt: now, HalfOpenAt: now,
				ProbeEntry: en.ID, ProbeAt: now, UpdatedAt: now})
			kit := agentkit.New(e.js, agentkit.WithFirestore(e.fs), agentkit.WithAgent("backend"))
			if ran, err := kit.Once(e.ctx, en.Task(), func(context.Context) error { return nil }); err != nil || !ran {
				t.Fatalf("Once() = %v, %v", ran, err)
			}
			// The first delivery claimed the probe and recovered it, then
			// failed before reporting the probe.
			if _, err := e.store.Transition(e.ctx, en.ID, store.Change{From: []store.Status{store.Scheduled}, To: store.Replaying, By: replay.By,
				Apply: func(x *store.Entry) error { x.BreakerProbe = true; return nil }}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.Transition(e.ctx, en.ID, store.Change{From: []store.Status{store.Replaying}, To: store.Recovered, By: replay.By,
				Count: &store.Metrics{ReplaysRecovered: 1}}); err != nil {
				t.Fatal(err)
			}

			h := replay.New(replay.Config{}, replay.Deps{Store: e.store, Policy: e.policy, Publisher: e.js})
			res, err := h.Replay(e.ctx, en.ID, tc.attempt, tasks.Name(en.ID, tc.attempt))
			if err != nil || res.Outcome != tc.outcome {
				t.Fatalf("Replay(%s, %d) = %+v, %v; want %s", en.ID, tc.attempt, res, err, tc.outcome)
			}
			if br, err := e.store.GetBreaker(e.ctx, tenant); err != nil || br.State != tc.breaker {
				t.Errorf("breaker after the redelivery = %+v, %v; want %s", br, err, tc.breaker)
			}
			m, err := e.store.ReadMetrics(e.ctx, store.Hour(time.Now()))
			if err != nil || m.ReplaysRecovered != 1 {
				t.Errorf("replays_recovered = %d, %v; want 1", m.ReplaysRecovered, err)
			}
			if got, err := e.store.GetMeta(e.ctx, en.ID); err != nil || got.Status != store.Recovered {
				t.Errorf("entry %s = %v, %v; want recovered", en.ID, got, err)
			}
			e.wantMsgs(t, 0)
		})
	}
}
