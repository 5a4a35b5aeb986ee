package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/natsconn"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

func TestLoadConfig(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want dlqctlConfig
	}{
		{"nothing set", map[string]string{}, dlqctlConfig{NATS: natsconn.Config{URL: config.DefaultNATSURL},
			Webhooks: config.Webhooks{DisableAfter: config.DefaultWebhookDisableAfter, Timeout: config.DefaultWebhookTimeout}}},
		{"everything set", map[string]string{
			"GOOGLE_CLOUD_PROJECT": "p", "TASKS_QUEUE": "projects/p/locations/l/queues/q", "REPLAY_URL": "https://r",
			"TASKS_SERVICE_ACCOUNT": "t@p", "CLOUD_TASKS_EMULATOR_HOST": "127.0.0.1:8123", "NATS_URL": "nats://n:4222",
			"NATS_CREDS": "/c", "DLQCTL_TENANT": "acme", "DLQCTL_ACTOR": "ops", "USER": "ann",
		}, dlqctlConfig{
			Project: "p",
			Tasks: tasks.Config{Queue: "projects/p/locations/l/queues/q", ReplayURL: "https://r", ServiceAccount: "t@p",
				EmulatorHost: "127.0.0.1:8123"},
			NATS: natsconn.Config{URL: "nats://n:4222", Creds: "/c"},
			Webhooks: config.Webhooks{EmulatorHost: "127.0.0.1:8123", DisableAfter: config.DefaultWebhookDisableAfter, Timeout: config.DefaultWebhookTimeout,
				OwnURLs: []string{"https://r"}},
			Tenant: "acme", Actor: "ops", User: "ann",
		}},
		{"webhook local without the emulators stays off", map[string]string{"WEBHOOK_LOCAL": "true"}, dlqctlConfig{
			NATS:     natsconn.Config{URL: config.DefaultNATSURL},
			Webhooks: config.Webhooks{DisableAfter: config.DefaultWebhookDisableAfter, Timeout: config.DefaultWebhookTimeout},
		}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, loadConfig(config.MapLookup(tt.env))); diff != "" {
			t.Errorf("loadConfig(%s) mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
}
