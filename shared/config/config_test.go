package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/natsconn"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

func TestLoadClassifyReportsEveryProblemAtOnce(t *testing.T) {
	_, err := LoadClassify(MapLookup(map[string]string{
		"FIRESTORE_EMULATOR_HOST": "no-port",
		"REPLAY_URL":              "ftp://x",
		"TASKS_QUEUE":             "queues/q",
	}))
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("LoadClassify(bad) = %v, want ErrInvalid", err)
	}
	for _, want := range []string{
		"GOOGLE_CLOUD_PROJECT: required but not set",
		`FIRESTORE_EMULATOR_HOST: "no-port" is not host:port`,
		`REPLAY_URL: "ftp://x" is not an absolute http/https URL`,
		`TASKS_QUEUE: "queues/q" is not projects/P/locations/L/queues/Q`,
		"TASKS_SERVICE_ACCOUNT: required but not set",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("LoadClassify(bad) error lacks %q:\n%v", want, err)
		}
	}
}

func TestLoadClassify(t *testing.T) {
	got, err := LoadClassify(MapLookup(map[string]string{
		"GOOGLE_CLOUD_PROJECT":      "p",
		"CLOUD_TASKS_EMULATOR_HOST": "127.0.0.1:8123",
		"TASKS_QUEUE":               "projects/p/locations/l/queues/dlq-replay",
		"REPLAY_URL":                "http://127.0.0.1:8080/Replay",
		"TASKS_SERVICE_ACCOUNT":     "tasks@p.iam.gserviceaccount.com",
	}))
	if err != nil {
		t.Fatalf("LoadClassify() = %v", err)
	}
	want := Classify{
		Common: Common{Project: "p", CloudTasksEmulatorHost: "127.0.0.1:8123", NATS: natsconn.Config{URL: "nats://127.0.0.1:4222"}},
		// The scheduler's own Config, emulator included: nothing to copy.
		Tasks: tasks.Config{Queue: "projects/p/locations/l/queues/dlq-replay", ReplayURL: "http://127.0.0.1:8080/Replay",
			ServiceAccount: "tasks@p.iam.gserviceaccount.com", EmulatorHost: "127.0.0.1:8123"},
		Notifications: Notifications{Topic: "dlq-notifications", Webhooks: Webhooks{EmulatorHost: "127.0.0.1:8123",
			DisableAfter: DefaultWebhookDisableAfter, Timeout: DefaultWebhookTimeout, OwnURLs: []string{"http://127.0.0.1:8080/Replay"}},
			ChangesTopic: "dlq-changes"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LoadClassify() mismatch (-want +got):\n%s", diff)
	}
}

func TestAuthModes(t *testing.T) {
	base := map[string]string{
		"GOOGLE_CLOUD_PROJECT": "p", "TASKS_QUEUE": "projects/p/locations/l/queues/q",
		"REPLAY_URL": "https://r", "TASKS_SERVICE_ACCOUNT": "t@p",
	}
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"oidc needs audience and emails", map[string]string{}, "AUTH_AUDIENCE: required when AUTH_MODE is oidc"},
		{"oidc complete", map[string]string{"AUTH_AUDIENCE": "https://r", "AUTH_ALLOWED_EMAILS": "a@p, b@p"}, ""},
		{"none allowed locally", map[string]string{"AUTH_MODE": "none"}, ""},
		{"none refused on Cloud Run", map[string]string{"AUTH_MODE": "none", "K_SERVICE": "replay"}, `AUTH_MODE: "none" is for local emulators only`},
		{"emulator refused on Cloud Run", map[string]string{"AUTH_MODE": "emulator", "K_SERVICE": "replay", "AUTH_AUDIENCE": "a", "AUTH_ALLOWED_EMAILS": "e", "CLOUD_TASKS_EMULATOR_HOST": "h:1"}, `"emulator" is for local emulators only`},
		{"emulator needs the emulator host", map[string]string{"AUTH_MODE": "emulator", "AUTH_AUDIENCE": "a", "AUTH_ALLOWED_EMAILS": "e"}, "CLOUD_TASKS_EMULATOR_HOST: required when AUTH_MODE is emulator"},
		{"unknown mode", map[string]string{"AUTH_MODE": "trust-me"}, `AUTH_MODE: "trust-me" is not one of oidc, emulator, none`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range tc.env {
				env[k] = v
			}
			r := NewReader(MapLookup(env))
			got := ReadHTTPFunction(r)
			err := r.Err()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ReadHTTPFunction(%v) = %v, want nil", tc.env, err)
				}
				if got.Mode == AuthOIDC && len(got.AllowedEmails) != 2 {
					t.Errorf("AllowedEmails = %q, want 2 trimmed items", got.AllowedEmails)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ReadHTTPFunction(%v) = %v, want an error containing %q", tc.env, err, tc.wantErr)
			}
		})
	}
}

