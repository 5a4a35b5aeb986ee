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
			got, err := LoadReplay(MapLookup(env))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("LoadReplay(%v) = %v, want nil", tc.env, err)
				}
				if got.Mode == AuthOIDC && len(got.AllowedEmails) != 2 {
					t.Errorf("AllowedEmails = %q, want 2 trimmed items", got.AllowedEmails)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("LoadReplay(%v) = %v, want an error containing %q", tc.env, err, tc.wantErr)
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

func TestLoadFunctions(t *testing.T) {
	tests := []struct {
		env     map[string]string
		want    Functions
		wantErr bool
	}{
		{map[string]string{}, Functions{Host: "127.0.0.1", Port: 8080}, false},
		{map[string]string{"HOST": "0.0.0.0", "PORT": "9000"}, Functions{Host: "0.0.0.0", Port: 9000}, false},
		{map[string]string{"PORT": "http"}, Functions{Host: "127.0.0.1", Port: 8080}, true},
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
		{"nothing set", map[string]string{}, Dlqctl{NATS: natsconn.Config{URL: DefaultNATSURL}}},
		{"everything set", map[string]string{
			"GOOGLE_CLOUD_PROJECT": "p", "TASKS_QUEUE": "projects/p/locations/l/queues/q", "REPLAY_URL": "https://r",
			"TASKS_SERVICE_ACCOUNT": "t@p", "CLOUD_TASKS_EMULATOR_HOST": "127.0.0.1:8123", "NATS_URL": "nats://n:4222",
			"NATS_CREDS": "/c", "DLQCTL_TENANT": "acme", "DLQCTL_ACTOR": "ops", "USER": "ann",
		}, Dlqctl{
			Project: "p",
			Tasks: tasks.Config{Queue: "projects/p/locations/l/queues/q", ReplayURL: "https://r", ServiceAccount: "t@p",
				EmulatorHost: "127.0.0.1:8123"},
			NATS:   natsconn.Config{URL: "nats://n:4222", Creds: "/c"},
			Tenant: "acme", Actor: "ops", User: "ann",
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
