package event_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/eventschema"
	"github.com/jsdlq/jsdlq/shared/event"
)

func sampleNotifications(at time.Time) []event.Notification {
	var out []event.Notification
	for _, k := range event.NotificationKinds {
		n := event.NewNotification(k, "acme", "subject-"+string(k), at)
		n.Summary = "what happened to " + string(k)
		switch {
		case k.IsEntry():
			n.EntryID, n.Status, n.Category, n.ReasonCode = "ORDERS.42", string(k), "permanent", "schema_mismatch"
			if k == event.NotifyEscalated {
				n.EscalateTo = "triager"
			}
		case k.IsBreaker():
			n.BreakerState, n.BreakerNote = map[event.NotificationKind]string{
				event.NotifyBreakerOpened: "open", event.NotifyBreakerHalfOpen: "half_open", event.NotifyBreakerClosed: "closed"}[k], "10 failures in 10m0s"
		case k.IsAlert():
			n.AlertName, n.AlertMessage = "dlq_stuck_replaying", "3 entries stuck"
		case k.IsWebhook():
			n.WebhookID, n.WebhookHost = "0123456789abcdef", "hooks.example.com"
		}
		out = append(out, n)
	}
	return out
}

func TestNotificationMatchesSchema(t *testing.T) {
	v, err := eventschema.Load("../../docs/notification.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range sampleNotifications(time.Date(2026, 3, 1, 12, 0, 0, 123, time.UTC)) {
		t.Run(string(n.Kind), func(t *testing.T) {
			roundTrip(t, v, n, event.Notification.Encode, event.DecodeNotification)
			want := map[string]string{"kind": string(n.Kind), "tenant": "acme", "severity": n.Kind.Severity(), "notification_id": n.ID}
			if d := cmp.Diff(want, n.Attributes()); d != "" {
				t.Errorf("Attributes() (-want +got):\n%s", d)
			}
		})
	}
}

func TestNotificationValidateRefuses(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	v, err := eventschema.Load("../../docs/notification.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*event.Notification){
		"no entry id":      func(n *event.Notification) { n.EntryID = "" },
		"unknown kind":     func(n *event.Notification) { n.Kind = "exploded" },
		"unknown severity": func(n *event.Notification) { n.Severity = "meh" },
		"no tenant":        func(n *event.Notification) { n.Tenant = "" },
	} {
		n := sampleNotifications(at)[0]
		edit(&n)
		if err := n.Validate(); err == nil {
			t.Errorf("%s: Validate() = nil, want an error", name)
		}
		b, _ := jsonOf(n)
		if err := v.Validate(b); err == nil {
			t.Errorf("%s: the schema accepts %s", name, b)
		}
	}
}

func TestNotificationIDDeterministic(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 1, time.UTC)
	a := event.NotificationID(event.NotifyEscalated, "ORDERS.1", at)
	tests := []struct {
		name string
		id   string
		same bool
	}{
		{"same transition", event.NotificationID(event.NotifyEscalated, "ORDERS.1", at), true},
		{"later transition", event.NotificationID(event.NotifyEscalated, "ORDERS.1", at.Add(time.Nanosecond)), false},
		{"other kind", event.NotificationID(event.NotifyQuarantined, "ORDERS.1", at), false},
		{"other entry", event.NotificationID(event.NotifyEscalated, "ORDERS.2", at), false},
	}
	for _, tt := range tests {
		if got := tt.id == a; got != tt.same {
			t.Errorf("%s: NotificationID equal = %v, want %v", tt.name, got, tt.same)
		}
	}
}

func TestTriageTaskMatchesSchema(t *testing.T) {
	v, err := eventschema.Load("../../docs/triage-task.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, n := range sampleNotifications(at) {
		if !n.Kind.Triage() {
			continue
		}
		task := event.NewTriageTask(n, "summarize", "escalate", "https://console.example.com/")
		b, err := jsonOf(task)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Validate(b); err != nil {
			t.Errorf("schema refuses %s: %v", b, err)
		}
		if want := "https://console.example.com/entries/ORDERS.42"; task.ConsoleURL != want {
			t.Errorf("ConsoleURL = %q, want %q", task.ConsoleURL, want)
		}
		wantAgent := map[event.NotificationKind]string{event.NotifyEscalated: "triager", event.NotifyAwaitingApproval: "ceo"}[n.Kind]
		if task.Agent != wantAgent {
			t.Errorf("%s: Agent = %q, want %q", n.Kind, task.Agent, wantAgent)
		}
	}
}

func jsonOf(v any) ([]byte, error) { return json.Marshal(v) }

// A tenant's webhooks receive what is about that tenant: not the operators'
// news about the webhooks themselves, nor an alert about the whole pipeline
// (which carries the default tenant only because every notification names one).
func TestNotificationForTenant(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		kind     event.NotificationKind
		pipeline bool
		want     bool
	}{
		{event.NotifyEscalated, false, true},
		{event.NotifyBreakerOpened, false, true},
		{event.NotifyAlertRaised, false, true},
		{event.NotifyAlertRaised, true, false},
		{event.NotifyAlertCleared, true, false},
		{event.NotifyWebhookDisabled, false, false},
	} {
		n := event.NewNotification(tc.kind, "", "s", at)
		n.Pipeline = tc.pipeline
		if got := n.ForTenant(); got != tc.want {
			t.Errorf("Notification{Kind: %s, Pipeline: %v}.ForTenant() = %v, want %v", tc.kind, tc.pipeline, got, tc.want)
		}
	}
}
