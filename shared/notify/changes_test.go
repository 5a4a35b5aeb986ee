package notify_test

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/changeschema"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/store"
)

// feedEntry is an entry as classify records it.
func feedEntry(id string, st store.Status) *store.Entry {
	return &store.Entry{
		ID: id, EventID: id, Stream: "TASKS", StreamSeq: 7, Subject: "agents.cto.tasks.code_review",
		Tenant: "acme", Agent: "cto", TaskID: "t-" + id, TaskType: "code_review", Kind: "terminated",
		Headers: map[string][]string{"X-Task-ID": {"t-" + id}, event.HeaderPredictedReason: {"timeout"}, event.HeaderPredictedProbability: {"0.5"}},
		Payload: []byte(`{"n":1}`), Category: "transient", ReasonCode: "timeout", Action: "auto_replay", Strategy: "backoff",
		PolicyVersion: "v1", Status: st,
	}
}

// TestChangeFeedEveryTransition drives entries through every transition
// the feed names, publishes the outbox to a topic of the Pub/Sub emulator,
// and reads the rows off its subscription: one per transition, each valid
// against the topic's schema file (terraform/modules/forensics/change.avsc),
// each what the entry's history says.
func TestChangeFeedEveryTransition(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	project := e.ps.Project()
	topic := fmt.Sprintf("projects/%s/topics/%s", project, testenv.Name(t, "changes"))
	sub := fmt.Sprintf("projects/%s/subscriptions/%s", project, testenv.Name(t, "changes-all"))
	testenv.TopicWithSubscription(t, ctx, e.ps, topic, sub)
	pub := e.ps.Publisher(topic)
	t.Cleanup(pub.Stop)
	schema, _, err := changeschema.Load(testenv.ModuleRoot(t))
	if err != nil {
		t.Fatal(err)
	}

	step := func(id string, from, to store.Status, by string, role authority.Role, note string) {
		t.Helper()
		e.clock.Add(time.Minute)
		if _, err := e.store.Transition(ctx, id, store.Change{From: []store.Status{from}, To: to, By: by, Role: role, Note: note}); err != nil {
			t.Fatalf("Transition(%s, %s→%s) = %v", id, from, to, err)
		}
	}
	record := func(id string, st store.Status) {
		t.Helper()
		if _, err := e.store.Record(ctx, feedEntry(id, st), "classify"); err != nil {
			t.Fatalf("Record(%s) = %v", id, err)
		}
	}
	// A replay that recovers: created, claimed, replayed, recovered.
	record("a", store.Scheduled)
	step("a", store.Scheduled, store.Replaying, "replay", "", "")
	step("a", store.Replaying, store.Replayed, "replay", "", "")
	// Recovered twice, as replay's Cloud Tasks retry does: the second
	// meets the status and moves nothing, so it stages no second row.
	for range 2 {
		if _, err := e.store.MarkRecovered(ctx, "a", []store.Status{store.Replayed}, "reconcile", "completed"); err != nil {
			t.Fatalf("MarkRecovered(a) = %v", err)
		}
	}
	// A human's approval, and a replay the policy hands to a human.
	record("b", store.AwaitingApproval)
	step("b", store.AwaitingApproval, store.Scheduled, "ann@example.com", authority.Approver, store.ApprovalNote+" by ann")
	step("b", store.Scheduled, store.Replaying, "replay", "", "")
	step("b", store.Replaying, store.Escalated, "replay", "", "policy changed")
	step("b", store.Escalated, store.Discarded, "bob@example.com", authority.Operator, "not worth it")
	// Set aside, and held by a breaker then released.
	record("c", store.Scheduled)
	step("c", store.Scheduled, store.Replaying, "replay", "", "")
	step("c", store.Replaying, store.Quarantined, "replay", "", "second context overflow")
	record("d", store.Scheduled)
	step("d", store.Scheduled, store.Replaying, "replay", "", "")
	step("d", store.Replaying, store.Held, "replay", "", "breaker open")
	step("d", store.Held, store.Scheduled, "reconcile", "", "breaker closed")

	f := e.flusher(notify.WithChanges(notify.PubSubTopic(pub)))
	res, err := f.Flush(ctx)
	if err != nil {
		t.Fatalf("Flush() = %v", err)
	}
	// A second flush has nothing left: every row was claimed, published
	// and settled once.
	again, err := f.Flush(ctx)
	if err != nil || again.Changes != 0 {
		t.Errorf("second Flush() = %d changes, %v, want 0, nil", again.Changes, err)
	}

	var want []event.ChangeRow
	for _, id := range []string{"a", "b", "c", "d"} {
		en, err := e.store.GetMeta(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range en.History {
			want = append(want, store.ChangeRowOf(en, tr))
		}
	}
	if res.Changes != len(want) {
		t.Errorf("Flush().Changes = %d, want %d (one per transition)", res.Changes, len(want))
	}

	msgs := receivedOn(t, e, sub)
	var got []event.ChangeRow
	transitions := map[string]bool{}
	for _, m := range msgs {
		if err := changeschema.CheckMessage(schema, m.Data); err != nil {
			t.Errorf("message %s does not fit the topic's schema: %v", m.Data, err)
		}
		r, err := event.DecodeChangeRow(m.Data)
		if err != nil {
			t.Errorf("DecodeChangeRow(%s) = %v", m.Data, err)
			continue
		}
		if diff := gocmp.Diff(r.Attributes(), m.Attributes); diff != "" {
			t.Errorf("attributes of %s (-want +got):\n%s", r.ChangeID, diff)
		}
		transitions[r.Transition] = true
		got = append(got, r)
	}
	byID := func(a, b event.ChangeRow) int { return cmp.Compare(a.ChangeID, b.ChangeID) }
	slices.SortFunc(got, byID)
	slices.SortFunc(want, byID)
	for i := range want {
		want[i].At, want[i].CreatedAt, want[i].ExpireAt = want[i].At.Truncate(time.Microsecond), want[i].CreatedAt.Truncate(time.Microsecond), want[i].ExpireAt.Truncate(time.Microsecond)
	}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("rows on the topic differ from the entries' histories (-want +got):\n%s", diff)
	}
	for _, tr := range event.ChangeTransitions {
		if !transitions[tr] {
			t.Errorf("no row of transition %q on the topic", tr)
		}
	}
	// No payload leaves without the rule's opt-in; roles, never names.
	for _, r := range got {
		if r.Payload != "" {
			t.Errorf("row %s carries a payload without feed_payload", r.ChangeID)
		}
		if r.Transition == event.ChangeApproved && r.ActorRole != string(authority.Approver) {
			t.Errorf("approved row's actor_role = %q, want approver", r.ActorRole)
		}
	}
}