func TestReaderTypes(t *testing.T) {
	r := NewReader(MapLookup(map[string]string{"N": "70000", "B": "maybe", "D": "-1s", "D2": "90s", "L": " a, ,b "}))
	if got := r.Int("N", 1, 1, 65535); got != 1 {
		t.Errorf("Int(N) = %d, want the default 1", got)
	}
	if got := r.Bool("B", true); !got {
		t.Errorf("Bool(B) = %v, want the default true", got)
	}
	r.Duration("D", time.Second)
	if got := r.Duration("D2", time.Second); got != 90*time.Second {
		t.Errorf("Duration(D2) = %v, want 90s", got)
	}
	if diff := cmp.Diff([]string{"a", "b"}, r.List("L")); diff != "" {
		t.Errorf("List(L) mismatch:\n%s", diff)
	}
	err := r.Err()
	for _, want := range []string{"N:", "B:", "D:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Err() = %v, want it to name %s", err, want)
		}
	}
}

// LEGACY_COMPLETIONS_UNTIL ends the window in which completion records of
// older agentkits are honoured: every component reads it with the common
// variables, and dlqctl on its own.
func TestLegacyCompletionsUntil(t *testing.T) {
	tests := []struct {
		value   string // "" unset
		want    time.Time
		wantErr string
	}{
		{"", time.Time{}, ""},
		{"2026-12-01T00:00:00Z", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), ""},
		{" 2026-12-01T01:00:00+01:00 ", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), ""},
		{"2026-12-01", time.Time{}, `LEGACY_COMPLETIONS_UNTIL: "2026-12-01" is not an RFC 3339 time`},
		{"72h", time.Time{}, `LEGACY_COMPLETIONS_UNTIL: "72h" is not an RFC 3339 time`},
	}
	for _, tc := range tests {
		env := map[string]string{"GOOGLE_CLOUD_PROJECT": "p"}
		if tc.value != "" {
			env["LEGACY_COMPLETIONS_UNTIL"] = tc.value
		}
		r := NewReader(MapLookup(env))
		got := ReadCommon(r).LegacyCompletionsUntil
		alone, aloneErr := LoadLegacyCompletionsUntil(MapLookup(env))
		for _, res := range []struct {
			got time.Time
			err error
		}{{got, r.Err()}, {alone, aloneErr}} {
			if !res.got.Equal(tc.want) || (res.err == nil) != (tc.wantErr == "") || res.err != nil && !strings.Contains(res.err.Error(), tc.wantErr) {
				t.Errorf("LEGACY_COMPLETIONS_UNTIL=%q: %v, %v; want %v, %q", tc.value, res.got, res.err, tc.want, tc.wantErr)
			}
		}
	}
}

func TestLoadFunctions(t *testing.T) {
	tests := []struct {
		env     map[string]string
		want    Functions
		wantErr bool
	}{
		{map[string]string{}, Functions{Host: "127.0.0.1", Port: 8080, RequestTimeout: DefaultFunctionsRequestTimeout}, false},
		{map[string]string{"HOST": "0.0.0.0", "PORT": "9000", "FUNCTIONS_REQUEST_TIMEOUT": "2m"},
			Functions{Host: "0.0.0.0", Port: 9000, RequestTimeout: 2 * time.Minute}, false},
		{map[string]string{"PORT": "http"}, Functions{Host: "127.0.0.1", Port: 8080, RequestTimeout: DefaultFunctionsRequestTimeout}, true},
		{map[string]string{"FUNCTIONS_REQUEST_TIMEOUT": "2h"}, Functions{Host: "127.0.0.1", Port: 8080, RequestTimeout: 2 * time.Hour}, true},
		{map[string]string{"FUNCTIONS_REQUEST_TIMEOUT": "soon"}, Functions{Host: "127.0.0.1", Port: 8080, RequestTimeout: DefaultFunctionsRequestTimeout}, true},
	}
	for _, tt := range tests {
		got, err := LoadFunctions(MapLookup(tt.env))
		if (err != nil) != tt.wantErr {
			t.Errorf("LoadFunctions(%v) error = %v, want error %v", tt.env, err, tt.wantErr)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("LoadFunctions(%v) mismatch (-want +got):\n%s", tt.env, diff)
		}
	}
}

