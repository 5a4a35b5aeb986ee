package store

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/triage"
)

func replayStore(t *testing.T) *Store {
	t.Helper()
	fs, _ := testenv.Firestore(t)
	return New(fs)
}

func replayEntry(t *testing.T, s *Store, id, tenant string, st Status) *Entry {
	t.Helper()
	e := &Entry{ID: id, EventID: id, Stream: "TASKS", StreamSeq: 1, Subject: "agents.a.tasks.b", Tenant: tenant,
		Agent: "a", IdempotencyKey: "key/" + id, Payload: []byte("p"), Kind: "explicit", Status: st}
	res, err := s.Record(testenv.Context(t), e, "test")
	if err != nil {
		t.Fatalf("Record(%s) = %v", id, err)
	}
	return res.Entry
}

// MarkRecovered counts once however often it is repeated, and closes the
// breaker of which the entry is the half-open probe.
func TestMarkRecoveredClosesProbeBreaker(t *testing.T) {
	s := replayStore(t)
	ctx := testenv.Context(t)
	e := replayEntry(t, s, "TASKS.1", "acme", Scheduled)
	now := s.Now()
	ref, _ := s.breakerRef("acme")
	if _, err := ref.Set(ctx, Breaker{Tenant: "acme", State: BreakerHalfOpen, OpenedAt: now, HalfOpenAt: now, ProbeEntry: e.ID, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	claim(t, s, e.ID)
	if _, err := s.Transition(ctx, e.ID, Change{From: []Status{Replaying}, To: Replayed, By: "test",
		Apply: func(e *Entry) error { e.BreakerProbe = true; return nil }}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		got, err := s.MarkRecovered(ctx, e.ID, []Status{Replayed}, "test", "done")
		if err != nil || got.Status != Recovered {
			t.Fatalf("MarkRecovered() #%d = %v, %v, want recovered", i+1, got, err)
		}
	}
	m, err := s.ReadMetrics(ctx, Hour(now))
	if err != nil || m.ReplaysRecovered != 1 {
		t.Errorf("replays_recovered = %d, %v, want 1", m.ReplaysRecovered, err)
	}
	b, err := s.GetBreaker(ctx, "acme")
	if err != nil || b.State != BreakerClosed {
		t.Errorf("breaker = %+v, %v, want closed", b, err)
	}
	if _, err := s.MarkRecovered(ctx, "TASKS.404", []Status{Replayed}, "test", ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("MarkRecovered(missing) = %v, want ErrNotFound", err)
	}
}

// Another tenant's entry is not found, whatever its status.
func TestTransitionScoped(t *testing.T) {
	s := replayStore(t)
	ctx := testenv.Context(t)
	e := replayEntry(t, s, "TASKS.2", "acme", Escalated)
	cases := []struct {
		tenant string
		from   Status
		want   error
	}{
		{"other", Escalated, ErrNotFound},
		{"other", Held, ErrNotFound}, // not ErrWrongStatus: that would reveal the status
		{"acme", Held, ErrWrongStatus},
	}
	for _, c := range cases {
		_, err := s.TransitionScoped(ctx, e.ID, c.tenant, Change{From: []Status{c.from}, To: Scheduled, By: "op"}, &Edit{Payload: []byte("new"), By: "op"})
		if !errors.Is(err, c.want) {
			t.Errorf("TransitionScoped(tenant %q, from %s) = %v, want %v", c.tenant, c.from, err, c.want)
		}
	}
	got, err := s.TransitionScoped(ctx, e.ID, AllTenants, Change{From: []Status{Escalated}, To: Scheduled, By: "op", Note: "approved by op"}, &Edit{Payload: []byte("new"), By: "op"})
	if err != nil {
		t.Fatalf("TransitionScoped(all tenants) = %v", err)
	}
	v, err := got.ReplayVersion()
	if err != nil || v.N != 2 || v.SHA256 != PayloadSum([]byte("new")) {
		t.Errorf("after the edit: replay version %+v, %v, want version 2 of %q", v, err, "new")
	}
	if string(got.Payload) != "p" || got.PayloadSHA256 != PayloadSum([]byte("p")) || !got.ResolvedAt.IsZero() {
		t.Errorf("after the edit: original payload %q sha %s resolved_at %v, want the original %q kept", got.Payload, got.PayloadSHA256, got.ResolvedAt, "p")
	}
	if !got.Approved() {
		t.Errorf("Approved() = false after an approval note")
	}
}

func TestApproved(t *testing.T) {
	tr := func(from, to Status, note string) Transition {
		return Transition{From: string(from), To: string(to), Note: note}
	}
	cases := []struct {
		name string
		h    []Transition
		want bool
	}{
		{"classified", []Transition{tr("", Scheduled, "")}, false},
		{"approved then claimed", []Transition{tr("", AwaitingApproval, ""), tr(AwaitingApproval, Scheduled, "approved by a"), tr(Scheduled, Replaying, "task")}, true},
		{"approved then replay now", []Transition{tr(Held, Scheduled, "approved by a"), tr(Scheduled, Scheduled, "replay now requested by b")}, true},
		// An approval stands while the replay waits for its breaker: the
		// breaker is a gate of its own, not a reason to ask the human again.
		{"approved, held by the breaker, released", []Transition{tr(AwaitingApproval, Scheduled, "approved by a"), tr(Scheduled, Replaying, "task"),
			tr(Replaying, Held, "tenant breaker open"), tr(Held, Scheduled, "tenant breaker admits it again")}, true},
		{"approved, held, sent as the probe", []Transition{tr(Quarantined, Scheduled, "approved by a"), tr(Scheduled, Held, ""),
			tr(Held, Scheduled, "breaker probe sent by b: provider back")}, true},
		{"approved and published: the next replay is judged again", []Transition{tr(AwaitingApproval, Scheduled, "approved by a"),
			tr(Scheduled, Replaying, "task"), tr(Replaying, Replayed, "published")}, false},
		{"approved, the policy asked again later", []Transition{tr(AwaitingApproval, Scheduled, "approved by a"),
			tr(Replaying, AwaitingApproval, "policy now says require_approval"), tr(AwaitingApproval, Scheduled, "replay now")}, false},
		{"a release without an approval", []Transition{tr("", Held, "tenant breaker open"), tr(Held, Scheduled, "tenant breaker admits it again")}, false},
	}
	for _, c := range cases {
		e := &Entry{History: c.h}
		if got := e.Approved(); got != c.want {
			t.Errorf("%s: Approved() = %v, want %v", c.name, got, c.want)
		}
	}
}

// The plan embeds the policy's Modifications; its document keeps the flat
// field names entries were always stored under, so older entries read the
// same and newer ones are readable by an older reader.
func TestPlanStoredFlat(t *testing.T) {
	s := replayStore(t)
	ctx := testenv.Context(t)
	e := entry("TASKS.plan", []byte("p"))
	e.Plan = Plan{DelaySeconds: 30, Budget: 2, EscalateTo: "ceo", Note: "n", Modifications: triage.Modifications{
		Instructions: []string{"be brief"}, TargetModel: "m", MaxContextTokens: 1000, MaxOutputTokens: 200,
		AlternateAgent: "backend", AlternateSubject: "agents.backend.tasks.x"}}
	if _, err := s.Record(ctx, e, "test"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(e.Plan, got.Plan); diff != "" {
		t.Errorf("Get().Plan differs (-recorded +read):\n%s", diff)
	}
	snap, err := s.fs.Collection(FailureLog).Doc(e.ID).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plan, _ := snap.Data()["plan"].(map[string]any)
	want := []string{"alternate_agent", "alternate_subject", "budget", "delay_seconds", "escalate_to", "instructions",
		"max_context_tokens", "max_output_tokens", "note", "target_model"}
	if got := slices.Sorted(maps.Keys(plan)); !slices.Equal(got, want) {
		t.Errorf("stored plan fields = %v, want %v", got, want)
	}
}
