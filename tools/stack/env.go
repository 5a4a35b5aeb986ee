package stack

// Endpoints are where a local stack's servers listen (host:port each) and the
// replay queue's full name: what the pipeline's processes need to find each
// other. make up, the chaos tests and the load driver each run such a stack.
type Endpoints struct {
	Project    string
	Firestore  string
	PubSub     string
	CloudTasks string
	NATS       string
	Functions  string
	Queue      string
	// WebhookQueue, when set, is the webhook deliveries' queue: the
	// flush fans tenant notifications out to it, for /Deliver.
	WebhookQueue string
	// SecretsKeyFile, when set, is the local key file that seals the
	// webhooks' signing secrets (secretbox.CreateLocalKey makes it).
	SecretsKeyFile string
}

// TasksAccount is the service account the replay tasks' OIDC tokens name, as
// Terraform's tasks account is named.
func (e Endpoints) TasksAccount() string {
	return "jsdlq-tasks@" + e.Project + ".iam.gserviceaccount.com"
}

// TriageAccount is the triage agent's service account: the one identity the
// local console's triage endpoint accepts answers from (ConsoleTriageEnv),
// and the one MintTriageToken proves.
func (e Endpoints) TriageAccount() string {
	return "jsdlq-triage-agent@" + e.Project + ".iam.gserviceaccount.com"
}

// ConsoleTriageEnv turns on the triage endpoint of the console reached at
// consoleURL: tokens the Cloud Tasks emulator signed for TriageAccount, for
// the console's URL (docs/console.md, "The triage endpoint").
func (e Endpoints) ConsoleTriageEnv(consoleURL string) []string {
	return []string{
		"CONSOLE_TRIAGE_AGENTS=" + e.TriageAccount(),
		"CONSOLE_TRIAGE_AUTH=emulator",
		"CONSOLE_TRIAGE_AUDIENCE=" + consoleURL,
	}
}

// ClientEnv points every client of the pipeline at the stack: the emulator
// hosts, NATS, the queue and replay's URL, and the emulator's OIDC mode on
// the replay side, the webhook settings when there is a webhook queue and
// the secrets' local key when there is one (docs/local-stack.md lists
// them).
func (e Endpoints) ClientEnv() []string {
	replay := "http://" + e.Functions + "/Replay"
	env := []string{
		"GOOGLE_CLOUD_PROJECT=" + e.Project,
		"FIRESTORE_EMULATOR_HOST=" + e.Firestore,
		"PUBSUB_EMULATOR_HOST=" + e.PubSub,
		"CLOUD_TASKS_EMULATOR_HOST=" + e.CloudTasks,
		"NATS_URL=nats://" + e.NATS,
		"TASKS_QUEUE=" + e.Queue,
		"REPLAY_URL=" + replay,
		"TASKS_SERVICE_ACCOUNT=" + e.TasksAccount(),
		"AUTH_MODE=emulator",
		"AUTH_AUDIENCE=" + replay,
		"AUTH_ALLOWED_EMAILS=" + e.TasksAccount(),
	}
	if e.WebhookQueue != "" {
		// Local mode: the tenants' endpoints are on this machine, over
		// http; jsdlq's own addresses stay refused.
		env = append(env,
			"WEBHOOKS_QUEUE="+e.WebhookQueue,
			"WEBHOOK_DELIVER_URL=http://"+e.Functions+"/Deliver",
			"WEBHOOK_SERVICE_ACCOUNT="+e.TasksAccount(),
			"WEBHOOK_LOCAL=true",
		)
	}
	if e.SecretsKeyFile != "" {
		env = append(env, "SECRETS_LOCAL_KEY_FILE="+e.SecretsKeyFile)
	}
	return env
}
