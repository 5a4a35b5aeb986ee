package replay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/redrive"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// needsGovernance is a transient rule that moves transient failures into
// governance, which only an explicit opt-in may redrive.
const needsGovernance = "    set_category: governance\n    action: require_approval\n    strategy: none"

// keylessTransient lets the transient rule's keyless tasks replay on their
// own.
const keylessTransient = "    action: auto_replay\n    strategy: transient\n    require_idempotency_key: false"

// Replay's re-evaluation applies the keyless rule too: a keyless entry
// scheduled earlier (under a policy that let it replay, or before the rule
// existed) waits for a human once the policy in force requires a key; a
// rule that lets keyless tasks replay publishes it; an approval answers the
// policy's question for it like for any other.
func TestKeylessReevaluation(t *testing.T) {
	tests := []struct {
		name     string
		override []byte // the policy in force; nil the default
		approve  bool
		want     store.Status
		msgs     int
	}{
		{name: "default policy holds it", want: store.AwaitingApproval},
		{name: "rule lets it replay", override: []byte(strings.Replace(string(triage.DefaultYAML()),
			"  - name: transient\n    match: {category: [transient]}\n    action: auto_replay\n    strategy: transient",
			"  - name: transient\n    match: {category: [transient]}\n"+keylessTransient, 1)), want: store.Replayed, msgs: 1},
		{name: "defaults let it replay", override: keylessYAML(), want: store.Replayed, msgs: 1},
		{name: "held, then approved", approve: true, want: store.Replayed, msgs: 1},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := setup(t)
			en := e.newEntry(t, spec{id: fmt.Sprint("TASKS.13", i), keyless: true})
			if tt.override != nil {
				if _, err := e.store.SavePolicyOverride(e.ctx, tt.override); err != nil {
					t.Fatalf("SaveOverride() = %v", err)
				}
			}
			first := tt.want
			if tt.approve {
				first = store.AwaitingApproval
			}
			got := e.settled(t, e.schedule(t, en.ID), en.ID, first)
			if tt.override == nil && !strings.Contains(lastNote(got), triage.NoteKeyless) {
				t.Errorf("note = %q, want it to say why (%q)", lastNote(got), triage.NoteKeyless)
			}
			if tt.approve {
				if _, err := e.op.Approve(e.ctx, tenant, en.ID, operator.Edits{By: alice}); err != nil {
					t.Fatalf("Approve() = %v", err)
				}
				e.waitStatus(t, en.ID, tt.want)
			}
			e.wantMsgs(t, tt.msgs)
		})
	}
}

// lastNote is the note of the entry's last transition.
func lastNote(e *store.Entry) string {
	if len(e.History) == 0 {
		return ""
	}
	return e.History[len(e.History)-1].Note
}

// Replay's re-evaluation records the category the policy now gives the
// entry, not only its rule and action: otherwise an entry the policy moved
// into governance keeps the category classify gave it, and a redrive
// without the governance opt-in approves and publishes it.
func TestReevaluationRecordsTheCategory(t *testing.T) {
	e := setup(t)
	en := e.newEntry(t, spec{id: "TASKS.1101"})
	if en.Category != string(triage.Transient) {
		t.Fatalf("classified category = %s, want transient", en.Category)
	}
	e.overrideTransient(t, needsGovernance)
	got := e.settled(t, e.schedule(t, en.ID), en.ID, store.AwaitingApproval)
	if got.Category != string(triage.Governance) || got.Rule != "transient" || got.Action != string(triage.RequireApproval) {
		t.Errorf("after the re-evaluation: category, rule, action = %s, %s, %s, want governance, transient, require_approval",
			got.Category, got.Rule, got.Action)
	}
	if got.ReasonCode != en.ReasonCode {
		t.Errorf("reason code = %s, want %s (the failure did not change)", got.ReasonCode, en.ReasonCode)
	}

	redriveOnce := func(include []string) *store.RedriveProgress {
		t.Helper()
		p := &store.RedriveProgress{}
		run := &redrive.Run{Store: e.store, Actions: e.op, Query: store.Query{Tenant: tenant, Status: store.AwaitingApproval},
			Include: include, Scope: store.AllTenants, By: authority.Actor{Name: "ops@example.com", Role: authority.Approver}, Rate: 100, Progress: p,
			Save: func(context.Context) error { return nil }}
		if err := run.Do(e.ctx); err != nil {
			t.Fatalf("redrive(include %v) = %v", include, err)
		}
		return p
	}
	if p := redriveOnce(nil); p.Approved != 0 || p.LeftAlone != 1 {
		t.Errorf("redrive without the governance opt-in: %s, want the entry left alone", redrive.Summary(p))
	}
	if n := len(e.msgs(t)); n != 0 {
		t.Fatalf("messages after a redrive without the opt-in = %d, want 0", n)
	}
	if p := redriveOnce([]string{redrive.OptInApproverRules}); p.Approved != 1 {
		t.Errorf("redrive with the governance opt-in: %s, want it approved", redrive.Summary(p))
	}
	e.waitStatus(t, en.ID, store.Replayed)
}

// A half-open breaker's probe that leaves the replay path unpublished is
// released: the breaker reopens (and picks another probe after its
// cooldown). Replay marks the probe on the entry only with the publish, so
// the release must not depend on that mark. Unreleased, the breaker stayed
// half-open with a probe that was never sent, and reconcile's settling
// closed it for a keyless probe, though nothing had shown the tenant
// recovered.
func TestUnpublishedProbeIsReleased(t *testing.T) {
	tests := []struct {
		name string
		spec spec
		// earlier: the probe was admitted by an earlier delivery, which
		// failed before it could publish (a 503 from JetStream).
		earlier  bool
		override string // the transient rule's body, if changed
		want     store.Status
	}{
		{name: "publish refused for good, keyless",
			spec: spec{id: "TASKS.1201", keyless: true, stream: "OTHER"}, override: keylessTransient, want: store.Escalated},
		{name: "publish refused for good, keyed",
			spec: spec{id: "TASKS.1202", stream: "OTHER"}, want: store.Escalated},
		{name: "admitted earlier, then gated by the policy",
			spec: spec{id: "TASKS.1203", keyless: true}, earlier: true, override: needsGovernance, want: store.AwaitingApproval},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := setup(t)
			en := e.newEntry(t, tt.spec)
			now := time.Now().UTC()
			e.breaker(t, store.Breaker{Tenant: tenant, State: store.BreakerHalfOpen, OpenedAt: now.Add(-time.Hour), HalfOpenAt: now, UpdatedAt: now})
			if tt.earlier {
				if ok, probe, err := e.store.BreakerAdmit(e.ctx, tenant, en.ID, "replay"); !ok || !probe || err != nil {
					t.Fatalf("BreakerAdmit(%s) = %t, %t, %v, want the probe", en.ID, ok, probe, err)
				}
			}
			if tt.override != "" {
				e.overrideTransient(t, tt.override)
			}
			e.settled(t, e.schedule(t, en.ID), en.ID, tt.want)
			e.wantMsgs(t, 0)
			b, err := e.store.GetBreaker(e.ctx, tenant)
			if err != nil || b.State != store.BreakerOpen || b.ProbeEntry != "" {
				t.Fatalf("breaker = %s with probe %q (%v), want open without a probe", b.State, b.ProbeEntry, err)
			}
			// Nothing is left for reconcile to settle.
			if got, err := e.store.SettleProbe(e.ctx, tenant, 0, "reconcile"); got != "" || err != nil {
				t.Errorf("SettleProbe() = %q, %v, want nothing to settle", got, err)
			}
		})
	}
}