// dlqctl checks each setting when a command needs it, so nothing is
// required here and an unset variable is empty (NATS_URL: the local stack).
func TestLoadDlqctl(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want Dlqctl
	}{
		{"nothing set", map[string]string{}, Dlqctl{NATS: natsconn.Config{URL: DefaultNATSURL},
			Webhooks: Webhooks{DisableAfter: DefaultWebhookDisableAfter, Timeout: DefaultWebhookTimeout}}},
		{"everything set", map[string]string{
			"GOOGLE_CLOUD_PROJECT": "p", "TASKS_QUEUE": "projects/p/locations/l/queues/q", "REPLAY_URL": "https://r",
			"TASKS_SERVICE_ACCOUNT": "t@p", "CLOUD_TASKS_EMULATOR_HOST": "127.0.0.1:8123", "NATS_URL": "nats://n:4222",
			"NATS_CREDS": "/c", "DLQCTL_TENANT": "acme", "DLQCTL_ACTOR": "ops", "USER": "ann",
		}, Dlqctl{
			Project: "p",
			Tasks: tasks.Config{Queue: "projects/p/locations/l/queues/q", ReplayURL: "https://r", ServiceAccount: "t@p",
				EmulatorHost: "127.0.0.1:8123"},
			NATS: natsconn.Config{URL: "nats://n:4222", Creds: "/c"},
			Webhooks: Webhooks{EmulatorHost: "127.0.0.1:8123", DisableAfter: DefaultWebhookDisableAfter, Timeout: DefaultWebhookTimeout,
				OwnURLs: []string{"https://r"}},
			Tenant: "acme", Actor: "ops", User: "ann",
		}},
		{"webhook local without the emulators stays off", map[string]string{"WEBHOOK_LOCAL": "true"}, Dlqctl{
			NATS:     natsconn.Config{URL: DefaultNATSURL},
			Webhooks: Webhooks{DisableAfter: DefaultWebhookDisableAfter, Timeout: DefaultWebhookTimeout},
		}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, LoadDlqctl(MapLookup(tt.env))); diff != "" {
			t.Errorf("LoadDlqctl(%s) mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
}

func TestLoadCloudTasksEmulator(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want CloudTasksEmulator
	}{
		{map[string]string{}, CloudTasksEmulator{}},
		{map[string]string{"CLOUD_TASKS_EMULATOR_HOST": "127.0.0.1:9123", "CLOUD_TASKS_EMULATOR_DATA_DIR": "/d"},
			CloudTasksEmulator{HostPort: "127.0.0.1:9123", DataDir: "/d"}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, LoadCloudTasksEmulator(MapLookup(tt.env))); diff != "" {
			t.Errorf("LoadCloudTasksEmulator(%v) mismatch (-want +got):\n%s", tt.env, diff)
		}
	}
}

func TestLoadDeliver(t *testing.T) {
	env := map[string]string{
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
	got, err := LoadDeliver(MapLookup(env))
	if err != nil {
		t.Fatal(err)
	}
	want := Deliver{
		Common: Common{Project: "p", FirestoreEmulatorHost: "127.0.0.1:8681", CloudTasksEmulatorHost: "127.0.0.1:8123",
			NATS: natsconn.Config{URL: DefaultNATSURL}},
		Auth: Auth{Mode: AuthEmulator, Audience: "http://127.0.0.1:8080/Deliver", AllowedEmails: []string{"hooks@p"}},
		Webhooks: Webhooks{Queue: "projects/p/locations/l/queues/dlq-webhooks", DeliverURL: "http://127.0.0.1:8080/Deliver",
			ServiceAccount: "hooks@p", EmulatorHost: "127.0.0.1:8123", DisableAfter: 3, Timeout: 2 * time.Second, Local: true,
			OwnURLs: []string{"http://127.0.0.1:8080/Replay", "http://127.0.0.1:8080/Deliver", "http://127.0.0.1:8070",
				"https://classify.example", "https://api.example"}},
		Secrets: Secrets{LocalKeyFile: "/w/.local/secrets.key"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("LoadDeliver() (-want +got):\n%s", d)
	}

	_, err = LoadDeliver(MapLookup(map[string]string{
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
			t.Errorf("LoadDeliver(bad) error lacks %q:\n%v", want, err)
		}
	}
	_, err = LoadDeliver(MapLookup(map[string]string{"GOOGLE_CLOUD_PROJECT": "p", "WEBHOOK_LOCAL": "true"}))
	for _, want := range []string{"WEBHOOKS_QUEUE: required but not set", "WEBHOOK_LOCAL: is for the local stack only"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadDeliver(no queue, local without emulators) error lacks %q:\n%v", want, err)
		}
	}
}
