package agentkit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/internal/testenv"
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
	m, err := notify.TriageMsg(n, "billing", "escalate", "https://console.example")
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

// answerer answers with the error named for the entry.
type answerer map[string]error

func (a answerer) AnswerTriage(_ context.Context, task event.TriageTask, _ agentkit.TriageAnswer, by string) (string, error) {
	if by != agentkit.TriageActor("ceo") {
		return "", fmt.Errorf("answered as %q", by)
	}
	return "scheduled", a[task.EntryID]
}

// HandleTriage settles every triage task: acked when answered or when no
// retry can help, NAKed (redelivered) when one can, and a malformed task
// is terminated through Terminate, so it is recorded like any dead task.
func TestHandleTriageSettles(t *testing.T) {
	f := newFixture(t, jetstream.LimitsPolicy, true)
	ctx := testenv.Context(t)
	kit := agentkit.New(f.js, agentkit.WithAgent("ceo"))
	ans := answerer{
		"TASKS.decided":    fmt.Errorf("%w: entry is replayed", agentkit.ErrTriageDecided),
		"TASKS.refused":    fmt.Errorf("%w: payload missing", agentkit.ErrTriageRefused),
		"TASKS.elsewhere":  fmt.Errorf("%w: no such entry", agentkit.ErrTriageNotFound),
		"TASKS.unfinished": fmt.Errorf("%w: cloud tasks down", agentkit.ErrTriageUnfinished),
		"TASKS.down":       errors.New("firestore unavailable"),
	}
	decide := func(_ context.Context, task event.TriageTask) (agentkit.TriageAnswer, error) {
		if task.EntryID == "TASKS.undecided" {
			return agentkit.TriageAnswer{}, errors.New("the model is down")
		}
		return agentkit.ReplayAnswer(nil, nil), nil
	}
	tests := []struct {
		entry string
		want  agentkit.TriageOutcome
		err   error
	}{
		{"TASKS.ok", agentkit.TriageAnswered, nil},
		{"TASKS.unfinished", agentkit.TriageAnswered, agentkit.ErrTriageUnfinished},
		{"TASKS.decided", agentkit.TriageDecided, agentkit.ErrTriageDecided},
		{"TASKS.refused", agentkit.TriageRefused, agentkit.ErrTriageRefused},
		{"TASKS.elsewhere", agentkit.TriageRefused, agentkit.ErrTriageNotFound},
		{"TASKS.down", agentkit.TriageRetry, nil},
		{"TASKS.undecided", agentkit.TriageRetry, nil},
		{"malformed", agentkit.TriageMalformed, agentkit.ErrBadTriage},
	}
	for _, tt := range tests {
		h, data, _ := triageMsg(t)
		if tt.entry != "malformed" {
			var task event.TriageTask
			_ = json.Unmarshal(data, &task)
			task.EntryID = tt.entry
			data, _ = json.Marshal(task)
			h[event.HeaderTriageEntry] = []string{tt.entry}
		} else {
			data = []byte("not a triage task")
		}
		hdr := map[string]string{}
		for k, vs := range h {
			hdr[k] = vs[0]
		}
		hdr["Nats-Msg-Id"] = tt.entry
		f.publish(t, "agents.ceo.tasks.dlq_triage", data, hdr)
		msg := f.next(t)
		got, err := kit.HandleTriage(ctx, msg, ans, decide)
		if got != tt.want || (tt.err != nil && !errors.Is(err, tt.err)) || (tt.want != agentkit.TriageAnswered && err == nil) {
			t.Errorf("HandleTriage(%s) = %s, %v; want %s, %v", tt.entry, got, err, tt.want, tt.err)
		}
		again, err := f.cons.Next(jetstream.FetchMaxWait(time.Second))
		redelivered := err == nil
		if redelivered {
			_ = again.Ack()
		}
		if want := tt.want == agentkit.TriageRetry; redelivered != want {
			t.Errorf("HandleTriage(%s): redelivered = %v, want %v", tt.entry, redelivered, want)
		}
	}
	recs, err := f.js.Stream(ctx, names.RecordStream)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := recs.GetLastMsgForSubject(ctx, event.RecordSubject("TASKS"))
	if err != nil {
		t.Fatalf("no record of the malformed triage task: %v", err)
	}
	if r, err := event.ParseRecord(raw.Header, raw.Data); err != nil || r.Meta.Failure.Code != "schema_invalid" {
		t.Errorf("record = %+v, %v; want failure schema_invalid", r.Meta, err)
	}
}
