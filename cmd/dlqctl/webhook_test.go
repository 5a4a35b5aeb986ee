package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/secrettest"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/hooksecret"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

func TestWebhookCommands(t *testing.T) {
	e := newEnv(t)
	ctx := testenv.Context(t)
	box, keyFile := secrettest.Box(t)
	vars := map[string]string{"DLQCTL_ACTOR": "ops@example.com", "REPLAY_URL": "https://jsdlq-replay-1.run.app/",
		"WEBHOOK_DENY_URLS": "https://jsdlq-console.example.com", "FIRESTORE_EMULATOR_HOST": testenv.FirestoreHost(t), "SECRETS_LOCAL_KEY_FILE": keyFile}

	code, out, errOut := e.run(vars, "webhook", "add", "acme", "https://hooks.acme.example/jsdlq")
	secret := strings.TrimSpace(out)
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("webhook add = %d, stdout %q (stderr %q), want the secret alone on one line", code, out, errOut)
	}
	if _, err := webhook.ParseSecret(secret); err != nil {
		t.Fatalf("printed secret %q: %v", secret, err)
	}
	hooks, err := e.st.ListWebhooks(ctx, "acme")
	if err != nil || len(hooks) != 1 || hooks[0].Secret != "" || hooks[0].CreatedBy != "ops@example.com" {
		t.Fatalf("stored webhooks = %+v, %v, want one, its secret sealed", hooks, err)
	}
	if sec, _, err := hooksecret.Open(ctx, box, hooks[0]); err != nil || sec.Reveal() != secret {
		t.Fatalf("the stored secret opens to %v, want the printed one", err)
	}
	id := hooks[0].ID

	code, out, _ = e.run(vars, "webhook", "list", "acme")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "enabled") || strings.Contains(out, secret[6:]) {
		t.Errorf("webhook list = %d, %q, want %s enabled and no secret", code, out, id)
	}
	code, out, _ = e.run(vars, "webhook", "list", "acme", "--json")
	var listed []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed) != 1 || strings.Contains(out, "whsec_") {
		t.Errorf("webhook list --json = %d, %q, want one endpoint without its secret", code, out)
	}

	// Refused URLs (exit 2) and refused endpoints (exit 4) change nothing.
	for _, tt := range []struct {
		url  string
		want int
	}{
		{"http://hooks.acme.example/", exitUsage},
		{"/relative", exitUsage},
		{"hooks.acme.example", exitUsage},
		{"https://127.0.0.1:9000/", exitUsage},
		{"https://localhost/", exitUsage},
		{"https://10.0.0.8/", exitUsage},
		{"https://169.254.169.254/", exitUsage},
		{"https://jsdlq-replay-1.run.app/hook", exitUsage},
		{"https://jsdlq-console.example.com/api", exitUsage},
		{"https://hooks.acme.example/jsdlq", exitConflict},
	} {
		if code, out, _ := e.run(vars, "webhook", "add", "acme", tt.url); code != tt.want || out != "" {
			t.Errorf("webhook add acme %q = %d, %q, want %d and nothing printed", tt.url, code, out, tt.want)
		}
	}
	// A tenant-limited caller and another tenant's id are refused.
	if code, _, _ := e.run(map[string]string{"DLQCTL_TENANT": "globex"}, "webhook", "list", "acme"); code != exitUsage {
		t.Errorf("webhook list acme as globex = %d, want %d", code, exitUsage)
	}
	for _, sub := range []string{"remove", "enable"} {
		if code, _, _ := e.run(vars, "webhook", sub, "globex", id); code != exitNotFound {
			t.Errorf("webhook %s globex <acme's id> = %d, want %d", sub, code, exitNotFound)
		}
	}
	if hooks, _ := e.st.ListWebhooks(ctx, "acme"); len(hooks) != 1 || !hooks[0].Enabled {
		t.Fatalf("after refusals acme has %+v, want its one endpoint unchanged", hooks)
	}

	// Disabled by failures, enabled again.
	if _, err := e.st.RecordWebhookAttempt(ctx, id, store.WebhookAttempt{Status: 500, Error: "HTTP 500"}, 1); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := e.run(vars, "webhook", "list", "acme"); code != 0 || !strings.Contains(out, "disabled") || !strings.Contains(out, "HTTP 500") {
		t.Errorf("webhook list of a disabled endpoint = %d, %q", code, out)
	}
	if code, out, _ := e.run(vars, "webhook", "enable", "acme", id); code != 0 || !strings.Contains(out, "enabled") {
		t.Errorf("webhook enable = %d, %q", code, out)
	}
	if w, err := e.st.GetWebhook(ctx, "acme", id); err != nil || !w.Enabled || w.Failures != 0 || w.EnabledBy != "ops@example.com" {
		t.Errorf("after enable = %+v, %v", w, err)
	}
	if code, _, _ := e.run(vars, "webhook", "remove", "acme", id); code != 0 {
		t.Errorf("webhook remove = %d", code)
	}
	if code, _, _ := e.run(vars, "webhook", "remove", "acme", id); code != exitNotFound {
		t.Errorf("webhook remove (again) = %d, want %d", code, exitNotFound)
	}

	// Local mode (the local stack, with the emulators) allows http and
	// loopback, never jsdlq's own addresses.
	local := map[string]string{"WEBHOOK_LOCAL": "true", "FIRESTORE_EMULATOR_HOST": "127.0.0.1:8681", "REPLAY_URL": "http://127.0.0.1:8080/Replay", "SECRETS_LOCAL_KEY_FILE": keyFile}
	if code, _, errOut := e.run(local, "webhook", "add", "acme", "http://127.0.0.1:9999/hook"); code != 0 {
		t.Errorf("local webhook add http://127.0.0.1:9999 = %d (%s), want accepted", code, errOut)
	}
	for _, own := range []string{"http://127.0.0.1:8080/Classify", "http://localhost:8080/", "http://127.1:8080/", "http://[::1]:8080/"} {
		if code, _, _ := e.run(local, "webhook", "add", "acme", own); code != exitUsage {
			t.Errorf("local webhook add %s (the functions host) = %d, want %d", own, code, exitUsage)
		}
	}
	// Without a key to seal it, no endpoint is added.
	noKey := map[string]string{"DLQCTL_ACTOR": "ops@example.com"}
	if code, _, errOut := e.run(noKey, "webhook", "add", "acme", "https://hooks.acme.example/other"); code != exitUsage || !strings.Contains(errOut, "SECRETS_KMS_KEY") {
		t.Errorf("webhook add without a sealing key = %d %q, want %d naming SECRETS_KMS_KEY", code, errOut, exitUsage)
	}
	for _, args := range [][]string{
		{"webhook"}, {"webhook", "rotate", "acme"}, {"webhook", "add", "acme"}, {"webhook", "list"},
		{"webhook", "remove", "acme"}, {"webhook", "add", " acme", "https://x.example/"}, {"webhook", "reseal", "acme"},
	} {
		if code, _, _ := e.run(vars, args...); code != exitUsage {
			t.Errorf("dlqctl %q = %d, want %d", args, code, exitUsage)
		}
	}
}

