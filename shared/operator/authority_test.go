package operator_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/authority"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// decided records an entry as the policy decided it: its rule and category.
func (e *env) decided(t *testing.T, id, tenant string, st store.Status, rule string, c triage.Category) *store.Entry {
	t.Helper()
	en := &store.Entry{ID: id, EventID: id, Stream: "TASKS", StreamSeq: 1, Subject: "agents.backend.tasks.implementation",
		Tenant: tenant, Agent: "backend", Payload: []byte(`{"n":1}`), Kind: "explicit", Status: st, Rule: rule, Category: string(c),
		Headers: map[string][]string{"X-Idempotency-Key": {id + "-v1"}}}
	if st == store.Scheduled {
		en.TaskName = tasks.Name(id, 1)
	}
	res, err := e.store.Record(e.ctx, en, "classify")
	if err != nil {
		t.Fatalf("Record(%s) = %v", id, err)
	}
	return res.Entry
}

// unchanged fails unless the entry is as it was and no task of it exists:
// a refused action changes nothing.
func (e *env) unchanged(t *testing.T, what string, before *store.Entry) {
	t.Helper()
	after, err := e.store.Get(e.ctx, before.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after, cmpopts.IgnoreUnexported(store.Entry{})); diff != "" {
		t.Errorf("%s changed the entry (-before +after):\n%s", what, diff)
	}
	for _, task := range e.ct.Tasks(t, e.queue) {
		if id, _, err := tasks.ParseName(task); err == nil && id == before.ID {
			t.Errorf("%s created task %s", what, task)
		}
	}
}

// Every action asks the authority rule on the entry as its transaction
// reads it, over the policy in force: a refusal is ErrPermissionDenied
// naming the rule, and changes nothing; what is allowed records the actor's
// role in the history.
func TestAuthorityOfActions(t *testing.T) {
	e := setup(t)
	ops := authority.Actor{Name: "ops@example.com", Role: authority.Operator}
	boss := authority.Actor{Name: "boss@example.com", Role: authority.Approver}
	tenant := authority.Actor{Name: "tenant-api:acme:key-1", Role: authority.Tenant}
	viewer := authority.Actor{Name: "v@example.com", Role: authority.Viewer}

	gov := e.decided(t, "TASKS.101", "acme", store.AwaitingApproval, "governance", triage.Governance)
	poison := e.decided(t, "TASKS.102", "acme", store.Quarantined, "poison", triage.Poison)
	uncertain := e.decided(t, "TASKS.103", "acme", store.AwaitingApproval, "uncertain-side-effects", triage.UnknownCommitState)
	chain := e.decided(t, "TASKS.104", "acme", store.Escalated, "poison-chain", triage.Poison)
	perm := e.decided(t, "TASKS.105", "acme", store.Escalated, "permanent", triage.Permanent)
	sched := e.decided(t, "TASKS.106", "acme", store.Scheduled, "governance", triage.Governance)

	refusals := []struct {
		name string
		e    *store.Entry
		do   func(id string) error
	}{
		{"operator approves governance", gov, func(id string) error {
			_, err := e.op.Approve(e.ctx, "acme", id, operator.Edits{By: ops})
			return err
		}},
		{"operator approves poison", poison, func(id string) error {
			_, err := e.op.Approve(e.ctx, "acme", id, operator.Edits{By: ops, Payload: []byte(`{"fixed":true}`)})
			return err
		}},
		{"operator approves poison chain", chain, func(id string) error {
			_, err := e.op.Approve(e.ctx, store.AllTenants, id, operator.Edits{By: ops})
			return err
		}},
		{"tenant approves unknown commit state", uncertain, func(id string) error {
			_, err := e.op.Approve(e.ctx, "acme", id, operator.Edits{By: tenant})
			return err
		}},
		{"tenant discards governance", gov, func(id string) error {
			_, err := e.op.Discard(e.ctx, "acme", id, "not needed", tenant)
			return err
		}},
		{"tenant replays governance now", sched, func(id string) error {
			_, err := e.op.ReplayNow(e.ctx, "acme", id, tenant)
			return err
		}},
		{"viewer discards permanent", perm, func(id string) error {
			_, err := e.op.Discard(e.ctx, store.AllTenants, id, "looked at it", viewer)
			return err
		}},
		{"viewer approves permanent", perm, func(id string) error {
			_, err := e.op.Approve(e.ctx, store.AllTenants, id, operator.Edits{By: viewer})
			return err
		}},
	}
	for _, r := range refusals {
		before, err := e.store.Get(e.ctx, r.e.ID)
		if err != nil {
			t.Fatal(err)
		}
		err = r.do(r.e.ID)
		var d *authority.Denied
		if !errors.Is(err, operator.ErrPermissionDenied) || !errors.As(err, &d) || d.Rule != r.e.Rule {
			t.Errorf("%s = %v, want ErrPermissionDenied naming rule %q", r.name, err, r.e.Rule)
		}
		e.unchanged(t, r.name, before)
	}

	// Another tenant's entry is not found, whatever the rule: the scope
	// is decided before the authority, so a refusal tells nothing.
	if _, err := e.op.Approve(e.ctx, "other", gov.ID, operator.Edits{By: authority.Actor{Name: "tenant-api:other:key-2", Role: authority.Tenant}}); !errors.Is(err, operator.ErrNotFound) {
		t.Errorf("another tenant approves acme's governance entry = %v, want ErrNotFound", err)
	}

	// What the roles may do, done, and recorded with the role.
	allowed := []struct {
		name string
		e    *store.Entry
		by   authority.Actor
		do   func(id string) (*store.Entry, error)
	}{
		{"approver approves governance", gov, boss, func(id string) (*store.Entry, error) {
			return e.op.Approve(e.ctx, "acme", id, operator.Edits{By: boss})
		}},
		{"approver approves the poison chain", chain, boss, func(id string) (*store.Entry, error) {
			return e.op.Approve(e.ctx, store.AllTenants, id, operator.Edits{By: boss})
		}},
		{"operator discards poison", poison, ops, func(id string) (*store.Entry, error) {
			return e.op.Discard(e.ctx, store.AllTenants, id, "payload cannot be fixed", ops)
		}},
		{"operator replays a scheduled governance entry now", sched, ops, func(id string) (*store.Entry, error) {
			return e.op.ReplayNow(e.ctx, store.AllTenants, id, ops)
		}},
		{"tenant approves permanent", perm, tenant, func(id string) (*store.Entry, error) {
			return e.op.Approve(e.ctx, "acme", id, operator.Edits{By: tenant})
		}},
	}
	for _, a := range allowed {
		got, err := a.do(a.e.ID)
		if err != nil {
			t.Errorf("%s = %v, want it done", a.name, err)
			continue
		}
		last := got.History[len(got.History)-1]
		if last.Actor() != a.by {
			t.Errorf("%s: history %+v, want by %s", a.name, last, a.by)
		}
	}
	if got, err := e.store.GetMeta(e.ctx, gov.ID); err != nil || !strings.HasPrefix(got.History[len(got.History)-1].Note, "approved by boss@example.com (approver)") {
		t.Errorf("governance entry after the approval = %+v, %v, want noted approved by boss@example.com (approver)", got, err)
	}
}

