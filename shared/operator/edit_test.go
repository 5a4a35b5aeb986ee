package operator_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"cloud.google.com/go/firestore"
	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/authority"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
)

// refuse claims a scheduled entry and moves it back to escalated, as
// replay does when it cannot publish an approved replay
// (payload_too_large, say): the entry waits for a human again.
func (e *env) refuse(t *testing.T, id string) *store.Entry {
	t.Helper()
	if _, err := e.store.Transition(e.ctx, id, store.Change{From: []store.Status{store.Scheduled}, To: store.Replaying, By: "replay"}); err != nil {
		t.Fatal(err)
	}
	got, err := e.store.Transition(e.ctx, id, store.Change{From: []store.Status{store.Replaying}, To: store.Escalated, By: "replay", Note: "payload_too_large"})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// payloads reads every version of id's payload.
func (e *env) payloads(t *testing.T, id string) (*store.Entry, []string) {
	t.Helper()
	got, err := e.store.Get(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range got.Versions() {
		b, err := e.store.VersionPayload(e.ctx, got, v.N)
		if err != nil {
			t.Fatalf("VersionPayload(%s, %d) = %v", id, v.N, err)
		}
		out = append(out, string(b))
	}
	return got, out
}

// Each edited approval is a new version based on the one the entry
// replayed: the original and every edit stay readable, nothing is
// overwritten, and each approval's history line names the version it
// approved and its author; an approval without edits makes no version and
// names the one it replays.
func TestApproveKeepsEveryVersion(t *testing.T) {
	e := setup(t)
	en := e.entry(t, "TASKS.50", "t", store.Escalated)
	steps := []struct {
		by      string
		payload string // "" keeps the base's
		version int    // the version approved
		note    string // what the approval's history note says of it
	}{
		{"alice", `{"n":2}`, 2, "payload v2 by alice (approver) from v1: payload edited"},
		{"bob", `{"n":3}`, 3, "payload v3 by bob (approver) from v2: payload edited"},
		{"carol", "", 3, "payload v3 (by bob (approver), 7 B sha256 " + store.PayloadSum([]byte(`{"n":3}`)) + ")"},
	}
	for i, st := range steps {
		ed := operator.Edits{By: authority.Actor{Name: st.by, Role: authority.Approver}}
		if st.payload != "" {
			ed.Payload = []byte(st.payload)
		}
		got, err := e.op.Approve(e.ctx, "t", en.ID, ed)
		if err != nil {
			t.Fatalf("approval %d: Approve() = %v", i+1, err)
		}
		v, err := got.ReplayVersion()
		if err != nil || v.N != st.version {
			t.Errorf("approval %d: replay version = %d, %v, want %d", i+1, v.N, err, st.version)
		}
		last := got.History[len(got.History)-1]
		if last.By != st.by || !strings.HasPrefix(last.Note, store.ApprovalNote+" by "+st.by) || !strings.Contains(last.Note, st.note) {
			t.Errorf("approval %d: history %q by %s, want by %s naming %q", i+1, last.Note, last.By, st.by, st.note)
		}
		e.refuse(t, en.ID)
	}
	got, payloads := e.payloads(t, en.ID)
	if diff := cmp.Diff([]string{`{"n":1}`, `{"n":2}`, `{"n":3}`}, payloads); diff != "" {
		t.Errorf("versions (-want +got):\n%s", diff)
	}
	if string(got.Payload) != `{"n":1}` || got.PayloadSHA256 != store.PayloadSum([]byte(`{"n":1}`)) || got.PayloadSize != 7 {
		t.Errorf("original = %q, %d B sha256 %s; want it unchanged", got.Payload, got.PayloadSize, got.PayloadSHA256)
	}
	var bases []int
	for _, v := range got.Versions() {
		bases = append(bases, v.Base)
	}
	if diff := cmp.Diff([]int{0, 1, 2}, bases); diff != "" {
		t.Errorf("bases of the versions (-want +got):\n%s", diff)
	}
}

// An edit that empties the payload, or breaks the JSON of a JSON payload,
// is refused unless its approver confirms that risk; refused, nothing
// changes. Confirmed, it is approved and the version records the risk.
func TestRiskyEditsNeedConfirmation(t *testing.T) {
	e := setup(t)
	tests := []struct {
		name     string
		original string // the entry's payload
		edit     string
		confirm  []operator.Risk
		want     error
		recorded []string
	}{
		{"emptied", `{"n":1}`, "", nil, operator.ErrUnconfirmed, nil},
		{"emptied, confirmed", `{"n":1}`, "", []operator.Risk{operator.RiskEmpty}, nil, []string{"empty"}},
		{"blank", "some text", " \n\t", nil, operator.ErrUnconfirmed, nil},
		{"blank, confirmed", "some text", " \n\t", []operator.Risk{operator.RiskEmpty}, nil, []string{"empty"}},
		{"JSON broken", `{"n":1}`, `{"n":`, nil, operator.ErrUnconfirmed, nil},
		{"JSON broken, the wrong risk confirmed", `{"n":1}`, `{"n":`, []operator.Risk{operator.RiskEmpty}, operator.ErrUnconfirmed, nil},
		{"JSON broken, confirmed", `{"n":1}`, `{"n":`, []operator.Risk{operator.RiskInvalidJSON}, nil, []string{"invalid_json"}},
		{"text edited to text", "some text", "other {text", nil, nil, nil},
		{"JSON edited to JSON", `{"n":1}`, `[1,2]`, nil, nil, nil},
		{"a confirmation not needed is not recorded", `{"n":1}`, `{"n":2}`, []operator.Risk{operator.RiskEmpty, operator.RiskInvalidJSON}, nil, nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("TASKS.6%d", i)
			en := e.entry(t, id, "t", store.Quarantined)
			if tt.original != `{"n":1}` {
				// An approved edit to the original under test, confirmed
				// where it needs it, then the replay refused.
				if _, err := e.op.Approve(e.ctx, "t", id, operator.Edits{By: authority.Actor{Name: "setup", Role: authority.Approver}, Payload: []byte(tt.original), Confirm: []operator.Risk{operator.RiskInvalidJSON}}); err != nil {
					t.Fatal(err)
				}
				e.refuse(t, id)
			}
			before, err := e.store.GetMeta(e.ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.op.Approve(e.ctx, "t", en.ID, operator.Edits{By: alice, Payload: []byte(tt.edit), Confirm: tt.confirm})
			if !errors.Is(err, tt.want) {
				t.Fatalf("Approve(%q over %q, confirmed %v) = %v, want %v", tt.edit, tt.original, tt.confirm, err, tt.want)
			}
			if tt.want != nil {
				if !errors.Is(err, operator.ErrBadEdit) || !strings.Contains(err.Error(), "confirm") {
					t.Errorf("refusal %q is not an ErrBadEdit saying what to confirm", err)
				}
				after, err := e.store.GetMeta(e.ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if after.Status != before.Status || len(after.History) != len(before.History) || len(after.Versions()) != len(before.Versions()) {
					t.Errorf("a refused edit changed the entry: %s, %d transitions, %d versions", after.Status, len(after.History), len(after.Versions()))
				}
				return
			}
			v, _ := got.ReplayVersion()
			if diff := cmp.Diff(tt.recorded, v.Confirmed); diff != "" {
				t.Errorf("risks recorded (-want +got):\n%s", diff)
			}
			if b, err := e.store.VersionPayload(e.ctx, got, v.N); err != nil || string(b) != tt.edit {
				t.Errorf("approved version = %q, %v, want %q", b, err, tt.edit)
			}
			if note := got.History[len(got.History)-1].Note; len(tt.recorded) > 0 && !strings.Contains(note, "confirmed: "+tt.recorded[0]) {
				t.Errorf("history %q does not record the confirmation", note)
			}
		})
	}
}

// Retrying an approval makes one version, not two: the version is made in
// the transaction that moves the entry out of the status it waited in, so
// the same request again (a retried command, a triage answer delivered
// twice) finds the entry scheduled and is refused without a write; and an
// edit made on a version the entry no longer replays is refused too.
func TestApproveTwiceMakesOneVersion(t *testing.T) {
	e := setup(t)
	en := e.entry(t, "TASKS.70", "t", store.Escalated)
	ed := operator.Edits{By: alice, Payload: []byte(`{"n":2}`), SetHeaders: map[string]string{"X-Fixed": "1"}}
	if _, err := e.op.Approve(e.ctx, "t", en.ID, ed); err != nil {
		t.Fatal(err)
	}
	if _, err := e.op.Approve(e.ctx, "t", en.ID, ed); !errors.Is(err, operator.ErrWrongStatus) {
		t.Errorf("the same approval again = %v, want ErrWrongStatus", err)
	}
	task := jevent.TriageTask{EntryID: en.ID, Tenant: "t", Status: string(store.Escalated), At: en.History[0].At}
	answer := agentkit.TriageAnswer{Answer: jevent.AnswerReplay, Payload: []byte(`{"n":3}`)}
	if _, err := e.op.TriageAnswerer().AnswerTriage(e.ctx, task, answer, "agent:ceo"); !errors.Is(err, agentkit.ErrTriageDecided) {
		t.Errorf("a late triage answer with an edit = %v, want ErrTriageDecided", err)
	}
	e.refuse(t, en.ID)
	stale := ed
	stale.Base = 1 // the preview showed version 1; the entry replays 2
	if _, err := e.op.Approve(e.ctx, "t", en.ID, stale); !errors.Is(err, operator.ErrWrongStatus) || !strings.Contains(fmt.Sprint(err), "version 2") {
		t.Errorf("an edit of version 1 when the entry replays 2 = %v, want ErrWrongStatus naming version 2", err)
	}
	_, payloads := e.payloads(t, en.ID)
	if diff := cmp.Diff([]string{`{"n":1}`, `{"n":2}`}, payloads); diff != "" {
		t.Errorf("versions after the repeats (-want +got):\n%s", diff)
	}
}

// A triage agent's risky edit is refused (it has no way to confirm it): the
// entry stays with the humans its notification reached.
func TestTriageRiskyEditRefused(t *testing.T) {
	e := setup(t)
	en := e.entry(t, "TASKS.71", "t", store.Escalated)
	task := jevent.TriageTask{EntryID: en.ID, Tenant: "t", Status: string(store.Escalated), At: en.History[0].At}
	for _, p := range []string{"", "not json"} {
		answer := agentkit.TriageAnswer{Answer: jevent.AnswerReplay, Payload: []byte(p)}
		if _, err := e.op.TriageAnswerer().AnswerTriage(e.ctx, task, answer, "agent:ceo"); !errors.Is(err, agentkit.ErrTriageRefused) {
			t.Errorf("AnswerTriage(replay with payload %q) = %v, want ErrTriageRefused", p, err)
		}
	}
	if got, err := e.store.GetMeta(e.ctx, en.ID); err != nil || got.Status != store.Escalated || len(got.Versions()) != 1 {
		t.Errorf("refused answers changed the entry: %+v, %v", got, err)
	}
}

// A payload whose stored bytes no longer match their sha256 (a lost chunk,
// a hand edit) is replaced by approving an edit: the edit is version 2 and
// the corrupt original stays as it was, for the record.
func TestApproveSuppliesAPayloadForACorruptOne(t *testing.T) {
	e := setup(t)
	en := e.entry(t, "TASKS.72", "t", store.Escalated)
	if _, err := e.fs.Collection(store.FailureLog).Doc(en.ID).Update(e.ctx, []firestore.Update{{Path: "payload", Value: []byte("tampered")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Get(e.ctx, en.ID); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("Get(tampered) = %v, want ErrCorrupt", err)
	}
	got, err := e.op.Approve(e.ctx, "t", en.ID, operator.Edits{By: alice, Payload: []byte(`{"n":2}`)})
	if err != nil {
		t.Fatalf("Approve(an edit over a corrupt payload) = %v", err)
	}
	v, _ := got.ReplayVersion()
	if b, err := e.store.VersionPayload(e.ctx, got, v.N); err != nil || v.N != 2 || string(b) != `{"n":2}` {
		t.Errorf("replay version %d = %q, %v; want version 2, the edit", v.N, b, err)
	}
	if _, err := e.store.VersionPayload(e.ctx, got, 1); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("VersionPayload(1) = %v, want the original still ErrCorrupt", err)
	}
}
