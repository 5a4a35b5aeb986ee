package agentkit_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/notify"
)

// triageMsg is the triage task notify sends for an escalated entry.
func triageMsg(t *testing.T) (map[string][]string, []byte, event.TriageTask) {
	t.Helper()
	n := event.NewNotification(event.NotifyEscalated, "acme", "TASKS.7", time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))
	n.EntryID, n.Status, n.Category, n.ReasonCode, n.EscalateTo = "TASKS.7", "escalated", "permanent", "impossible_task", "ceo"
	n.Summary = "entry TASKS.7 is escalated"
	m, err := notify.TriageMsg(event.DefaultConventions, n, "billing", "escalate", "https://console.example")
	if err != nil {
		t.Fatal(err)
	}
	return m.Header, m.Data, event.NewTriageTask(n, "billing", "escalate", "https://console.example")
}

// What notify sends, agentkit reads back as it was built.
func TestParseTriageReadsWhatNotifySends(t *testing.T) {
	h, data, want := triageMsg(t)
	got, err := agentkit.ParseTriage(h, data)
	if err != nil {
		t.Fatalf("ParseTriage(notify.TriageMsg) = %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseTriage mismatch (-want +got):\n%s", diff)
	}
}

// Malformed, foreign or forged triage tasks are refused with ErrBadTriage,
// never answered.
func TestParseTriageRefuses(t *testing.T) {
	h, data, task := triageMsg(t)
	with := func(f func(*event.TriageTask)) []byte {
		c := task
		f(&c)
		b, _ := json.Marshal(c)
		return b
	}
	header := func(name, v string) map[string][]string {
		out := map[string][]string{}
		for k, vs := range h {
			out[k] = vs
		}
		out[name] = []string{v}
		return out
	}
	tests := []struct {
		name string
		h    map[string][]string
		data []byte
	}{
		{"not json", h, []byte("{")},
		{"empty body", h, nil},
		{"another schema", h, with(func(t *event.TriageTask) { t.Schema = "jsdlq.triage.v2" })},
		{"no entry", h, with(func(t *event.TriageTask) { t.EntryID = "" })},
		{"no tenant", h, with(func(t *event.TriageTask) { t.Tenant = "" })},
		{"no answers", h, with(func(t *event.TriageTask) { t.Answers = nil })},
		{"unknown answer", h, with(func(t *event.TriageTask) { t.Answers = []string{"delete_everything"} })},
		{"header names another entry", header(event.HeaderTriageEntry, "TASKS.8"), data},
		{"no entry header", header(event.HeaderTriageEntry, ""), data},
		{"header names another tenant", header(event.HeaderTenant, "globex"), data},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := agentkit.ParseTriage(tt.h, tt.data); !errors.Is(err, agentkit.ErrBadTriage) {
				t.Errorf("ParseTriage(%s) = %v, want ErrBadTriage", tt.name, err)
			}
		})
	}
}

// An answer must be one the task offers, and a discard says why.
func TestTriageAnswerCheck(t *testing.T) {
	_, _, escalated := triageMsg(t)
	awaiting := escalated
	awaiting.Answers = event.TriageAnswers("awaiting_approval")
	tests := []struct {
		name string
		task event.TriageTask
		a    agentkit.TriageAnswer
		ok   bool
	}{
		{"replay escalated", escalated, agentkit.ReplayAnswer(nil, nil), true},
		{"discard with a reason", escalated, agentkit.Discard("the repository is gone"), true},
		{"discard without a reason", escalated, agentkit.Discard(" "), false},
		{"approve escalated", escalated, agentkit.Approve(nil, nil), false},
		{"approve awaiting", awaiting, agentkit.Approve([]byte(`{}`), map[string]string{"X-Fixed": "1"}), true},
		{"replay awaiting", awaiting, agentkit.ReplayAnswer(nil, nil), false},
		{"unknown", escalated, agentkit.TriageAnswer{Answer: "ignore"}, false},
	}
	for _, tt := range tests {
		err := tt.a.Check(tt.task)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, agentkit.ErrBadAnswer)) {
			t.Errorf("%s: Check() = %v, want ok %v (else ErrBadAnswer)", tt.name, err, tt.ok)
		}
	}
}
