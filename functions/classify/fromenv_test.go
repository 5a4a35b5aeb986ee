package classify

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/natsconn"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

func TestLoadEnvReportsEveryProblemAtOnce(t *testing.T) {
	_, err := loadEnvironment(config.MapLookup(map[string]string{
		"FIRESTORE_EMULATOR_HOST": "no-port",
		"REPLAY_URL":              "ftp://x",
		"TASKS_QUEUE":             "queues/q",
	}))
	if !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("loadEnvironment(bad) = %v, want ErrInvalid", err)
	}
	for _, want := range []string{
		"GOOGLE_CLOUD_PROJECT: required but not set",
		`FIRESTORE_EMULATOR_HOST: "no-port" is not host:port`,
		`REPLAY_URL: "ftp://x" is not an absolute http/https URL`,
		`TASKS_QUEUE: "queues/q" is not projects/P/locations/L/queues/Q`,
		"TASKS_SERVICE_ACCOUNT: required but not set",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("loadEnvironment(bad) error lacks %q:\n%v", want, err)
		}
	}
}

func TestLoadEnv(t *testing.T) {
	got, err := loadEnvironment(config.MapLookup(map[string]string{
		"GOOGLE_CLOUD_PROJECT":      "p",
		"CLOUD_TASKS_EMULATOR_HOST": "127.0.0.1:8123",
		"TASKS_QUEUE":               "projects/p/locations/l/queues/dlq-replay",
		"REPLAY_URL":                "http://127.0.0.1:8080/Replay",
		"TASKS_SERVICE_ACCOUNT":     "tasks@p.iam.gserviceaccount.com",
	}))
	if err != nil {
		t.Fatalf("loadEnvironment() = %v", err)
	}
	want := environment{
		Common: config.Common{Project: "p", CloudTasksEmulatorHost: "127.0.0.1:8123", NATS: natsconn.Config{URL: "nats://127.0.0.1:4222"}},
		// The scheduler's own Config, emulator included: nothing to copy.
		Tasks: tasks.Config{Queue: "projects/p/locations/l/queues/dlq-replay", ReplayURL: "http://127.0.0.1:8080/Replay",
			ServiceAccount: "tasks@p.iam.gserviceaccount.com", EmulatorHost: "127.0.0.1:8123"},
		Notifications: config.Notifications{Topic: "dlq-notifications", Webhooks: config.Webhooks{EmulatorHost: "127.0.0.1:8123",
			DisableAfter: config.DefaultWebhookDisableAfter, Timeout: config.DefaultWebhookTimeout, OwnURLs: []string{"http://127.0.0.1:8080/Replay"}},
			AfterCommitBudget: config.DefaultAfterCommitBudget, PauseAfterFailure: config.DefaultPauseAfterFailure, ChangesTopic: "dlq-changes"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("loadEnvironment() mismatch (-want +got):\n%s", diff)
	}
}
