package console_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

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
	// byTenant is the transition into scheduled by acme's key, in the
	// tenant role (the replay may have run since).
	byTenant := func(id string) *store.Transition {
		t.Helper()
		en, err := e.st.GetMeta(testenv.Context(t), id)
		if err != nil {
			t.Fatal(err)
		}
		for i, h := range en.History {
			if h.To == string(store.Scheduled) && h.Role == authority.Tenant && strings.HasPrefix(h.By, "tenant-api:acme:") {
				return &en.History[i]
			}
		}
		return nil
	}
	if byTenant("TASKS.17") == nil {
		t.Error("TASKS.17 was not scheduled by acme's key in the tenant role")
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
	if h := byTenant("TASKS.11"); h == nil || !strings.HasPrefix(h.Note, "approved by tenant-api:acme:") {
		t.Errorf("TASKS.11 after the granted replay: %+v, want approved by acme's key in the tenant role", h)
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

// A bulk redrive acts in the role of whoever confirmed it, entry by entry
// through the same rule: an operator's run approves what operators may and
// leaves the entries kept for approvers alone (excluded: it cannot opt into
// them); an approver's run, opted in, approves them too. A run stored
// before roles existed acts as an operator. History records the role.
func TestBulkRedriveByRole(t *testing.T) {
	ops := authority.Actor{Name: "ops@example.com", Role: authority.Operator}
	e := newEnv(t, console.LocalActor(ops))
	ctx := testenv.Context(t)
	e.seed(t, "acme", "TASKS.1", store.Escalated, `{"p":1}`, ruled("permanent", triage.Permanent))
	e.seed(t, "acme", "TASKS.2", store.AwaitingApproval, `{"g":2}`, ruled("governance", triage.Governance))
	e.seed(t, "acme", "TASKS.3", store.Quarantined, `{"q":3}`, func(en *store.Entry) { en.Category = string(triage.Poison) }) // no rule: its category decides
	e.seed(t, "acme", "TASKS.4", store.Scheduled, `{"s":4}`, ruled("governance", triage.Governance))

	b := newBrowser(t, e.srv.URL)
	code, body := b.get("/bulk?tenant=acme")
	if code != 200 || !strings.Contains(body, `id="plan-approve">1<`) || !strings.Contains(body, `id="plan-runnow">0<`) ||
		!strings.Contains(body, "excluded: rule governance</td><td>2<") || !strings.Contains(body, "excluded: rule poison</td><td>1<") ||
		strings.Contains(body, `id="bulk-optin"`) {
		t.Fatalf("operator's plan = %d, want 1 approval, governance 2 and poison 1 excluded, no opt-in:\n%s", code, body)
	}
	code, loc, body := b.post("/bulk", url.Values{"csrf": {b.csrf}, "tenant": {"acme"}, "why": {"agents fixed"}})
	m := runLocation.FindStringSubmatch(loc)
	if code != 303 || m == nil {
		t.Fatalf("operator confirms = %d %q %s", code, loc, body)
	}
	if r := e.run(t, m[1]); r.Actor != ops.Name || r.Role != authority.Operator {
		t.Errorf("stored run by %s (%s), want ops@example.com (operator)", r.Actor, r.Role)
	}
	e.runner(t, "a", e.op)
	done := func(id string) *store.BulkRun {
		t.Helper()
		testenv.WaitFor(t, 30*time.Second, func() error {
			if r := e.run(t, id); r.State != store.BulkDone {
				return fmt.Errorf("run is %s after %d entries", r.State, r.Progress.Seen)
			}
			return nil
		})
		return e.run(t, id)
	}
	if r := done(m[1]); r.Progress.Approved != 1 || r.Progress.LeftAlone != 3 {
		t.Errorf("operator's run: %+v, want 1 approved, 3 left alone", r.Progress)
	}
	// movedBy reports whether who moved the entry into scheduled (the
	// replay may have run since).
	movedBy := func(id string, who authority.Actor) bool {
		t.Helper()
		en, err := e.st.GetMeta(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range en.History {
			if h.Actor() == who && h.To == string(store.Scheduled) {
				return true
			}
		}
		return false
	}
	if !movedBy("TASKS.1", ops) {
		t.Error("TASKS.1 was not scheduled by the operator's run, in the operator role")
	}
	for _, id := range []string{"TASKS.2", "TASKS.3", "TASKS.4"} {
		if movedBy(id, ops) {
			t.Errorf("%s (kept for approvers) was moved by the operator's run", id)
		}
	}

	// A run of before roles (no role, a category opt-in) acts as an
	// operator: it may replay the scheduled governance entry now, not
	// approve the awaiting one.
	legacy := &store.BulkRun{Filter: store.BulkFilter{Tenant: "acme", Category: string(triage.Governance)}, Include: []string{string(triage.Governance)},
		Rate: 20, Actor: "old@example.com", Reason: "from before roles"}
	if err := e.st.CreateBulkRun(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	if r := done(legacy.ID); r.Progress.RunNow != 1 || r.Progress.Approved != 0 || r.Progress.LeftAlone != 1 {
		t.Errorf("legacy run: %+v, want 1 run now, 0 approved, 1 left alone", r.Progress)
	}
	old := authority.Actor{Name: "old@example.com", Role: authority.Operator}
	if movedBy("TASKS.2", old) {
		t.Error("TASKS.2 (governance, awaiting approval) was approved by the legacy run")
	}
	if !movedBy("TASKS.4", old) {
		t.Error("TASKS.4 (governance, scheduled) was not run now by the legacy run, as old@example.com (operator)")
	}

	// An approver opts in, and its run approves the rest.
	boss := authority.Actor{Name: "boss@example.com", Role: authority.Approver}
	srv := httptest.NewServer(console.New(e.st, e.op, console.LocalActor(boss)).Handler())
	t.Cleanup(srv.Close)
	ab := newBrowser(t, srv.URL)
	if _, body := ab.get("/bulk?tenant=acme"); !strings.Contains(body, `id="bulk-optin"`) {
		t.Errorf("approver's plan shows no opt-in:\n%s", body)
	}
	if _, body := ab.get("/bulk?tenant=acme&include=approver-rules"); !strings.Contains(body, `id="plan-approve">2<`) {
		t.Errorf("approver's plan with the opt-in: want 2 approvals:\n%s", body)
	}
	code, loc, body = ab.post("/bulk", url.Values{"csrf": {ab.csrf}, "tenant": {"acme"}, "include": {"approver-rules"}, "why": {"reviewed them all"}})
	if m = runLocation.FindStringSubmatch(loc); code != 303 || m == nil {
		t.Fatalf("approver confirms with the opt-in = %d %q %s", code, loc, body)
	}
	if r := done(m[1]); r.Progress.Approved != 2 {
		t.Errorf("approver's run: %+v, want 2 approved (governance and poison)", r.Progress)
	}
	for _, id := range []string{"TASKS.2", "TASKS.3"} {
		if !movedBy(id, boss) {
			t.Errorf("%s was not approved by the approver's run, in the approver role", id)
		}
	}
}
