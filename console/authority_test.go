package console_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// ruled sets the rule and category the policy decided an entry under.
func ruled(rule string, c triage.Category) func(*store.Entry) {
	return func(en *store.Entry) { en.Rule, en.Category = rule, string(c) }
}

// A tenant key may act on an entry only where the entry's rule grants
// tenants: by default not on governance, poison or unknown commit state.
// Such a :replay (or :discard) answers 403 permission_denied naming the
// rule, and changes nothing: the entry's status and history, the replay
// queue and the work stream are as before. A rule that grants tenants lets
// the same key replay.
func TestTenantAPIPermissionDenied(t *testing.T) {
	e := newEnv(t, nil)
	acmeKey, _, _ := e.apiKeys(t)
	e.seed(t, "acme", "TASKS.11", store.AwaitingApproval, `{"g":1}`, ruled("governance", triage.Governance))
	e.seed(t, "acme", "TASKS.12", store.Quarantined, `{"p":1}`, ruled("poison", triage.Poison))
	e.seed(t, "acme", "TASKS.13", store.AwaitingApproval, `{"u":1}`, ruled("uncertain-side-effects", triage.UnknownCommitState))
	e.seed(t, "acme", "TASKS.14", store.Escalated, `{"c":1}`, ruled("poison-chain", triage.Poison))
	e.seed(t, "acme", "TASKS.15", store.AwaitingApproval, `{"g":2}`, ruled("commit-state", triage.UnknownCommitState))
	e.seed(t, "acme", "TASKS.16", store.Scheduled, `{"g":3}`, ruled("governance", triage.Governance))
	e.seed(t, "acme", "TASKS.17", store.Escalated, `{"x":1}`, ruled("permanent", triage.Permanent))
	base := e.srv.URL + "/api/v1/tenants/acme/entries/"

	before := e.snapshot(t)
	for _, tc := range []struct {
		id, verb, body, rule string
	}{
		{"TASKS.11", "replay", "", "governance"},
		{"TASKS.12", "replay", "", "poison"},
		{"TASKS.13", "replay", "", "uncertain-side-effects"},
		{"TASKS.14", "replay", "", "poison-chain"},
		{"TASKS.15", "replay", "", "commit-state"},
		{"TASKS.16", "replay", "", "governance"}, // scheduled: replay now is refused too
		{"TASKS.11", "discard", `{"reason":"not needed"}`, "governance"},
		{"TASKS.12", "discard", `{"reason":"not needed"}`, "poison"},
	} {
		code, body := do(t, "POST", base+tc.id+":"+tc.verb, acmeKey, tc.body)
		var eb struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if code != 403 || json.Unmarshal([]byte(body), &eb) != nil || eb.Error.Code != "permission_denied" ||
			!strings.Contains(eb.Error.Message, `rule "`+tc.rule+`"`) {
			t.Errorf("tenant :%s of %s (rule %s) = %d %s, want 403 permission_denied naming the rule", tc.verb, tc.id, tc.rule, code, body)
		}
		// The refusal names roles, never who asked.
		if strings.Contains(body, "tenant-api:") {
			t.Errorf("tenant :%s of %s: the refusal names the key: %s", tc.verb, tc.id, body)
		}
	}
	if diff := cmp.Diff(before, e.snapshot(t)); diff != "" {
		t.Errorf("refused tenant actions changed entries, tasks or the stream (-before +after):\n%s", diff)
	}

	// A rule that names no approvers and is of no category kept for
	// approvers: the tenant replays, recorded in its role.
	if code, body := do(t, "POST", base+"TASKS.17:replay", acmeKey, ""); code != 200 {
		t.Fatalf("tenant :replay of a permanent entry = %d %s, want 200", code, body)
	}
	got, err := e.st.GetMeta(testenv.Context(t), "TASKS.17")
	if err != nil {
		t.Fatal(err)
	}
	if last := got.History[len(got.History)-1]; got.Status != store.Scheduled || last.Role != authority.Tenant || !strings.HasPrefix(last.By, "tenant-api:acme:") {
		t.Errorf("TASKS.17 after the tenant's replay = %s, last %+v; want scheduled by the key in the tenant role", got.Status, last)
	}

	// The policy grants tenants the governance rule: the same key now
	// approves. (The console's operator reads the policy anew every 30 s;
	// this console's is fresh, so it reads the override at once.)
	granting := strings.Replace(string(triage.DefaultYAML()),
		"  - name: governance\n    match: {category: [governance]}\n    action: require_approval\n    strategy: none\n    approvers: [approver]\n",
		"  - name: governance\n    match: {category: [governance]}\n    action: require_approval\n    strategy: none\n    approvers: [tenant, approver]\n", 1)
	if _, err := e.st.SavePolicyOverride(testenv.Context(t), []byte(granting)); err != nil {
		t.Fatal(err)
	}
	granted := newEnvOn(t, e)
	if code, body := do(t, "POST", granted.srv.URL+"/api/v1/tenants/acme/entries/TASKS.11:replay", acmeKey, ""); code != 200 {
		t.Fatalf("tenant :replay of governance where the rule grants tenants = %d %s, want 200", code, body)
	}
	got, err = e.st.GetMeta(testenv.Context(t), "TASKS.11")
	if err != nil {
		t.Fatal(err)
	}
	if last := got.History[len(got.History)-1]; got.Status != store.Scheduled || last.Role != authority.Tenant || !strings.HasPrefix(last.Note, "approved by tenant-api:acme:") {
		t.Errorf("TASKS.11 after the granted replay = %s, last %+v; want approved in the tenant role", got.Status, last)
	}
	// The other rules still keep their entries.
	if code, _ := do(t, "POST", granted.srv.URL+"/api/v1/tenants/acme/entries/TASKS.12:replay", acmeKey, ""); code != 403 {
		t.Errorf("tenant :replay of poison after granting governance = %d, want 403", code)
	}
}

// newEnvOn is a second console over e's store and queue, with an operator of
// its own (which reads the policy afresh).
func newEnvOn(t *testing.T, e *env, opts ...console.Option) *env {
	t.Helper()
	e2 := *e
	e2.op = operator.New(e.st, e.sched, operator.WithRunner(e.ct.Client))
	e2.srv = httptest.NewServer(console.New(e.st, e2.op, nil, append([]console.Option{console.WithTaskState(e.sched)}, opts...)...).Handler())
	t.Cleanup(e2.srv.Close)
	return &e2
}
