package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

// createWebhook adds an endpoint of tenant at url whose sealed secret is
// opaque bytes naming it: the store keeps sealed bytes without knowing
// their form (hooksecret's tests seal real ones).
func createWebhook(t *testing.T, s *Store, tenant, url string) (*Webhook, error) {
	t.Helper()
	id, err := NewWebhookID()
	if err != nil {
		t.Fatal(err)
	}
	return s.CreateWebhook(testenv.Context(t), NewWebhook{ID: id, Tenant: tenant, URL: url, By: "ops", SealedSecret: []byte("sealed:" + id)})
}

func TestWebhookLifecycle(t *testing.T) {
	s, _ := newStore(t)
	ctx := testenv.Context(t)

	w, err := createWebhook(t, s, "acme", "https://hooks.acme.example/jsdlq")
	if err != nil {
		t.Fatal(err)
	}
	if !w.Enabled || !validKeyID(w.ID) || string(w.SealedSecret) != "sealed:"+w.ID || w.Secret != "" {
		t.Fatalf("CreateWebhook = %+v, want an enabled endpoint with its sealed secret and no clear one", w)
	}
	got, err := s.GetWebhook(ctx, "acme", w.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(w, got); d != "" {
		t.Errorf("GetWebhook (-created +read):\n%s", d)
	}
	b, _ := json.Marshal(got)
	if strings.Contains(string(b), "sealed") || strings.Contains(string(b), "secret") {
		t.Errorf("JSON of a webhook %s shows its secret", b)
	}
	// An endpoint is never stored without its sealed secret, nor under an
	// id NewWebhookID does not make.
	for name, nw := range map[string]NewWebhook{
		"no secret":    {ID: "0123456789abcdef", Tenant: "acme", URL: "https://x.example/", By: "ops"},
		"malformed id": {ID: "../tenant-keys/x", Tenant: "acme", URL: "https://x.example/", By: "ops", SealedSecret: []byte("s")},
		"no one":       {ID: "0123456789abcdef", Tenant: "acme", URL: "https://x.example/", SealedSecret: []byte("s")},
	} {
		if _, err := s.CreateWebhook(ctx, nw); !errors.Is(err, ErrInvalid) {
			t.Errorf("CreateWebhook(%s) = %v, want ErrInvalid", name, err)
		}
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
	if _, err := createWebhook(t, s, "acme", w.URL); !errors.Is(err, ErrWebhookRefused) {
		t.Errorf("CreateWebhook(same URL) = %v, want ErrWebhookRefused", err)
	}
	for _, tenant := range []string{"", " acme", "a\x01"} {
		if _, err := createWebhook(t, s, tenant, "https://x.example/"); !errors.Is(err, ErrInvalid) {
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
		if _, err := createWebhook(t, s, "acme", fmt.Sprintf("https://hooks.acme.example/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := createWebhook(t, s, "acme", "https://hooks.acme.example/one-too-many"); !errors.Is(err, ErrWebhookRefused) {
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
	w, err := createWebhook(t, s, "acme", "https://hooks.acme.example/jsdlq?token=t0p")
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

// TestSealWebhookSecret: an endpoint added before secrets were sealed
// (its secret in clear, as the store wrote it then) gets its sealed
// secret in place of the clear one, once: a repeat, or a seal based on
// what it held before, changes nothing; EachWebhook pages through every
// tenant's endpoints.
func TestSealWebhookSecret(t *testing.T) {
	s, _ := newStore(t)
	ctx := testenv.Context(t)
	old := "0123456789abcdef"
	clear := webhook.Secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if _, err := s.fs.Collection(Webhooks).Doc(old).Set(ctx, map[string]any{"tenant": "acme", "url": "https://hooks.acme.example/old",
		"secret": string(clear), "enabled": true, "consecutive_failures": 0, "deliveries": 3, "created_at": s.Now(), "created_by": "ops"}); err != nil {
		t.Fatal(err)
	}
	legacy, err := s.WebhookByID(ctx, old)
	if err != nil || legacy.Secret != clear || legacy.SealedSecret != nil || legacy.Deliveries != 3 {
		t.Fatalf("WebhookByID(old record) = %+v, %v, want its clear secret", legacy, err)
	}
	// Other writes keep what the record holds.
	if _, err := s.RecordWebhookAttempt(ctx, old, WebhookAttempt{OK: true, Status: 204}, 3); err != nil {
		t.Fatal(err)
	}
	if changed, err := s.SealWebhookSecret(ctx, legacy, []byte("sealed-1")); err != nil || !changed {
		t.Fatalf("SealWebhookSecret(old) = %v, %v, want changed", changed, err)
	}
	sealed, err := s.WebhookByID(ctx, old)
	if err != nil || sealed.Secret != "" || string(sealed.SealedSecret) != "sealed-1" || sealed.Deliveries != 4 {
		t.Fatalf("after sealing = %+v, %v, want the sealed secret alone, the rest kept", sealed, err)
	}
	raw, err := s.fs.Collection(Webhooks).Doc(old).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := raw.Data()["secret"]; ok {
		t.Errorf("the clear secret is still in the document: %v", raw.Data())
	}
	// A concurrent sealer that read the clear record too changes nothing.
	if changed, err := s.SealWebhookSecret(ctx, legacy, []byte("sealed-2")); err != nil || changed {
		t.Errorf("SealWebhookSecret(stale) = %v, %v, want unchanged", changed, err)
	}
	// A rewrap replaces the sealed form it read.
	if changed, err := s.SealWebhookSecret(ctx, sealed, []byte("sealed-3")); err != nil || !changed {
		t.Errorf("SealWebhookSecret(rewrap) = %v, %v, want changed", changed, err)
	}
	if _, err := s.SealWebhookSecret(ctx, &Webhook{ID: "ffffffffffffffff", Tenant: "acme"}, []byte("x")); !errors.Is(err, ErrNotFound) {
		t.Errorf("SealWebhookSecret(missing) = %v, want ErrNotFound", err)
	}
	if _, err := s.SealWebhookSecret(ctx, &Webhook{ID: old, Tenant: "globex"}, []byte("x")); !errors.Is(err, ErrNotFound) {
		t.Errorf("SealWebhookSecret(as another tenant) = %v, want ErrNotFound", err)
	}

	want := []string{old}
	for i := range 150 {
		w, err := createWebhook(t, s, fmt.Sprintf("tenant-%d", i%20), fmt.Sprintf("https://hooks.example/%d", i))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, w.ID)
	}
	var got []string
	if err := s.EachWebhook(ctx, func(w *Webhook) error { got = append(got, w.ID); return nil }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("EachWebhook (-want +got):\n%s", d)
	}
}

// TestOwnURLs: none without the deployment's document, its URLs with it.
func TestOwnURLs(t *testing.T) {
	s, _ := newStore(t)
	ctx := testenv.Context(t)
	if urls, err := s.OwnURLs(ctx); err != nil || urls != nil {
		t.Errorf("OwnURLs() without the document = %q, %v, want none", urls, err)
	}
	want := []string{"https://jsdlq-deliver-abc-ew.a.run.app", "https://jsdlq-console-abc-ew.a.run.app"}
	if _, err := s.fs.Collection(Deployment).Doc(OwnURLsDoc).Set(ctx, map[string]any{"urls": want}); err != nil {
		t.Fatal(err)
	}
	if urls, err := s.OwnURLs(ctx); err != nil || !slices.Equal(urls, want) {
		t.Errorf("OwnURLs() = %q, %v, want %q", urls, err, want)
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
