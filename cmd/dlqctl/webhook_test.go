package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

func TestWebhookCommands(t *testing.T) {
	e := newEnv(t)
	ctx := testenv.Context(t)
	vars := map[string]string{"DLQCTL_ACTOR": "ops@example.com", "REPLAY_URL": "https://jsdlq-replay-1.run.app/",
		"WEBHOOK_DENY_URLS": "https://jsdlq-console.example.com"}

	code, out, errOut := e.run(vars, "webhook", "add", "acme", "https://hooks.acme.example/jsdlq")
	secret := strings.TrimSpace(out)
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("webhook add = %d, stdout %q (stderr %q), want the secret alone on one line", code, out, errOut)
	}
	if _, err := webhook.ParseSecret(secret); err != nil {
		t.Fatalf("printed secret %q: %v", secret, err)
	}
	hooks, err := e.st.ListWebhooks(ctx, "acme")
	if err != nil || len(hooks) != 1 || hooks[0].Secret.Reveal() != secret || hooks[0].CreatedBy != "ops@example.com" {
		t.Fatalf("stored webhooks = %+v, %v, want one whose secret was printed", hooks, err)
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
	local := map[string]string{"WEBHOOK_LOCAL": "true", "FIRESTORE_EMULATOR_HOST": "127.0.0.1:8681", "REPLAY_URL": "http://127.0.0.1:8080/Replay"}
	if code, _, errOut := e.run(local, "webhook", "add", "acme", "http://127.0.0.1:9999/hook"); code != 0 {
		t.Errorf("local webhook add http://127.0.0.1:9999 = %d (%s), want accepted", code, errOut)
	}
	if code, _, _ := e.run(local, "webhook", "add", "acme", "http://127.0.0.1:8080/Classify"); code != exitUsage {
		t.Errorf("local webhook add of the functions host = %d, want %d", code, exitUsage)
	}
	for _, args := range [][]string{
		{"webhook"}, {"webhook", "rotate", "acme"}, {"webhook", "add", "acme"}, {"webhook", "list"},
		{"webhook", "remove", "acme"}, {"webhook", "add", " acme", "https://x.example/"},
	} {
		if code, _, _ := e.run(vars, args...); code != exitUsage {
			t.Errorf("dlqctl %q = %d, want %d", args, code, exitUsage)
		}
	}
}