// Breaker overrides are for operators and approvers; the breaker's history
// records the role.
func TestAuthorityOfBreakerOverrides(t *testing.T) {
	e := setup(t)
	for i := 1; i <= store.DefaultBreaker.Threshold; i++ {
		e.entry(t, "TASKS."+string(rune('a'+i)), "beta", store.Scheduled)
	}
	for _, by := range []authority.Actor{{Name: "v@example.com", Role: authority.Viewer}, {Name: "tenant-api:beta:key-1", Role: authority.Tenant},
		{Name: "agent:ceo", Role: authority.TriageAgent}} {
		if _, err := e.op.CloseBreaker(e.ctx, "beta", by, "looks fine"); !errors.Is(err, operator.ErrPermissionDenied) {
			t.Errorf("CloseBreaker(by %s) = %v, want ErrPermissionDenied", by, err)
		}
		if _, err := e.op.ProbeNow(e.ctx, "beta", "TASKS.b", by, "try one"); !errors.Is(err, operator.ErrPermissionDenied) {
			t.Errorf("ProbeNow(by %s) = %v, want ErrPermissionDenied", by, err)
		}
	}
	b, err := e.store.GetBreaker(e.ctx, "beta")
	if err != nil || b.State != store.BreakerOpen {
		t.Fatalf("breaker after refused overrides = %+v, %v, want still open", b, err)
	}
	ops := authority.Actor{Name: "ops@example.com", Role: authority.Operator}
	b, err = e.op.CloseBreaker(e.ctx, "beta", ops, "provider is back")
	if err != nil {
		t.Fatalf("CloseBreaker(operator) = %v", err)
	}
	if last := b.History[len(b.History)-1]; last.Actor() != ops || last.Note != "closed by ops@example.com (operator): provider is back" {
		t.Errorf("breaker history = %+v, want closed by the operator, with the role", last)
	}
}

