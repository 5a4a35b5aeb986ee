package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

func TestWebhookLifecycle(t *testing.T) {
	s, _ := newStore(t)
	ctx := testenv.Context(t)

	w, err := s.CreateWebhook(ctx, "acme", "https://hooks.acme.example/jsdlq", "ops")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := webhook.ParseSecret(w.Secret.Reveal()); err != nil || !w.Enabled || !validKeyID(w.ID) {
		t.Fatalf("CreateWebhook = %+v (secret %v), want an enabled endpoint with a whsec_ secret", w, err)
	}
	got, err := s.GetWebhook(ctx, "acme", w.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Secret != w.Secret {
		t.Errorf("GetWebhook secret differs from the created one: the stored secret must sign")
	}
	if d := cmp.Diff(w, got); d != "" {
		t.Errorf("GetWebhook (-created +read):\n%s", d)
	}
	b, _ := json.Marshal(got)
	if strings.Contains(string(b), w.Secret.Reveal()) || strings.Contains(string(b), "whsec_") {
		t.Errorf("JSON of a webhook %s shows its secret", b)
	}

	// Bad input loses nothing: another tenant's id, an unknown or malformed
	// id, a duplicate URL, a bad tenant.
	for name, call := range map[string]func() error{
		"get as globex":    func() error { _, err := s.GetWebhook(ctx, "globex", w.ID); return err },
		"delete as globex": func() error { return s.DeleteWebhook(ctx, "globex", w.ID) },
		"enable as globex": func() error { _, err := s.EnableWebhook(ctx, "globex", w.ID, "x"); return err },
		"unknown id":       func() error { return s.DeleteWebhook(ctx, "acme", "0123456789abcdef") },
		"malformed id":     func() error { return s.DeleteWebhook(ctx, "acme", "../tenant-keys/x") },
		"record unknown id": func() error {
			_, err := s.RecordWebhookAttempt(ctx, "ffffffffffffffff", WebhookAttempt{OK: true}, 3)
			return err
		},
	} {
		if err := call(); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s = %v, want ErrNotFound", name, err)
		}
	}
	if _, err := s.CreateWebhook(ctx, "acme", w.URL, "ops"); !errors.Is(err, ErrWebhookRefused) {
		t.Errorf("CreateWebhook(same URL) = %v, want ErrWebhookRefused", err)
	}
	for _, tenant := range []string{"", " acme", "a\x01"} {
		if _, err := s.CreateWebhook(ctx, tenant, "https://x.example/", "ops"); !errors.Is(err, ErrInvalid) {
			t.Errorf("CreateWebhook(tenant %q) = %v, want ErrInvalid", tenant, err)
		}
	}
	list, err := s.ListWebhooks(ctx, "acme")
	if err != nil || len(list) != 1 || list[0].ID != w.ID || !list[0].Enabled {
		t.Fatalf("ListWebhooks(acme) after refusals = %v, %v, want the one endpoint unchanged", list, err)
	}
	if other, err := s.ListWebhooks(ctx, "globex"); err != nil || len(other) != 0 {
		t.Errorf("ListWebhooks(globex) = %v, %v, want none", other, err)
	}

	for i := 1; i < MaxWebhooksPerTenant; i++ {
		if _, err := s.CreateWebhook(ctx, "acme", fmt.Sprintf("https://hooks.acme.example/%d", i), "ops"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CreateWebhook(ctx, "acme", "https://hooks.acme.example/one-too-many", "ops"); !errors.Is(err, ErrWebhookRefused) {
		t.Errorf("CreateWebhook beyond %d = %v, want ErrWebhookRefused", MaxWebhooksPerTenant, err)
	}
	if err := s.DeleteWebhook(ctx, "acme", w.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WebhookByID(ctx, w.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("WebhookByID(deleted) = %v, want ErrNotFound", err)
	}
}

// A run of failures disables the endpoint at the threshold and stages one
// webhook_disabled notification with it; more failures stage nothing more,
// a late success does not enable it, enabling starts a new run.
func TestWebhookDisabledAfterFailures(t *testing.T) {
	s, clock := newStore(t)
	ctx := testenv.Context(t)
	w, err := s.CreateWebhook(ctx, "acme", "https://hooks.acme.example/jsdlq?token=t0p", "ops")
	if err != nil {
		t.Fatal(err)
	}
	fail := WebhookAttempt{Status: 500, Error: "HTTP 500"}
	steps := []struct {
		attempt      WebhookAttempt
		wantFailures int
		wantEnabled  bool
	}{
		{fail, 1, true},
		{WebhookAttempt{OK: true, Status: 204}, 0, true},
		{fail, 1, true},
		{fail, 2, true},
		{fail, 3, false},
		{fail, 4, false},
		{WebhookAttempt{OK: true, Status: 200}, 0, false},
	}
	var disabledAt = clock.Now()
	for i, st := range steps {
		clock.Add(1)
		got, err := s.RecordWebhookAttempt(ctx, w.ID, st.attempt, 3)
		if err != nil {
			t.Fatal(err)
		}
		if got.Failures != st.wantFailures || got.Enabled != st.wantEnabled {
			t.Fatalf("step %d RecordWebhookAttempt(%+v) = failures %d enabled %v, want %d %v", i, st.attempt, got.Failures, got.Enabled, st.wantFailures, st.wantEnabled)
		}
		if i == 4 {
			disabledAt = got.DisabledAt
		}
	}
	if d := cmp.Diff([]string{"webhook_disabled"}, outboxKinds(t, s)); d != "" {
		t.Fatalf("outbox (-want +got):\n%s", d)
	}
	o, err := s.GetNotification(ctx, event.NotificationID(event.NotifyWebhookDisabled, w.ID, disabledAt))
	if err != nil {
		t.Fatal(err)
	}
	n, err := o.Event()
	if err != nil {
		t.Fatal(err)
	}
	if n.Tenant != "acme" || n.WebhookID != w.ID || n.WebhookHost != "hooks.acme.example" || strings.Contains(n.Summary, "t0p") || o.WebhooksPending {
		t.Errorf("webhook_disabled notification = %+v (webhooks pending %v), want acme's endpoint by host, no URL token, not sent to the tenant's webhooks", n, o.WebhooksPending)
	}
	got, err := s.EnableWebhook(ctx, "acme", w.ID, "ops")
	if err != nil || !got.Enabled || got.Failures != 0 || got.EnabledBy != "ops" || !got.DisabledAt.IsZero() {
		t.Errorf("EnableWebhook = %+v, %v, want enabled with a new run", got, err)
	}
}

// An entry notification is staged pending fan-out; WebhookFanOutDone clears
// it, and repeating it (a retried flush) or naming a vanished one is fine.
func TestWebhookFanOutState(t *testing.T) {
	s, _ := newStore(t)
	ctx := testenv.Context(t)
	recordSettled(t, s, "TASKS.esc", Escalated)
	pending, err := s.PendingWebhookFanOut(ctx, 10)
	if err != nil || len(pending) != 1 || pending[0].Kind != string(event.NotifyEscalated) {
		t.Fatalf("PendingWebhookFanOut = %v, %v, want the escalation", pending, err)
	}
	for range 2 {
		if err := s.WebhookFanOutDone(ctx, pending[0].ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.WebhookFanOutDone(ctx, "n-gone"); err != nil {
		t.Errorf("WebhookFanOutDone(gone) = %v, want nil", err)
	}
	if p, err := s.PendingWebhookFanOut(ctx, 10); err != nil || len(p) != 0 {
		t.Errorf("PendingWebhookFanOut after done = %v, %v, want none", p, err)
	}
	o, err := s.GetNotification(ctx, pending[0].ID)
	if err != nil || o.State != OutboxPending || o.Notification != pending[0].Notification {
		t.Errorf("outbox after fan-out = %+v, %v, want it otherwise unchanged (still pending publication)", o, err)
	}
}

// Error texts are cut to fit a document at a rune boundary: a cut inside a
// multi-byte rune would be invalid UTF-8, which Firestore refuses, and the
// attempt could then never be recorded.
func TestTruncateKeepsUTF8(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdef", 3, "abc…"},
		{"ééé", 3, "é…"},           // 2-byte runes: byte 3 is inside the second
		{"日本語", 4, "日…"},           // 3-byte runes
		{"a\xffb", 10, "a\uFFFDb"}, // invalid input made valid
	} {
		got := truncate(tc.in, tc.n)
		if got != tc.want || !utf8.ValidString(got) {
			t.Errorf("truncate(%q, %d) = %q, want %q (valid UTF-8)", tc.in, tc.n, got, tc.want)
		}
	}
}