// webhook reseal seals the clear secret of an endpoint added before
// secrets were sealed and rewraps the sealed ones; run again it changes
// nothing that matters (the same secrets, sealed); a tenant-limited
// caller may not run it.
func TestWebhookReseal(t *testing.T) {
	e := newEnv(t)
	ctx := testenv.Context(t)
	box, keyFile := secrettest.Box(t)
	vars := map[string]string{"DLQCTL_ACTOR": "ops@example.com", "FIRESTORE_EMULATOR_HOST": testenv.FirestoreHost(t), "SECRETS_LOCAL_KEY_FILE": keyFile}
	sealed, sec, err := hooksecret.Create(ctx, e.st, box, "acme", "https://hooks.acme.example/new", "ops")
	if err != nil {
		t.Fatal(err)
	}
	clear, _ := webhook.NewSecret()
	old := "00112233445566aa"
	if _, err := e.fs.Collection(store.Webhooks).Doc(old).Set(ctx, map[string]any{"tenant": "globex", "url": "https://hooks.globex.example/old",
		"secret": clear.Reveal(), "enabled": true, "created_at": time.Now(), "created_by": "ops"}); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := e.run(map[string]string{"DLQCTL_TENANT": "acme", "SECRETS_LOCAL_KEY_FILE": keyFile, "FIRESTORE_EMULATOR_HOST": testenv.FirestoreHost(t)}, "webhook", "reseal"); code != exitUsage {
		t.Errorf("webhook reseal as a tenant-limited caller = %d, want %d", code, exitUsage)
	}
	for run := 1; run <= 2; run++ {
		code, out, errOut := e.run(vars, "webhook", "reseal", "--json")
		var r hooksecret.Report
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("webhook reseal #%d = %d %q %q", run, code, out, errOut)
		}
		want := hooksecret.Report{Sealed: 1, Rewrapped: 1}
		if run == 2 {
			want = hooksecret.Report{Rewrapped: 2}
		}
		if r.Sealed != want.Sealed || r.Rewrapped != want.Rewrapped || r.Changed != 0 || len(r.Failed) != 0 {
			t.Errorf("webhook reseal #%d = %+v, want %+v", run, r, want)
		}
	}
	for id, want := range map[string]webhook.Secret{old: clear, sealed.ID: sec} {
		w, err := e.st.WebhookByID(ctx, id)
		if err != nil || w.Secret != "" {
			t.Fatalf("after reseal %s = %+v, %v, want sealed only", id, w, err)
		}
		if got, legacy, err := hooksecret.Open(ctx, box, w); err != nil || legacy || got != want {
			t.Errorf("after reseal %s opens to legacy %v, %v; want its own secret", id, legacy, err)
		}
	}
	// A secret that does not open (another key) is reported, exit 5.
	other, _ := secrettest.Box(t)
	if _, _, err := hooksecret.Create(ctx, e.st, other, "acme", "https://hooks.acme.example/other-key", "ops"); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := e.run(vars, "webhook", "reseal"); code != exitPartial || !strings.Contains(out, "1 failed") {
		t.Errorf("webhook reseal with a secret of another key = %d %q, want %d and 1 failed", code, out, exitPartial)
	}
}
