package main

import (
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/natsconn"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// dlqctlConfig is the operator CLI's configuration. The CLI checks each setting
// only when a command needs it, with its own messages (a missing
// TASKS_QUEUE does not stop dlqctl ls), so loadConfig reports nothing.
type dlqctlConfig struct {
	Project string
	// FirestoreEmulator is FIRESTORE_EMULATOR_HOST ("" = Firestore on
	// Google Cloud): listings name it, so an operator sees which store
	// answered (the client library reads the variable itself).
	FirestoreEmulator string
	// Tasks is where replays are scheduled; its fields are empty when
	// unset, and EmulatorHost also points dlqctl's own Cloud Tasks client
	// (replay --now) at the emulator.
	Tasks tasks.Config
	NATS  natsconn.Config
	// Webhooks decides which endpoints webhook add accepts.
	Webhooks config.Webhooks
	// Secrets seals the secrets of the endpoints webhook add makes, and
	// webhook reseal's.
	Secrets config.Secrets
	Tenant  string // DLQCTL_TENANT: the tenant this caller is limited to
	Actor   string // DLQCTL_ACTOR: who acts in entry history
	User    string // USER: the actor's fallback
}

// loadConfig reads the operator CLI's configuration on the shared
// config.Reader.
func loadConfig(lookup config.Lookup) dlqctlConfig {
	r := config.NewReader(lookup)
	local := config.Common{FirestoreEmulatorHost: r.String("FIRESTORE_EMULATOR_HOST", ""),
		CloudTasksEmulatorHost: r.String("CLOUD_TASKS_EMULATOR_HOST", ""), OnGoogleCloud: r.String("K_SERVICE", "") != ""}
	return dlqctlConfig{
		Project:           r.String("GOOGLE_CLOUD_PROJECT", ""),
		FirestoreEmulator: local.FirestoreEmulatorHost,
		Tasks: tasks.Config{
			Queue:          r.String("TASKS_QUEUE", ""),
			ReplayURL:      r.String("REPLAY_URL", ""),
			ServiceAccount: r.String("TASKS_SERVICE_ACCOUNT", ""),
			EmulatorHost:   r.String("CLOUD_TASKS_EMULATOR_HOST", ""),
		},
		NATS: natsconn.Config{URL: r.String("NATS_URL", config.DefaultNATSURL), Creds: r.String("NATS_CREDS", "")},
		// A malformed webhook or secrets setting is not reported (no
		// command but webhook add and reseal reads them), only never in
		// force: WEBHOOK_LOCAL or SECRETS_LOCAL_KEY_FILE without the
		// emulators stays off.
		Webhooks: config.ReadWebhooks(r, local, false),
		Secrets:  config.ReadSecrets(r, local, false),
		Tenant:   r.String("DLQCTL_TENANT", ""),
		Actor:    r.String("DLQCTL_ACTOR", ""),
		User:     r.String("USER", ""),
	}
}