// The rule reads the policy in force: a stored override that grants
// tenants the governance rule lets a tenant approve; one that cannot be
// read refuses every entry action (it might keep the entry for approvers)
// and changes nothing.
func TestAuthorityFollowsThePolicy(t *testing.T) {
	e := setup(t)
	tenant := authority.Actor{Name: "tenant-api:acme:key-1", Role: authority.Tenant}
	read := func(ctx context.Context) (*triage.Policy, error) {
		in, err := e.store.PolicyInForce(ctx)
		return in.Policy, err
	}
	op := operator.New(e.store, e.sched, operator.WithPolicy(read, 0))
	gov := e.decided(t, "TASKS.201", "acme", store.AwaitingApproval, "governance", triage.Governance)
	if _, err := op.Approve(e.ctx, "acme", gov.ID, operator.Edits{By: tenant}); !errors.Is(err, operator.ErrPermissionDenied) {
		t.Fatalf("tenant approves governance under the default = %v, want ErrPermissionDenied", err)
	}
	granting := strings.Replace(string(triage.DefaultYAML()),
		"  - name: governance\n    match: {category: [governance]}\n    action: require_approval\n    strategy: none\n    approvers: [approver]\n",
		"  - name: governance\n    match: {category: [governance]}\n    action: require_approval\n    strategy: none\n    approvers: [tenant, operator]\n", 1)
	if _, err := e.store.SavePolicyOverride(e.ctx, []byte(granting)); err != nil {
		t.Fatal(err)
	}
	got, err := op.Approve(e.ctx, "acme", gov.ID, operator.Edits{By: tenant})
	if err != nil || got.Status != store.Scheduled || got.History[len(got.History)-1].Role != authority.Tenant {
		t.Fatalf("tenant approves governance where the rule grants tenants = %+v, %v, want scheduled by the tenant role", got, err)
	}

	broken := operator.New(e.store, e.sched, operator.WithPolicy(func(context.Context) (*triage.Policy, error) {
		return nil, errors.New("firestore unavailable")
	}, 0))
	perm := e.decided(t, "TASKS.202", "acme", store.Escalated, "permanent", triage.Permanent)
	before, err := e.store.Get(e.ctx, perm.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := broken.Approve(e.ctx, "acme", perm.ID, operator.Edits{By: tenant}); err == nil || errors.Is(err, operator.ErrPermissionDenied) {
		t.Errorf("Approve without a readable policy = %v, want the read error", err)
	}
	if _, err := broken.Discard(e.ctx, "acme", perm.ID, "x", tenant); err == nil {
		t.Error("Discard without a readable policy succeeded")
	}
	e.unchanged(t, "actions without a readable policy", before)
}

// The triage agent's answers meet the same rule in the triage_agent role:
// by default it may not approve or discard a governance entry (refused for
// good: the entry stays with a human), and may approve a permanent one.
func TestTriageAnswersMeetTheAuthorityRule(t *testing.T) {
	e := setup(t)
	ans := e.op.TriageAnswerer()
	task := func(en *store.Entry) jevent.TriageTask {
		at := en.History[len(en.History)-1].At
		n := jevent.NewNotification(jevent.NotificationKind(en.Status), en.Tenant, en.ID, at)
		n.EntryID, n.Status = en.ID, string(en.Status)
		return jevent.NewTriageTask(n, "", "", "")
	}
	gov := e.decided(t, "TASKS.301", "acme", store.AwaitingApproval, "governance", triage.Governance)
	before, err := e.store.Get(e.ctx, gov.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []agentkit.TriageAnswer{agentkit.Approve(nil, nil), agentkit.Discard("the agent thinks it is fine")} {
		if _, err := ans.AnswerTriage(e.ctx, task(gov), a, agentkit.TriageActor("ceo")); !errors.Is(err, agentkit.ErrTriageRefused) || !errors.Is(err, operator.ErrPermissionDenied) {
			t.Errorf("triage %s of a governance entry = %v, want ErrTriageRefused (permission denied)", a.Answer, err)
		}
	}
	e.unchanged(t, "refused triage answers", before)

	perm := e.decided(t, "TASKS.302", "acme", store.Escalated, "permanent", triage.Permanent)
	status, err := ans.AnswerTriage(e.ctx, task(perm), agentkit.ReplayAnswer(nil, nil), agentkit.TriageActor("ceo"))
	if err != nil || status != string(store.Scheduled) {
		t.Fatalf("triage replay of a permanent entry = %q, %v, want scheduled", status, err)
	}
	got, err := e.store.GetMeta(e.ctx, perm.ID)
	if err != nil {
		t.Fatal(err)
	}
	if last := got.History[len(got.History)-1]; last.Actor() != (authority.Actor{Name: "agent:ceo", Role: authority.TriageAgent}) {
		t.Errorf("history after the triage answer = %+v, want agent:ceo as triage_agent", last)
	}
}
