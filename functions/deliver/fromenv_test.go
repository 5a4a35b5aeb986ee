package deliver

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/natsconn"
)

func TestLoadEnv(t *testing.T) {
	vars := map[string]string{
		"GOOGLE_CLOUD_PROJECT":      "p",
		"FIRESTORE_EMULATOR_HOST":   "127.0.0.1:8681",
		"CLOUD_TASKS_EMULATOR_HOST": "127.0.0.1:8123",
		"AUTH_MODE":                 "emulator",
		// Replay's audience in a shared environment is not deliver's.
		"AUTH_AUDIENCE":           "http://127.0.0.1:8080/Replay",
		"AUTH_ALLOWED_EMAILS":     "tasks@p",
		"REPLAY_URL":              "http://127.0.0.1:8080/Replay",
		"CONSOLE_URL":             "http://127.0.0.1:8070",
		"WEBHOOKS_QUEUE":          "projects/p/locations/l/queues/dlq-webhooks",
		"WEBHOOK_DELIVER_URL":     "http://127.0.0.1:8080/Deliver",
		"WEBHOOK_SERVICE_ACCOUNT": "hooks@p",
		"WEBHOOK_DISABLE_AFTER":   "3",
		"WEBHOOK_TIMEOUT":         "2s",
		"WEBHOOK_LOCAL":           "true",
		"WEBHOOK_DENY_URLS":       "https://classify.example, https://api.example",
		"SECRETS_LOCAL_KEY_FILE":  "/w/.local/secrets.key",
	}
	got, err := loadEnv(config.MapLookup(vars))
	if err != nil {
		t.Fatal(err)
	}
	want := env{
		Common: config.Common{Project: "p", FirestoreEmulatorHost: "127.0.0.1:8681", CloudTasksEmulatorHost: "127.0.0.1:8123",
			NATS: natsconn.Config{URL: config.DefaultNATSURL}},
		Auth: config.Auth{Mode: config.AuthEmulator, Audience: "http://127.0.0.1:8080/Deliver", AllowedEmails: []string{"hooks@p"}},
		Webhooks: config.Webhooks{Queue: "projects/p/locations/l/queues/dlq-webhooks", DeliverURL: "http://127.0.0.1:8080/Deliver",
			ServiceAccount: "hooks@p", EmulatorHost: "127.0.0.1:8123", DisableAfter: 3, Timeout: 2 * time.Second, Local: true,
			OwnURLs: []string{"http://127.0.0.1:8080/Replay", "http://127.0.0.1:8080/Deliver", "http://127.0.0.1:8070",
				"https://classify.example", "https://api.example"}},
		Secrets: config.Secrets{LocalKeyFile: "/w/.local/secrets.key"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("loadEnv() (-want +got):\n%s", d)
	}

	_, err = loadEnv(config.MapLookup(map[string]string{
		"GOOGLE_CLOUD_PROJECT": "p", "K_SERVICE": "deliver", "AUTH_MODE": "none", "WEBHOOKS_QUEUE": "dlq-webhooks",
		"WEBHOOK_DELIVER_URL": "ftp://x", "WEBHOOK_DISABLE_AFTER": "0", "WEBHOOK_TIMEOUT": "10m", "WEBHOOK_LOCAL": "yes",
	}))
	for _, want := range []string{
		`WEBHOOKS_QUEUE: "dlq-webhooks" is not projects/P/locations/L/queues/Q`,
		`WEBHOOK_DELIVER_URL: "ftp://x" is not an absolute http/https URL`,
		"WEBHOOK_SERVICE_ACCOUNT: required but not set",
		`WEBHOOK_DISABLE_AFTER: "0" is not an integer in [1, 1000]`,
		"WEBHOOK_TIMEOUT: 10m0s is over 5m0s",
		`WEBHOOK_LOCAL: "yes" is not a boolean`,
		`AUTH_MODE: "none" is for local emulators only`,
		"SECRETS_KMS_KEY: required",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("loadEnv(bad) error lacks %q:\n%v", want, err)
		}
	}
	_, err = loadEnv(config.MapLookup(map[string]string{"GOOGLE_CLOUD_PROJECT": "p", "WEBHOOK_LOCAL": "true"}))
	for _, want := range []string{"WEBHOOKS_QUEUE: required but not set", "WEBHOOK_LOCAL: is for the local stack only"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("loadEnv(no queue, local without emulators) error lacks %q:\n%v", want, err)
		}
	}
}