// TestChangeFeedPayloadOptIn: a rule's feed_payload puts the inline payload
// into the rows, base64.
func TestChangeFeedPayloadOptIn(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	en := feedEntry("p", store.Quarantined)
	en.Plan.FeedPayload = true
	if _, err := e.store.Record(ctx, en, "classify"); err != nil {
		t.Fatal(err)
	}
	rows, err := e.store.ClaimChanges(ctx, "test", time.Minute, 10)
	if err != nil || len(rows) != 1 {
		t.Fatalf("ClaimChanges() = %d rows, %v, want 1", len(rows), err)
	}
	r, err := rows[0].Row()
	if err != nil {
		t.Fatal(err)
	}
	if r.Payload != "eyJuIjoxfQ==" {
		t.Errorf("row's payload = %q, want the payload base64", r.Payload)
	}
}

// receivedOn pulls sub until quiet.
func receivedOn(t *testing.T, e *env, sub string) []*pubsubMessage {
	t.Helper()
	saved := e.sub
	e.sub = sub
	defer func() { e.sub = saved }()
	var out []*pubsubMessage
	for _, m := range e.received(t) {
		out = append(out, &pubsubMessage{Data: m.Data, Attributes: m.Attributes})
	}
	return out
}

type pubsubMessage struct {
	Data       []byte
	Attributes map[string]string
}
