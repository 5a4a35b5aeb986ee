package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/auth"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/config"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// The triage endpoint's callers in these tests: the triage agent's service
// account, another account the emulator signs for, and the audience their
// tokens are for.
const (
	triageSA       = "ceo@test.iam.gserviceaccount.com"
	otherSA        = "intruder@test.iam.gserviceaccount.com"
	triageAudience = "https://jsdlq-api.test"
)

// triageServer serves a console over st (e's store when nil) with the
// triage endpoint for triageSA, its tokens verified with the Cloud Tasks
// emulator's keys (at jwks when set), answering through an operator of st.
func (e *env) triageServer(t *testing.T, st *store.Store, opts ...auth.Option) *httptest.Server {
	t.Helper()
	op := e.op
	if st == nil {
		st = e.st
	} else {
		op = operator.New(st, e.sched)
	}
	a, err := auth.New(config.Auth{Mode: config.AuthEmulator, Audience: triageAudience, AllowedEmails: []string{triageSA}}, e.ct.Host, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(console.New(st, op, nil, console.WithTriage(a, op.TriageAnswerer())).Handler())
	t.Cleanup(srv.Close)
	return srv
}

// token is an ID token the emulator signs for account and audience.
func (e *env) token(t *testing.T, account, audience string) string {
	t.Helper()
	return strings.TrimPrefix(testenv.MintToken(t, e.ct.Client, e.queue, account, audience), "Bearer ")
}

// triageTask is the triage task of the entry id of tenant in status, at
// the moment the entry entered its status (now for an entry that does not
// exist).
func (e *env) triageTask(t *testing.T, tenant, id string, status store.Status) jevent.TriageTask {
	t.Helper()
	task := jevent.TriageTask{Schema: jevent.TriageSchema, NotificationID: "n-0123456789abcdef0123456789abcdef", EntryID: id, Tenant: tenant,
		Agent: "ceo", Status: string(status), Answers: jevent.TriageAnswers(string(status)), Summary: "entry " + id, At: time.Now().UTC()}
	if en, err := e.st.GetMeta(testenv.Context(t), id); err == nil && len(en.History) > 0 {
		task.At = en.History[len(en.History)-1].At
	}
	return task
}

func triageBody(t *testing.T, task jevent.TriageTask, a agentkit.TriageAnswer) string {
	t.Helper()
	b, err := json.Marshal(a.Request(task))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A triage agent answers through the endpoint as it would in-process: the
// answer is applied under the gates and recorded as the identity the token
// proves, in the triage_agent role; a redelivered answer finds the entry
// decided. Every forged, malformed, cross-tenant or unauthorised answer is
// refused with its documented status, and nothing changes.
func TestTriageEndpoint(t *testing.T) {
	e := newEnv(t, nil)
	srv := e.triageServer(t, nil)
	e.seed(t, "acme", "TASKS.1", store.Escalated, `{"a":1}`)
	e.seed(t, "acme", "TASKS.2", store.AwaitingApproval, `{"a":2}`, ruled("governance", triage.Governance))
	e.seed(t, "acme", "TASKS.3", store.Escalated, "", func(en *store.Entry) { en.Payload, en.PayloadMissing = nil, true })
	e.seed(t, "globex", "TASKS.4", store.Escalated, `{"g":4}`)
	tok := e.token(t, triageSA, triageAudience)
	url := srv.URL + agentkit.TriagePath
	replay1 := e.triageTask(t, "acme", "TASKS.1", store.Escalated)
	fix := agentkit.ReplayAnswer(nil, map[string]string{"X-Fix": "1"})

	before := e.snapshot(t)
	refused := []struct {
		name, token, body string
		want              int
	}{
		{"no token", "", triageBody(t, replay1, fix), 401},
		{"a token of another account", e.token(t, otherSA, triageAudience), triageBody(t, replay1, fix), 401},
		{"a token for another audience", e.token(t, triageSA, "https://elsewhere.test"), triageBody(t, replay1, fix), 401},
		{"a forged token", tok[:len(tok)-4] + "AAAA", triageBody(t, replay1, fix), 401},
		{"not JSON", tok, "answer=replay", 400},
		{"an unknown field", tok, strings.Replace(triageBody(t, replay1, fix), `"answer"`, `"actor":"someone","answer"`, 1), 400},
		{"no task", tok, `{"answer":"replay"}`, 400},
		{"no moment of the decision", tok, triageBody(t, func() jevent.TriageTask { c := replay1; c.At = time.Time{}; return c }(), fix), 400},
		{"another schema", tok, strings.Replace(triageBody(t, replay1, fix), jevent.TriageSchema, "jsdlq.triage.v0", 1), 400},
		{"an answer the task does not offer", tok, triageBody(t, replay1, agentkit.Approve(nil, nil)), 400},
		{"a discard without a reason", tok, triageBody(t, replay1, agentkit.Discard(" ")), 400},
		{"a reason on two lines", tok, triageBody(t, replay1, agentkit.Discard("a\nb")), 400},
		{"a tenant no name can be", tok, triageBody(t, e.triageTask(t, "ac\x07me", "TASKS.1", store.Escalated), fix), 400},
		{"an entry id no entry can have", tok, triageBody(t, e.triageTask(t, "acme", "../TASKS.1", store.Escalated), fix), 400},
		{"a jsdlq header", tok, triageBody(t, replay1, agentkit.ReplayAnswer(nil, map[string]string{"Jsdlq-Strategy": "x"})), 422},
		{"the task's identity", tok, triageBody(t, replay1, agentkit.ReplayAnswer(nil, map[string]string{"X-Tenant-ID": "globex"})), 422},
		{"another tenant's entry", tok, triageBody(t, e.triageTask(t, "acme", "TASKS.4", store.Escalated), fix), 404},
		{"an entry that does not exist", tok, triageBody(t, e.triageTask(t, "acme", "TASKS.99", store.Escalated), fix), 404},
		{"an entry in another status", tok, triageBody(t, e.triageTask(t, "acme", "TASKS.1", store.AwaitingApproval), agentkit.Approve(nil, nil)), 409},
		{"a rule kept for approvers", tok, triageBody(t, e.triageTask(t, "acme", "TASKS.2", store.AwaitingApproval), agentkit.Approve(nil, nil)), 403},
		{"an entry without its payload", tok, triageBody(t, e.triageTask(t, "acme", "TASKS.3", store.Escalated), fix), 422},
	}
	for _, c := range refused {
		code, body, _ := exchange(t, "POST", url, c.token, c.body)
		if code != c.want || !strings.Contains(body, `"error"`) {
			t.Errorf("%s: POST %s = %d %s, want %d with an error", c.name, agentkit.TriagePath, code, body, c.want)
		}
		if strings.Contains(body, "globex") {
			t.Errorf("%s: the answer names another tenant: %s", c.name, body)
		}
	}
	if d := cmp.Diff(before, e.snapshot(t)); d != "" {
		t.Errorf("refused answers changed something (-before +after):\n%s", d)
	}

	code, body, answer := exchange(t, "POST", url, tok, triageBody(t, replay1, fix))
	if code != 200 || answer != "answerTriage 200" || !strings.Contains(body, `"status": "scheduled"`) {
		t.Fatalf("POST %s (replay TASKS.1) = %d %s (%s), want 200, scheduled", agentkit.TriagePath, code, body, answer)
	}
	en, err := e.st.GetMeta(testenv.Context(t), "TASKS.1")
	if err != nil {
		t.Fatal(err)
	}
	// The decision is the move escalated -> scheduled; the replay it
	// scheduled may already have run (the test's queue dispatches at once),
	// so the move is looked for in the history, not in the status.
	var decided *store.Transition
	for i, tr := range en.History {
		if tr.From == string(store.Escalated) && tr.To == string(store.Scheduled) {
			decided = &en.History[i]
		}
	}
	if decided == nil || decided.By != agentkit.TriageActor(triageSA) || decided.Role != authority.TriageAgent {
		t.Errorf("TASKS.1 after the answer: %s, move to scheduled %+v; want one by %q as triage_agent",
			en.Status, decided, agentkit.TriageActor(triageSA))
	}
	// The same task delivered again: the decision it asked about is made.
	if code, body, _ := exchange(t, "POST", url, tok, triageBody(t, replay1, fix)); code != 409 {
		t.Errorf("the answer again = %d %s, want 409", code, body)
	}
}

// The Go kit's TriageClient reads the endpoint's answers back as the
// errors an in-process Answerer returns, so HandleTriage settles a task
// alike whichever answers it.
func TestTriageClient(t *testing.T) {
	e := newEnv(t, nil)
	srv := e.triageServer(t, nil)
	e.seed(t, "acme", "TASKS.1", store.Escalated, `{"a":1}`)
	e.seed(t, "acme", "TASKS.2", store.AwaitingApproval, `{"a":2}`, ruled("governance", triage.Governance))
	e.seed(t, "acme", "TASKS.3", store.Escalated, "", func(en *store.Entry) { en.Payload, en.PayloadMissing = nil, true })
	tok := e.token(t, triageSA, triageAudience)
	client := agentkit.NewTriageClient(srv.URL, func(context.Context) (string, error) { return tok, nil })
	kit := agentkit.New(nil, agentkit.WithAgent("ceo"))
	ctx := testenv.Context(t)
	tests := []struct {
		name   string
		task   jevent.TriageTask
		answer agentkit.TriageAnswer
		status string
		errs   []error
	}{
		{"applied", e.triageTask(t, "acme", "TASKS.1", store.Escalated), agentkit.Discard("nothing to fix"), "discarded", nil},
		{"decided already", e.triageTask(t, "acme", "TASKS.1", store.Escalated), agentkit.Discard("again"), "", []error{agentkit.ErrTriageDecided}},
		{"kept for approvers", e.triageTask(t, "acme", "TASKS.2", store.AwaitingApproval), agentkit.Approve(nil, nil), "",
			[]error{agentkit.ErrTriageRefused, authority.ErrPermissionDenied}},
		{"refused for good", e.triageTask(t, "acme", "TASKS.3", store.Escalated), agentkit.ReplayAnswer(nil, nil), "", []error{agentkit.ErrTriageRefused}},
		{"not found", e.triageTask(t, "acme", "TASKS.9", store.Escalated), agentkit.ReplayAnswer(nil, nil), "", []error{agentkit.ErrTriageNotFound}},
	}
	for _, tc := range tests {
		status, err := kit.Answer(ctx, client, tc.task, tc.answer)
		if status != tc.status || (tc.errs == nil) != (err == nil) {
			t.Errorf("%s: Answer = %q, %v; want %q and errors %v", tc.name, status, err, tc.status, tc.errs)
		}
		for _, want := range tc.errs {
			if !errors.Is(err, want) {
				t.Errorf("%s: Answer error %v, want %v", tc.name, err, want)
			}
		}
	}
	// Without a valid token the answer is an error a retry can help (NAK):
	// none of the settled outcomes.
	bad := agentkit.NewTriageClient(srv.URL, func(context.Context) (string, error) { return "not-a-token", nil })
	_, err := kit.Answer(ctx, bad, e.triageTask(t, "acme", "TASKS.3", store.Escalated), agentkit.Discard("x"))
	for _, settled := range []error{agentkit.ErrTriageDecided, agentkit.ErrTriageRefused, agentkit.ErrTriageNotFound, agentkit.ErrBadAnswer} {
		if err == nil || errors.Is(err, settled) {
			t.Errorf("Answer with a bad token = %v, want an error other than %v", err, settled)
		}
	}
}
